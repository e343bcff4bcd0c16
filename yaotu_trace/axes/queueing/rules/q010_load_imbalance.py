"""Q010: load imbalance: requests wait on one instance while another has free seats."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.instances import InstanceQueue
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds

READS = ("waiting_share", "queue_share_warn", "batch_underfilled", "imbalance_vanish_share",
         "imbalance_work_lift")


def standing_queue(row: InstanceQueue, t: Thresholds) -> Evidence | None:
    """Whether one instance keeps requests waiting: its steps or samples with a queue (else its
    requests' queue share of TTFT), as evidence; None when neither is measured."""
    name = row.instance
    if row.waiting_share is not None:
        return check(f"waiting_share[{name}]", row.waiting_share, ">=", "waiting_share",
                     t.waiting_share)
    if row.queue_share_of_ttft is not None:
        return check(f"queue_share_of_ttft[{name}]", row.queue_share_of_ttft, ">=",
                     "queue_share_warn", t.queue_share_warn)
    return None


def imbalance_evidence(f: QueueingFacts, t: Thresholds) -> list[Evidence] | None:
    """The evidence of a queue on one instance next to free seats on another, when routing
    would remove at least imbalance_vanish_share of it; None otherwise. Without arrival times
    (telemetry alone) routing cannot be modelled, and the contrast of the two decides."""
    lb = f.metrics.load_balance
    vanish = None if lb is None else lb.vanish_share_least_loaded
    if lb is None or (vanish is None and f.metrics.interarrival_cv is not None):
        return None
    queued, idle = lb.row(lb.queued_instance), lb.row(lb.idle_instance)
    if queued is None or idle is None or idle.seat_fill is None:
        return None
    hot, cold = standing_queue(queued, t), standing_queue(idle, t)
    if not (hot is not None and hot.passed and (cold is None or not cold.passed)
            and idle.seat_fill < t.batch_underfilled
            and (vanish is None or vanish >= t.imbalance_vanish_share)):
        return None
    # A queue that matters: the cluster's (not the wait for the next step boundary, which a
    # short TTFT on an idle engine makes a fifth of it), on an instance given more than its
    # share of the work (least-loaded routing at low load leaves the work even).
    name, share = "queue_share_of_latency", f.metrics.queue_share_of_latency
    if share is None:
        name, share = "queue_share_of_ttft", f.metrics.queue_share_of_ttft
    lift = (None if queued.work_share is None or not lb.instances
            else queued.work_share * len(lb.instances))
    if (share is not None and share < t.queue_share_warn) or (
            lift is not None and lift < t.imbalance_work_lift):
        return None
    ev = [hot]
    if cold is not None:
        ev.append(fact(cold.name, cold.value, "ratio"))
    ev += [
        check(f"seat_fill[{idle.instance}]", idle.seat_fill, "<", "batch_underfilled",
              t.batch_underfilled),
        check("vanish_share_least_loaded", vanish, ">=", "imbalance_vanish_share",
              t.imbalance_vanish_share),
        check(name, share, ">=", "queue_share_warn", t.queue_share_warn),
        check(f"work_lift[{queued.instance}]", lift, ">=", "imbalance_work_lift",
              t.imbalance_work_lift),
        fact(f"queue_share[{queued.instance}]", queued.queue_share, "ratio"),
        fact(f"work_share[{queued.instance}]", queued.work_share, "ratio"),
        fact("queue_seconds_vanish_least_loaded", lb.queue_seconds_vanish_least_loaded, "s"),
        fact("vanish_share_even", lb.vanish_share_even, "ratio"),
    ]
    return ev


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    return imbalance_evidence(f, t)


RULE: Rule[QueueingFacts] = Rule(
    id="Q010", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK,
    title="Load imbalance: requests wait on one instance while another has free seats",
    trigger=(
        "with several instances, the one with the most queue seconds has a standing queue "
        "(its waiting_share ≥ waiting_share, else its queue share of TTFT ≥ queue_share_warn), "
        "the cluster's queue share of latency (else of TTFT) ≥ queue_share_warn, the queued "
        "instance holds ≥ imbalance_work_lift × its even share of the work (work_lift = work "
        "share × instances), another has none and fills < batch_underfilled of its seats, and "
        "a least-loaded router "
        "would remove ≥ imbalance_vanish_share of the modelled queue (FCFS fluid queue per "
        "instance at the busiest instance's peak rate); without arrival times (telemetry "
        "alone) the queue cannot be modelled and the standing queue next to free seats decides"
    ),
    evidence=(
        "the queued instance's waiting share, the idle one's seat fill, the share and seconds "
        "of queue that least-loaded and even routing remove"
    ),
    fix=(
        "route by load (least-loaded, or sgl-router cache_aware's balance override) or by "
        "cache and load (Dynamo kv-aware); the ledger prices the prefix hits affinity gives up"
    ),
    cause=Cause.LOAD_IMBALANCE, remedies=(Remedy.ROUTE_BY_LOAD, Remedy.ROUTE_BY_CACHE_AND_LOAD),
    reads=READS,
    check=_check,
)
