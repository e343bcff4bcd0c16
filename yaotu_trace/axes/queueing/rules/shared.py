"""What the queueing rules judge together: the axis' facts and the conditions several rules
share (a standing queue, a saturated GPU, a batch limit reached)."""

from __future__ import annotations

from dataclasses import dataclass

from yaotu_trace.axes.base import Evidence, check
from yaotu_trace.axes.failures import FailureMetrics
from yaotu_trace.axes.queueing.metrics import QueueingMetrics
from yaotu_trace.axes.thresholds import Thresholds


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueingFacts:
    """The queueing metrics, whether a step log was read (it changes what a standing queue
    and a saturated GPU mean), and the failed requests (None: no status or no failure)."""

    metrics: QueueingMetrics
    has_steps: bool
    failures: FailureMetrics | None = None


def persistent_queue(f: QueueingFacts, t: Thresholds) -> bool:
    """A queue to explain: requests wait in some window of the load grid (growing or standing,
    `windows`); without a queue count per window, a standing queue over the whole trace
    (reads waiting_share, queue_share_warn)."""
    mt = f.metrics
    if mt.queued_windows is not None:
        return mt.queued_windows > 0
    share = mt.queue_share_of_ttft
    # NOTE: a request arriving mid-step waits for the next step boundary even on an idle-free
    # engine; a step log sampled after admission does not show that wait, so with a step log the
    # queue is persistent only when the engine itself reports requests left waiting.
    if f.has_steps and mt.waiting_share is not None:
        return mt.waiting_share >= t.waiting_share
    return ((share is not None and share >= t.queue_share_warn)
            or (mt.waiting_share is not None and mt.waiting_share >= t.waiting_share))


def at_limit(mt: QueueingMetrics, t: Thresholds) -> list[Evidence]:
    """Each batch limit's fill in the windows where requests wait against batch_at_limit
    (those measured)."""
    out: list[Evidence] = []
    for name, value in (("step_fill_queued", mt.step_fill_queued),
                        ("running_fill_queued", mt.running_fill_queued),
                        ("kv_usage_queued", mt.kv_usage_queued)):
        if value is not None:
            out.append(check(name, value, ">=", "batch_at_limit", t.batch_at_limit))
    return out


def saturated(f: QueueingFacts, t: Thresholds) -> bool | None:
    """Whether the GPU is busy with no slack in the windows where requests wait (reads
    gpu_busy_saturated, idle_waiting_saturated); None without a step log or such windows."""
    mt = f.metrics
    if not (f.has_steps and mt.busy_queued is not None):
        return None
    return (mt.busy_queued >= t.gpu_busy_saturated
            and (mt.idle_waiting_queued or 0.0) < t.idle_waiting_saturated)


def saturation_evidence(f: QueueingFacts, t: Thresholds) -> list[Evidence]:
    """Busy and idle-while-waiting in the queued windows against their thresholds."""
    mt = f.metrics
    if saturated(f, t) is None:
        return []
    return [check("busy_queued", mt.busy_queued, ">=", "gpu_busy_saturated",
                  t.gpu_busy_saturated),
            check("idle_waiting_queued", mt.idle_waiting_queued or 0.0, "<",
                  "idle_waiting_saturated", t.idle_waiting_saturated)]
