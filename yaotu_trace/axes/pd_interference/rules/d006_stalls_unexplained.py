"""D006: decode stalls not explained by prefill."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, fact
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts, coincidence
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    coin = mt.prefill_coincidence
    if not ((mt.stalls or 0) > 0 and coin is not None and coin < t.prefill_coincidence):
        return None
    return (
        coincidence(mt, t),
        fact("stalls", mt.stalls, "gaps"),
        fact("stall_seconds_unexplained", mt.stall_seconds_unexplained, "s"),
    )


RULE: Rule[InterferenceFacts] = Rule(
    id="D006", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO,
    title="Decode stalls not explained by prefill",
    trigger="stalls exist and prefill_coincidence < prefill_coincidence",
    evidence="stalls, prefill_coincidence",
    fix="look for preemption, host stalls or network hiccups around the stalls",
    cause=None, remedies=(),
    next_step="line stalls up with preemptions and host-side gaps (step log)",
    reads=("prefill_coincidence",),
    check=_check,
)
