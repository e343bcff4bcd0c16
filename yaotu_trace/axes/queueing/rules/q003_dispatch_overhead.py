"""Q003 (cost-model A3): GPU idle while requests wait: CPU dispatch overhead."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: QueueingFacts, t: Thresholds, fired: frozenset[str]) -> Sequence[Evidence] | None:
    mt = f.metrics
    if not (mt.idle_while_waiting_fraction is not None
            and mt.idle_while_waiting_fraction >= t.idle_waiting_dispatch):
        return None
    return (
        check("idle_while_waiting_fraction", mt.idle_while_waiting_fraction, ">=",
              "idle_waiting_dispatch", t.idle_waiting_dispatch),
        fact("idle_while_waiting_s", mt.idle_while_waiting_s, "s"),
        fact("gpu_busy_fraction", mt.gpu_busy_fraction, "ratio"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q003", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A3",
    title="GPU idle while requests wait: CPU dispatch overhead",
    trigger="idle_while_waiting_fraction ≥ idle_waiting_dispatch",
    evidence="idle_while_waiting_fraction, idle_while_waiting_s, gpu_busy_fraction",
    fix="overlap/async scheduling, multi-step scheduling, a separate API process, CUDA graphs",
    reads=("idle_waiting_dispatch",),
    check=_check,
)
