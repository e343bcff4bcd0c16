"""`trace report`: profile, prefix replay, capacity curve, diagnosis and the plot data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.profile.figures import plot_data

# Capacities of the hit-ratio curve in the report (log-spaced; knee and shares added).
CURVE_POINTS = 40

Progress = Callable[[str, float], None]


def build_report(
    trace: Trace,
    *,
    diagnose_report: Callable[[], Report] | None = None,
    kv_capacity_tokens: float | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace report`: profile, prefix replay, capacity curve, diagnosis and the plot data."""
    from yaotu_trace.profile.workload import profile_trace
    from yaotu_trace.replay import effective_rules, replay_trace_with_requests
    from yaotu_trace.replay.sweep_trace import sweep_trace

    def step(name: str, share: float) -> None:
        if progress is not None:
            progress(name, share)

    sections: dict[str, Any] = {}
    step("profile", 0.0)
    sections["profile"] = profile_trace(trace)
    diag = None
    if diagnose_report is not None:
        step("diagnosis", 0.1)
        diag = diagnose_report().to_dict()
        for key in ("principal", "verdict", "axes", "ledger", "findings"):
            if key in diag:
                sections[key] = diag[key]
    hit_tokens = None
    config: dict[str, Any] = {}
    if trace.content_column is not None:
        step("prefix replay", 0.4)
        rules, preset, notes = effective_rules(trace)
        summary, table = replay_trace_with_requests(trace, rules, preset=preset, notes=notes)
        sections["prefix_reuse"] = summary.to_dict()
        hit_tokens = table.to_columns()["hit_tokens"]
        config = {"preset": preset, "rules": rules.to_dict()}
        if rules.eviction == "lru":
            step("capacity sweep", 0.7)
            curve, _ = sweep_trace(trace, rules.with_(capacity_blocks=None), preset=preset or "",
                                   points=CURVE_POINTS, notes=notes)
            sections["capacity_curve"] = curve
    capacity = kv_capacity_tokens
    if capacity is None and diag is not None:
        capacity = _kv_capacity(diag)
    step("plots", 0.9)
    sections["plots"] = plot_data(trace, hit_tokens, capacity)
    config["kv_capacity_tokens"] = capacity
    step("done", 1.0)
    return Report(command="report", input=input_summary(trace), config=config,
                  sections=sections)


def _kv_capacity(diag: dict[str, Any]) -> float | None:
    """The KV pool the diagnosis found (step log, metrics or --kv-capacity), in tokens."""
    axes = diag.get("axes")
    items = axes if isinstance(axes, list) else [
        {"name": k, **v} for k, v in (axes or {}).items() if isinstance(v, dict)]
    for axis in items:
        if axis.get("name") == "kv_memory":
            value = (axis.get("metrics") or {}).get("kv_capacity_tokens")
            return float(value) if isinstance(value, int | float) else None
    return None
