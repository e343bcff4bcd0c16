"""Q002 (cost-model A2): bursty arrivals, not mean load, make the queue."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    qd = mt.queue_time_s
    if not (mt.mean_rho is not None and mt.mean_rho < t.burst_mean_rho
            and mt.interarrival_cv is not None and mt.interarrival_cv > t.burst_cv
            and qd is not None and qd.mean and qd.p99 is not None
            and qd.p99 >= t.burst_p99_to_mean * qd.mean):
        return None
    return (
        check("mean_rho", mt.mean_rho, "<", "burst_mean_rho", t.burst_mean_rho),
        check("interarrival_cv", mt.interarrival_cv, ">", "burst_cv", t.burst_cv),
        check("queue_p99_to_mean", qd.p99 / qd.mean, ">=", "burst_p99_to_mean",
              t.burst_p99_to_mean),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q002", axis=AxisName.QUEUEING, severity=Severity.WARNING, source="A2",
    title="Bursty arrivals, not mean load, make the queue",
    trigger=(
        "mean_rho < burst_mean_rho and interarrival_cv > burst_cv and P99 queue time ≥ "
        "burst_p99_to_mean × mean queue time"
    ),
    evidence="mean_rho, interarrival_cv, queue P99 / mean",
    fix="keep headroom or autoscale on queue depth",
    cause=Cause.ARRIVAL_BURST, remedies=(Remedy.CAPACITY_ADMISSION,),
    reads=("burst_mean_rho", "burst_cv", "burst_p99_to_mean"),
    check=_check,
)
