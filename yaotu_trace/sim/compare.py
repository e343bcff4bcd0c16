"""`trace compare`: several scenarios on one request chain, and per remedy the work it saved and
the work it added relative to the first scenario (cost-model §8).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import SimulationSummary, run_scenario

if TYPE_CHECKING:
    from yaotu_trace.data.steplog import StepLog

LEDGER_METRICS: tuple[tuple[str, str, str], ...] = (
    # (field of WorkLedger, label, unit) — lower is less work
    ("prefill_tokens", "prefill tokens computed", "tokens"),
    ("recomputed_tokens", "tokens recomputed after preemption", "tokens"),
    ("decode_stall_s", "decode-seconds lost to prefill stalls", "s"),
    ("steps", "engine steps", "count"),
    ("host_overhead_s", "host time (steps × fixed cost + host gaps)", "s"),
    ("prefix_reread_bytes", "prefix KV re-read by prefill chunks", "bytes"),
    ("kv_transfer_bytes", "KV bytes over the P/D link", "bytes"),
    ("hbm_bytes", "HBM bytes moved", "bytes"),
    ("gpu_busy_s", "GPU-seconds busy", "s"),
    ("gpu_provisioned_s", "GPU-seconds provisioned", "s"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioChange:
    """One quantity a remedy changed, relative to the baseline scenario."""

    metric: str
    unit: str
    baseline: float
    value: float
    change: float
    change_ratio: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemedyLedger:
    """Work saved and work added by one scenario relative to the first (the baseline)."""

    scenario: str
    baseline: str
    saved: tuple[ScenarioChange, ...]
    added: tuple[ScenarioChange, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonSection:
    """The `comparison` report section: scenarios side by side, then one ledger per remedy."""

    scenarios: tuple[SimulationSummary, ...]
    ledgers: tuple[RemedyLedger, ...]


def ledger(baseline: SimulationSummary, other: SimulationSummary) -> RemedyLedger:
    """Split the work quantities that changed into saved (lower) and added (higher)."""
    saved: list[ScenarioChange] = []
    added: list[ScenarioChange] = []
    for name, label, unit in LEDGER_METRICS:
        base = float(getattr(baseline.work, name))
        value = float(getattr(other.work, name))
        change = value - base
        if change == 0 or (base and abs(change) / abs(base) < 1e-9):
            continue
        entry = ScenarioChange(metric=label, unit=unit, baseline=base, value=value, change=change,
                            change_ratio=change / base if base else None)
        (saved if change < 0 else added).append(entry)
    return RemedyLedger(scenario=other.scenario, baseline=baseline.scenario,
                        saved=tuple(saved), added=tuple(added))


def compare_scenarios(trace: Trace, scenarios: list[Scenario],
            progress: Callable[[str, float], None] | None = None,
            step_logs: Mapping[str, StepLog] | None = None) -> ComparisonSection:
    """Run every scenario on the same request chain; the first one is the baseline.

    `progress(stage, share_done)` is told before each scenario runs (the CLI draws a bar);
    `step_logs` holds the step logs the scenarios' `calibrate` name, by path.
    """
    if len(scenarios) < 2:
        raise ConfigError("compare needs at least two scenarios (--scenario a.toml "
                          "--scenario b.toml)")
    names = [s.name for s in scenarios]
    if len(set(names)) < len(names):
        scenarios = [replace(s, name=f"{s.name}#{k + 1}") for k, s in enumerate(scenarios)]
    runs = []
    for k, s in enumerate(scenarios):
        if progress is not None:
            progress(f"scenario {s.name}", k / len(scenarios))
        runs.append(run_scenario(trace, s, step_logs).summary)
    summaries = tuple(runs)
    ledgers = tuple(ledger(summaries[0], s) for s in summaries[1:])
    return ComparisonSection(scenarios=summaries, ledgers=ledgers)
