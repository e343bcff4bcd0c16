"""Q007: requests fail when the backlog is long (timeouts, rejections under overload)."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Mark, Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    fm = f.failures
    load = None if fm is None else fm.under_load
    if not (fm is not None and load is not None
            and fm.failed >= t.failure_min_requests and fm.failed_share >= t.failure_share
            and load.failures_under_load_share >= t.failure_load_share):
        return None
    return (
        check("failed_share", fm.failed_share, ">=", "failure_share", t.failure_share),
        check("failed_requests", fm.failed, ">=", "failure_min_requests",
              t.failure_min_requests, unit="requests"),
        check("failures_under_load_share", load.failures_under_load_share, ">=",
              "failure_load_share", t.failure_load_share),
        fact("failure_lift_under_load", load.failure_lift_under_load, "ratio"),
        fact("backlog_median", load.backlog_median, f"requests {load.backlog_counts}"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q007", axis=AxisName.QUEUEING, severity=Severity.WARNING,
    title="Requests fail when the backlog is long",
    trigger=(
        "failed_share ≥ failure_share, at least failure_min_requests failed, and "
        "failures_under_load_share ≥ failure_load_share: that share of the failed requests "
        "arrived when more requests were queued (else in flight; without either time, more had "
        "arrived in the window_s before) than at the median arrival"
    ),
    evidence="failed_share, failures_under_load_share, failure_lift_under_load, backlog_median",
    fix=(
        "the failures are overload (timeouts, rejections while the queue is long): capacity "
        "for the peak, admission control that rejects early and cheaply, or longer client "
        "timeouts; read Q001/Q002 for why the queue grew"
    ),
    cause=None, remedies=(Remedy.CAPACITY_ADMISSION,),
    marks=frozenset({Mark.FAILURES}),
    reads=("failure_share", "failure_min_requests", "failure_load_share"),
    check=_check,
)
