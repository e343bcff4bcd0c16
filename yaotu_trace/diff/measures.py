"""The key measures of each axis, computed from per-request columns so that they resample.

Each measure is a function of a run's request rows, so the bootstrap (`diff.noise`) can draw
the rows again and see how much the measure moves by chance. The first measure of an axis is
its headline: the same share of work lost that the axis scores (docs/axes.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from yaotu_trace.axes.base import AxisName
from yaotu_trace.data.order_stats import median_of
from yaotu_trace.data.schema import Trace, list_arrays

Columns = Mapping[str, np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True)
class Measure:
    """One key measure: its unit, which direction is better, the columns it needs and how it is
    computed from the rows `idx` of a run's columns (None when nothing to compute it on)."""

    name: str
    axis: AxisName
    unit: str
    better: Literal["lower", "higher"]
    needs: tuple[str, ...]
    basis: str
    compute: Callable[[Columns, np.ndarray], float | None]


def _ratio(num: np.ndarray, den: np.ndarray) -> float | None:
    keep = np.isfinite(num) & np.isfinite(den)
    total = float(den[keep].sum())
    return None if total <= 0 else float(num[keep].sum()) / total


def _percentile(values: np.ndarray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    return None if finite.size == 0 else float(np.percentile(finite, q))


def _queue_share(c: Columns, idx: np.ndarray) -> float | None:
    return _ratio(c["queue_s"][idx], c["latency_s"][idx])


def _ttft(q: float) -> Callable[[Columns, np.ndarray], float | None]:
    return lambda c, idx: _percentile(c["ttft_s"][idx], q)


def _tpot(q: float) -> Callable[[Columns, np.ndarray], float | None]:
    return lambda c, idx: _percentile(c["tpot_s"][idx], q)


def _recompute_share(c: Columns, idx: np.ndarray) -> float | None:
    return _ratio(c["recomputed_tokens"][idx], c["tokens"][idx])


def _preempted_share(c: Columns, idx: np.ndarray) -> float | None:
    pre = c["num_preemptions"][idx]
    return None if pre.size == 0 else float((pre > 0).mean())


def _hit_ratio(c: Columns, idx: np.ndarray) -> float | None:
    return _ratio(c["cached_tokens"][idx], c["prompt_len"][idx])


def _stall_share(c: Columns, idx: np.ndarray) -> float | None:
    return _ratio(c["stalled_s"][idx], c["decode_s"][idx])


QUEUE = ("scheduled_s", "finish_s")
MEASURES: tuple[Measure, ...] = (
    Measure(name="queue_share_of_latency", axis=AxisName.QUEUEING, unit="ratio", better="lower",
            needs=QUEUE, basis="Σ (scheduled_s − arrival_s) / Σ (finish_s − arrival_s)",
            compute=_queue_share),
    Measure(name="ttft_p50_s", axis=AxisName.QUEUEING, unit="s", better="lower",
            needs=("first_token_s",), basis="P50 of first_token_s − arrival_s",
            compute=_ttft(50)),
    Measure(name="ttft_p90_s", axis=AxisName.QUEUEING, unit="s", better="lower",
            needs=("first_token_s",), basis="P90 of first_token_s − arrival_s",
            compute=_ttft(90)),
    Measure(name="recompute_token_share", axis=AxisName.KV_MEMORY, unit="ratio", better="lower",
            needs=("num_preemptions",),
            basis="Σ recomputed tokens / Σ (prompt_len + output_len): per request "
            "num_preemptions · (prompt_len + output_len / 2), scaled to the step log's Σ "
            "recomputed_tokens where it counts them", compute=_recompute_share),
    Measure(name="preempted_request_share", axis=AxisName.KV_MEMORY, unit="ratio",
            better="lower", needs=("num_preemptions",),
            basis="share of requests with num_preemptions > 0", compute=_preempted_share),
    Measure(name="hit_ratio", axis=AxisName.PREFIX_REUSE, unit="ratio", better="higher",
            needs=("cached_tokens",), basis="Σ cached_tokens / Σ prompt_len",
            compute=_hit_ratio),
    Measure(name="stall_share", axis=AxisName.PD_INTERFERENCE, unit="ratio", better="lower",
            needs=("token_times_s",),
            basis="Σ inter-token gaps longer than stall_factor × the run's median gap / Σ gaps",
            compute=_stall_share),
    Measure(name="tpot_p50_s", axis=AxisName.PD_INTERFERENCE, unit="s", better="lower",
            needs=("first_token_s", "finish_s"),
            basis="P50 of (finish_s − first_token_s) / (output_len − 1)", compute=_tpot(50)),
    Measure(name="tpot_p90_s", axis=AxisName.PD_INTERFERENCE, unit="s", better="lower",
            needs=("first_token_s", "finish_s"),
            basis="P90 of (finish_s − first_token_s) / (output_len − 1)", compute=_tpot(90)),
)


def request_columns(trace: Trace, stall_factor: float) -> dict[str, np.ndarray]:
    """Per request (rows in arrival order), the values every measure reads; NaN where the run
    does not record them (a failed request has no finish time, so it is never timed)."""
    req = trace.requests
    n = len(req)

    def col(name: str) -> np.ndarray:
        if name not in req.columns:
            return np.full(n, np.nan)
        return req[name].to_numpy(dtype=np.float64, na_value=np.nan)

    arrival, scheduled = col("arrival_s"), col("scheduled_s")
    first, finish = col("first_token_s"), col("finish_s")
    prompt, output = col("prompt_len"), col("output_len")
    pre = col("num_preemptions")
    if "num_preemptions" in req.columns:
        pre = np.nan_to_num(pre, nan=0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (finish - first) / (output - 1), np.nan)
    stalled, decode = _stalls(trace, stall_factor)
    return {
        "queue_s": scheduled - arrival, "latency_s": finish - arrival, "ttft_s": first - arrival,
        "tpot_s": tpot, "prompt_len": prompt, "output_len": output, "tokens": prompt + output,
        "num_preemptions": pre, "recomputed_tokens": _recomputed(trace, pre, prompt, output),
        "cached_tokens": col("cached_tokens"), "stalled_s": stalled, "decode_s": decode,
    }


def _recomputed(trace: Trace, pre: np.ndarray, prompt: np.ndarray,
                output: np.ndarray) -> np.ndarray:
    """Per request, the tokens its preemptions had it compute again: the estimate
    num_preemptions · (prompt_len + output_len / 2), scaled so that they add up to the step
    log's count where it has one (the engine counts them per step, not per request; the
    estimate overstates where a readmission hits its own freed blocks in the prefix cache), so
    the measure is the kv_memory axis' score, and still resamples by request."""
    estimate = pre * (prompt + output / 2.0)
    log = trace.steps
    if log is None or not log.has("recomputed_tokens"):
        return estimate
    total = float(np.nansum(estimate))
    if total <= 0:
        return estimate
    counted = sum(float(b["recomputed_tokens"].fillna(0).sum())
                  for b in log.batches(("recomputed_tokens",)))
    return estimate * (counted / total)


def _stalls(trace: Trace, stall_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Per request, seconds of inter-token gaps beyond stall_factor × the run's median gap, and
    seconds of all its gaps (NaN without token times)."""
    n = len(trace.requests)
    if "token_times_s" not in trace.requests.columns or not trace.has("token_times_s"):
        return np.full(n, np.nan), np.full(n, np.nan)
    offsets, values = list_arrays(trace.requests["token_times_s"])
    times = np.asarray(values, dtype=np.float64)
    counts = np.diff(offsets)
    owner = np.repeat(np.arange(n), counts)
    gaps = np.diff(times)
    same = owner[1:] == owner[:-1]
    gaps, owner = gaps[same], owner[1:][same]
    decode = np.bincount(owner, weights=gaps, minlength=n)
    if gaps.size == 0:
        return np.full(n, np.nan), np.full(n, np.nan)
    threshold = stall_factor * median_of(gaps)
    stalled = np.bincount(owner, weights=np.where(gaps > threshold, gaps, 0.0), minlength=n)
    has_gaps = counts > 1
    return np.where(has_gaps, stalled, np.nan), np.where(has_gaps, decode, np.nan)


def available(measure: Measure, before: Trace, after: Trace) -> bool:
    """Whether both runs carry the columns the measure needs."""
    return all(before.has(c) and after.has(c) for c in measure.needs)
