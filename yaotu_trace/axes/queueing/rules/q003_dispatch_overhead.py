"""Q003 (cost-model A3): GPU idle while requests wait: CPU dispatch overhead."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    # In the windows where requests wait when the step log says which; else the whole log.
    name, idle = "idle_waiting_queued", mt.idle_waiting_queued
    if idle is None:
        name, idle = "idle_while_waiting_fraction", mt.idle_while_waiting_fraction
    if not (idle is not None and idle >= t.idle_waiting_dispatch):
        return None
    return (
        check(name, idle, ">=", "idle_waiting_dispatch", t.idle_waiting_dispatch),
        fact("idle_while_waiting_s", mt.idle_while_waiting_s, "s"),
        fact("busy_queued", mt.busy_queued, "ratio"),
        fact("gpu_busy_fraction", mt.gpu_busy_fraction, "ratio"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q003", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A3",
    title="GPU idle while requests wait: CPU dispatch overhead",
    trigger=(
        "idle-while-waiting ≥ idle_waiting_dispatch of the time the step log covers in the "
        "windows where requests wait (the whole log when it does not say which)"
    ),
    evidence="idle_waiting_queued (or idle_while_waiting_fraction), idle_while_waiting_s, "
    "busy_queued, gpu_busy_fraction",
    fix="overlap/async scheduling, multi-step scheduling, a separate API process, CUDA graphs",
    cause=Cause.DISPATCH_OVERHEAD, remedies=(Remedy.OVERLAP_SCHEDULING,),
    reads=("idle_waiting_dispatch",),
    check=_check,
)
