"""Q009: requests fail: how many, when, where and with which error, whether or not the
failures cluster under load (Q007) or on one instance (Q008)."""

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
    if not (fm is not None and fm.failed >= t.failure_min_requests
            and fm.failed_share >= t.failure_share):
        return None
    ev = [
        check("failed_share", fm.failed_share, ">=", "failure_share", t.failure_share),
        check("failed_requests", fm.failed, ">=", "failure_min_requests",
              t.failure_min_requests, unit="requests"),
        fact("requests", fm.requests, "requests"),
    ]
    when = fm.times
    if when is not None:
        ev += [
            fact("first_failure_s", when.first_failure_s, "s from the first arrival"),
            fact("last_failure_s", when.last_failure_s, "s from the first arrival"),
            fact("failure_tenths", when.failure_tenths, "of 10 tenths of the run"),
            fact("commonest_error", when.commonest_error),
            fact("commonest_error_requests", when.commonest_error_requests, "requests"),
        ]
    where = fm.by_instance
    if where is not None and where.instances >= 2:
        ev += [
            fact("worst_instance", where.worst_instance),
            fact("worst_instance_failure_share", where.worst_instance_failure_share, "ratio"),
        ]
    return ev


def _note(f: QueueingFacts, t: Thresholds) -> str | None:
    fm = f.failures
    if fm is None:
        return None
    text = (f"{fm.failed:,} of {fm.requests:,} requests failed ({100 * fm.failed_share:.1f} %)")
    when = fm.times
    if when is not None:
        spread = ("spread over the run" if when.failure_tenths >= 8
                  else f"in {when.failure_tenths} of 10 tenths of the run")
        text += (f", {spread} ({when.first_failure_s:.1f}–{when.last_failure_s:.1f} s from the "
                 f"first arrival); commonest error ({when.commonest_error_requests:,}): "
                 f"{when.commonest_error}")
    where = fm.by_instance
    if where is not None and where.instances >= 2:
        text += (f"; most on {where.worst_instance} ({where.worst_instance_failed:,} of its "
                 f"{where.worst_instance_requests:,} requests)")
    return text


RULE: Rule[QueueingFacts] = Rule(
    id="Q009", axis=AxisName.QUEUEING, severity=Severity.WARNING,
    title="Requests fail",
    trigger=(
        "failed_share ≥ failure_share and at least failure_min_requests failed, whether or not "
        "they cluster under load (Q007) or on one instance (Q008)"
    ),
    evidence="failed_share, failed_requests, first and last failure, failure_tenths, the "
    "commonest error, the worst instance",
    fix=(
        "read the commonest error and where the failures fall: under load (Q007) is overload, "
        "one instance (Q008) is that instance, spread over the run with neither is the "
        "request path itself (client timeouts, malformed inputs, an engine error on some "
        "requests): the engine's log at the failure times says which"
    ),
    cause=Cause.REQUEST_FAILURES, remedies=(),
    marks=frozenset({Mark.FAILURES}),
    reads=("failure_share", "failure_min_requests"),
    note=_note,
    check=_check,
)
