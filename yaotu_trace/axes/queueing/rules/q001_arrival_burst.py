"""Q001 (cost-model A1): arrival burst above capacity, judged in the windows where the queue
grows."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import (
    QueueingFacts,
    at_limit,
    saturated,
    saturation_evidence,
)
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    share = mt.queue_share_of_ttft
    limits = at_limit(mt, t)
    batch_limited = any(e.passed for e in limits) if limits else None
    # NOTE: a queue that is a small share of latency is no bottleneck even when it is most of
    # TTFT (a disaggregated run's TTFT is its prefill alone).
    latency = mt.queue_share_of_latency
    whole = _whole_capture(f, t)
    if not (share is not None and share >= t.queue_share_of_ttft
            and (latency is None or latency >= t.queue_share_warn)
            and (mt.growing_windows or 0) > 0
            and mt.growth_rho is not None and mt.growth_rho >= t.overload_rho
            and (whole or (mt.burst_ratio is not None
                           and mt.burst_ratio >= t.burst_rate_ratio))
            and saturated(f, t) is not False and batch_limited is not False):
        return None
    burst = ([check("step_fill_queued", mt.step_fill_queued, ">=", "batch_at_limit",
                    t.batch_at_limit)] if whole else
             [check("burst_ratio", mt.burst_ratio, ">=", "burst_rate_ratio",
                    t.burst_rate_ratio)])
    return [
        check("queue_share_of_ttft", share, ">=", "queue_share_of_ttft", t.queue_share_of_ttft),
        *([] if latency is None else [check("queue_share_of_latency", latency, ">=",
                                            "queue_share_warn", t.queue_share_warn)]),
        check("growth_rho", mt.growth_rho, ">=", "overload_rho", t.overload_rho),
        *burst,
        fact("growing_windows", mt.growing_windows, "windows"),
        fact("growth_requests", mt.growth_requests, "requests"),
        fact("arrival_rate_growing_per_s", mt.arrival_rate_growing_per_s, "requests/s"),
        fact("arrival_rate_other_per_s", mt.arrival_rate_other_per_s, "requests/s"),
        fact("service_rate_tokens_per_s", mt.service_rate_tokens_per_s, "tokens/s"),
        *saturation_evidence(f, t),
        *[e for e in limits if e.passed],
    ]


def _whole_capture(f: QueueingFacts, t: Thresholds) -> bool:
    """The queue grows in every window with arrivals, so there is no calmer rate to hold the
    burst against (`burst_ratio` is none): the capture is one burst, above capacity when the
    steps run at their token budget there (a seat cap with room left is Q004's)."""
    mt = f.metrics
    return (mt.burst_ratio is None and mt.arrival_rate_other_per_s is None
            and mt.arrival_rate_growing_per_s is not None
            and mt.step_fill_queued is not None and mt.step_fill_queued >= t.batch_at_limit)


def _note(f: QueueingFacts, t: Thresholds) -> str | None:
    """Without a step log in the windows where the queue grows, saturation is not confirmed;
    a capture that is one burst says so."""
    if _whole_capture(f, t):
        return ("the queue grows in every window with arrivals: the capture is one burst above "
                "capacity (no calmer window to hold its rate against), the steps at their "
                "token budget")
    if saturated(f, t) is not None:
        return None
    return ("arrival burst judged from the request table alone; add a step log to confirm the "
            "GPU was saturated")


RULE: Rule[QueueingFacts] = Rule(
    id="Q001", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A1",
    title="Arrival burst above capacity",
    trigger=(
        "queue_share_of_ttft ≥ queue_share_of_ttft and (when known) queue_share_of_latency ≥ "
        "queue_share_warn, and in the windows where the queue grows "
        "(growth_min_requests, growth_min_share): offered work ≥ overload_rho × the service "
        "rate, arrivals ≥ burst_rate_ratio × the rate in the other windows (or, when the queue "
        "grows in every window with arrivals, the steps' token budget filled ≥ "
        "batch_at_limit), a batch limit reached (fill ≥ batch_at_limit) and, with a step "
        "log, the GPU busy ≥ "
        "gpu_busy_saturated with idle-while-waiting < idle_waiting_saturated"
    ),
    evidence="queue_share_of_ttft, growth_rho, burst_ratio, the windows' arrival rates, "
    "busy and fill in the queued windows",
    fix=(
        "capacity (replicas, faster hardware), admission control or early rejection, burst "
        "smoothing; chunking or disaggregation will not fix it"
    ),
    cause=Cause.ARRIVAL_BURST, remedies=(Remedy.CAPACITY_ADMISSION,), note=_note,
    reads=("queue_share_of_ttft", "queue_share_warn", "overload_rho", "burst_rate_ratio",
           "batch_at_limit",
           "gpu_busy_saturated", "idle_waiting_saturated", "growth_min_requests",
           "growth_min_share"),
    check=_check,
)
