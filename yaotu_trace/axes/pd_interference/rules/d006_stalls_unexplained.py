"""D006: decode stalls not explained by prefill."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, fact
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.pd_interference.rules.shared import coincidence
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: InterferenceMetrics, t: Thresholds, fired: frozenset[str]
) -> Sequence[Evidence] | None:
    coin = mt.prefill_coincidence
    if not ((mt.stalls or 0) > 0 and coin is not None and coin < t.prefill_coincidence):
        return None
    return (
        coincidence(mt, t),
        fact("stalls", mt.stalls, "gaps"),
        fact("stall_seconds_unexplained", mt.stall_seconds_unexplained, "s"),
    )


RULE: Rule[InterferenceMetrics] = Rule(
    id="D006", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO,
    title="Decode stalls not explained by prefill",
    trigger="stalls exist and prefill_coincidence < prefill_coincidence",
    evidence="stalls, prefill_coincidence",
    fix="look for preemption, host stalls or network hiccups around the stalls",
    reads=("prefill_coincidence",),
    check=_check,
)
