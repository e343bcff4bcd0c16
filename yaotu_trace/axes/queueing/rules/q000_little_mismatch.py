"""Q000 (cost-model A0): Little's law mismatch: trace incomplete or clocks inconsistent."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    if not (mt.little_mismatch is not None and mt.little_mismatch > t.little_mismatch):
        return None
    return (
        check("little_mismatch", mt.little_mismatch, ">", "little_mismatch", t.little_mismatch),
        fact("waiting_mean", mt.waiting_mean, "requests"),
        fact("little_expected_waiting", mt.little_expected_waiting, "requests"),
        fact("little_expected_sampled", mt.little_expected_sampled, "requests"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q000", axis=AxisName.QUEUEING, severity=Severity.WARNING, source="A0",
    title="Little's law mismatch: trace incomplete or clocks inconsistent",
    trigger=(
        "mean num_waiting of the step log (a cluster's instances summed at each instant) lies "
        "outside [Σ queue_time_s / span, the waiting a log sampled after admission shows] by "
        "more than little_mismatch (relative); with preemptions only the low end binds"
    ),
    evidence="little_mismatch, waiting_mean, little_expected_waiting, little_expected_sampled",
    fix=(
        "check for dropped or duplicated rows and mixed clocks (monotonic vs wall); treat the "
        "other findings with caution"
    ),
    cause=None, remedies=(),
    reads=("little_mismatch",),
    check=_check,
)
