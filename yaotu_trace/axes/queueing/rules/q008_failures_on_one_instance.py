"""Q008: failed requests concentrate on one instance."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Mark, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    fm = f.failures
    where = None if fm is None else fm.by_instance
    if not (fm is not None and where is not None and where.instances >= 2
            and fm.failed >= t.failure_min_requests
            and where.worst_instance_failure_share >= t.instance_failure_share
            and where.worst_instance_failure_lift is not None
            and where.worst_instance_failure_lift >= t.instance_failure_lift):
        return None
    return (
        fact("worst_instance", where.worst_instance),
        check("failed_requests", fm.failed, ">=", "failure_min_requests",
              t.failure_min_requests, unit="requests"),
        check("worst_instance_failure_share", where.worst_instance_failure_share, ">=",
              "instance_failure_share", t.instance_failure_share),
        check("worst_instance_failure_lift", where.worst_instance_failure_lift, ">=",
              "instance_failure_lift", t.instance_failure_lift),
        fact("worst_instance_failed", where.worst_instance_failed, "requests"),
        fact("worst_instance_requests", where.worst_instance_requests, "requests"),
        fact("instances", where.instances, "instances"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q008", axis=AxisName.QUEUEING, severity=Severity.WARNING,
    title="Failed requests concentrate on one instance",
    trigger=(
        "two or more instances, at least failure_min_requests failed, and the instance with "
        "the most failures holds ≥ instance_failure_share of them and fails ≥ "
        "instance_failure_lift × as often as the trace overall"
    ),
    evidence="worst_instance, its share of the failures and its failure rate against the trace's",
    fix=(
        "look at that instance (its engine log, GPU health, memory, version) and route away "
        "from it until it is fixed; the other instances are not the problem"
    ),
    cause=None, remedies=(), marks=frozenset({Mark.FAILURES}),
    reads=("failure_min_requests", "instance_failure_share", "instance_failure_lift"),
    check=_check,
)
