"""Q001 (cost-model A1): arrival burst above capacity."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, at_limit, saturated
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: QueueingFacts, t: Thresholds, fired: frozenset[str]) -> Sequence[Evidence] | None:
    mt = f.metrics
    share = mt.queue_share_of_ttft
    limits = at_limit(mt, t)
    batch_limited = any(e.passed for e in limits) if limits else None
    busy = saturated(f, t)
    if not (share is not None and share >= t.queue_share_of_ttft
            and mt.peak_rho is not None and mt.peak_rho >= t.overload_rho
            and (mt.overloaded_windows_queue_growing or 0) > 0
            and busy is not False and batch_limited is not False):
        return None
    ev = [
        check("queue_share_of_ttft", share, ">=", "queue_share_of_ttft", t.queue_share_of_ttft),
        check("peak_rho", mt.peak_rho, ">=", "overload_rho", t.overload_rho),
        fact("overloaded_windows_queue_growing", mt.overloaded_windows_queue_growing, "windows"),
        fact("service_rate_tokens_per_s", mt.service_rate_tokens_per_s, "tokens/s"),
        fact("peak_offered_tokens_per_s", mt.peak_offered_tokens_per_s, "tokens/s"),
    ]
    if busy is not None:
        ev.append(check("gpu_busy_fraction", mt.gpu_busy_fraction, ">=", "gpu_busy_saturated",
                        t.gpu_busy_saturated))
        ev.append(check("idle_while_waiting_fraction", mt.idle_while_waiting_fraction, "<",
                        "idle_waiting_saturated", t.idle_waiting_saturated))
    ev += [e for e in limits if e.passed]
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q001", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A1",
    title="Arrival burst above capacity",
    trigger=(
        "queue_share_of_ttft ≥ queue_share_of_ttft and peak_rho ≥ overload_rho in a window "
        "where the queue grows, and (with a step log) gpu_busy_fraction ≥ gpu_busy_saturated, "
        "idle_while_waiting_fraction < idle_waiting_saturated and a batch limit reached (P75 "
        "fill ≥ batch_at_limit)"
    ),
    evidence="queue_share_of_ttft, peak_rho, service and offered tokens/s, busy fraction",
    fix=(
        "capacity (replicas, faster hardware), admission control or early rejection, burst "
        "smoothing; chunking or disaggregation will not fix it"
    ),
    reads=("queue_share_of_ttft", "overload_rho", "batch_at_limit",
           "gpu_busy_saturated", "idle_waiting_saturated"),
    check=_check,
)
