"""Q006: queueing without an identified cause."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.q010_load_imbalance import READS as IMBALANCE_READS
from yaotu_trace.axes.queueing.rules.q010_load_imbalance import imbalance_evidence
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    # NOTE: not gated on how many steps have requests waiting: a one-minute burst in a long
    # quiet trace queues most of the latency in a small share of the steps.
    name, share = "queue_share_of_latency", mt.queue_share_of_latency
    if share is None:
        name, share = "queue_share_of_ttft", mt.queue_share_of_ttft
    # No rule before this one found a cause; load imbalance, judged after it, is asked here.
    # NOTE: most of latency queued is no longer unexplained: admission is blocked (Q011).
    if not (share is not None and t.queue_share_warn <= share < t.queue_share_of_ttft
            and not found and imbalance_evidence(f, t) is None):
        return None
    return (
        check(name, share, ">=", "queue_share_warn", t.queue_share_warn),
        fact("growing_windows", mt.growing_windows, "windows"),
        fact("growth_rho", mt.growth_rho, "ratio"),
        fact("burst_ratio", mt.burst_ratio, "ratio"),
        fact("running_fill_queued", mt.running_fill_queued, "ratio"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q006", axis=AxisName.QUEUEING, severity=Severity.WARNING,
    title="Queueing without an identified cause",
    trigger=(
        "queue_share_warn ≤ queue_share_of_latency (else of TTFT) < queue_share_of_ttft and no "
        "rule Q001–Q005 or Q010 fired: cause unidentified (from queue_share_of_ttft on, Q011)"
    ),
    evidence="the queue share, growing windows, growth_rho, burst_ratio, running fill",
    fix=(
        "add what the axis' next steps name: a step log (--steps) for GPU busy and idle time "
        "in the queued windows, engine metrics (--metrics) for KV usage and running"
    ),
    cause=Cause.UNIDENTIFIED, remedies=(),
    reads=tuple(dict.fromkeys(("queue_share_warn", "queue_share_of_ttft", *IMBALANCE_READS))),
    check=_check,
)
