"""The ledger of a change: the work it saves and the work it adds, in the diagnosis' units.

Each quantity is measured on both runs the same way (on the judged requests, or the run's own
telemetry) and entered as before minus after: a positive amount is work saved, a negative one
work added. A quantity neither run lets us measure is named in `unmeasured` with why, never
guessed; one equal on both runs is neither saved nor added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from yaotu_trace.axes.base import AxisName, EngineSettings
from yaotu_trace.data.run_diff import ChangeLedger, LedgerItem
from yaotu_trace.diagnosis.diagnose import Diagnosis
from yaotu_trace.diff.measures import Columns


@dataclass(frozen=True, slots=True, kw_only=True)
class RunWork:
    """What one run is measured on: its judged rows' columns, its diagnosis, its step count and
    its failed requests (over every request of the run)."""

    columns: Columns
    rows: np.ndarray
    diagnosis: Diagnosis
    steps: int | None
    failed: int
    pool_tokens: float | None
    transfer_tokens: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkMeasure:
    """How to measure one ledger quantity on a run (None: not measurable there)."""

    name: str
    unit: str
    basis: str
    measure: Callable[[RunWork], float | None]


def _sum(column: str) -> Callable[[RunWork], float | None]:
    def total(run: RunWork) -> float | None:
        values = run.columns[column][run.rows]
        finite = values[np.isfinite(values)]
        return None if finite.size == 0 else float(finite.sum())
    return total


def _computed_prefill(run: RunWork) -> float | None:
    prompt = run.columns["prompt_len"][run.rows]
    cached = run.columns["cached_tokens"][run.rows]
    keep = np.isfinite(cached)
    return None if not keep.any() else float((prompt[keep] - cached[keep]).sum())


def _axis_metric(axis: AxisName, name: str) -> Callable[[RunWork], float | None]:
    def read(run: RunWork) -> float | None:
        value = getattr(run.diagnosis.axes[axis].metrics, name, None)
        return None if value is None else float(value)
    return read


def quantities(settings: EngineSettings) -> tuple[WorkMeasure, ...]:
    """The ledger's quantities; bytes need the KV bytes per token (--model)."""
    per_token = settings.kv_bytes_per_token

    def bytes_of(tokens: Callable[[RunWork], float | None]) -> Callable[[RunWork], float | None]:
        def read(run: RunWork) -> float | None:
            value = tokens(run)
            return None if value is None or per_token is None else value * per_token
        return read

    return (
        WorkMeasure(name="recomputed_prefill_tokens", unit="tokens",
                 basis="kv_memory's recomputed tokens after preemption (the engine's count: "
                 "the step log's recomputed_tokens or SGLang's counters; else Σ "
                 "num_preemptions · (prompt_len + output_len / 2))",
                 measure=_axis_metric(AxisName.KV_MEMORY, "recomputed_tokens")),
        WorkMeasure(name="prefill_tokens_computed", unit="tokens",
                 basis="Σ (prompt_len − cached_tokens): prompt tokens not served from the cache",
                 measure=_computed_prefill),
        WorkMeasure(name="queue_seconds", unit="s", basis="Σ (scheduled_s − arrival_s)",
                 measure=_sum("queue_s")),
        WorkMeasure(name="decode_seconds_lost_to_stalls", unit="s",
                 basis="pd_interference's decode seconds lost to stalls (gaps beyond "
                 "stall_factor × the decode step)",
                 measure=_axis_metric(AxisName.PD_INTERFERENCE, "decode_seconds_lost")),
        WorkMeasure(name="kv_pool_bytes", unit="bytes",
                 basis="KV pool tokens (kv_memory's capacity, from the step log, metrics or "
                 "--kv-capacity) × KV bytes per token (--model)",
                 measure=bytes_of(lambda run: run.pool_tokens)),
        WorkMeasure(name="transfer_bytes", unit="bytes",
                 basis="Σ prompt_len of requests whose prefill_instance is not their "
                 "decode_instance × KV bytes per token (--model)",
                 measure=bytes_of(lambda run: run.transfer_tokens)),
        WorkMeasure(name="engine_steps", unit="steps", basis="rows of the step log (--steps-*)",
                 measure=lambda run: None if run.steps is None else float(run.steps)),
        WorkMeasure(name="failed_requests", unit="requests",
                 basis="requests not completed (status not ok, or no finish time), every "
                 "request of the run", measure=lambda run: float(run.failed)),
    )


def change_ledger(before: RunWork, after: RunWork, settings: EngineSettings) -> ChangeLedger:
    """Work saved (before − after > 0) and added (< 0), each with its basis."""
    saved: list[LedgerItem] = []
    added: list[LedgerItem] = []
    unmeasured: list[str] = []
    for q in quantities(settings):
        value_b, value_a = q.measure(before), q.measure(after)
        if value_b is None or value_a is None:
            side = " and ".join(s for s, v in (("before", value_b), ("after", value_a))
                                if v is None)
            unmeasured.append(f"{q.name}: not measurable on the {side} run ({q.basis})")
            continue
        delta = value_b - value_a
        basis = f"{q.basis}; before {_number(value_b)}, after {_number(value_a)}"
        if delta > 0:
            saved.append(LedgerItem(name=q.name, value=delta, unit=q.unit, basis=basis))
        elif delta < 0:
            added.append(LedgerItem(name=q.name, value=-delta, unit=q.unit, basis=basis))
    return ChangeLedger(saved=tuple(saved), added=tuple(added), unmeasured=tuple(unmeasured))


def _number(value: float) -> str:
    """A measured amount in a basis sentence: whole above a thousand, else 4 digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
