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
    """A standing queue (reads waiting_share, queue_share_warn)."""
    mt = f.metrics
    share = mt.queue_share_of_ttft
    # NOTE: a request arriving mid-step waits for the next step boundary even on an idle-free
    # engine; a step log sampled after admission does not show that wait, so with a step log the
    # queue is persistent only when the engine itself reports requests left waiting.
    if f.has_steps and mt.waiting_share is not None:
        return mt.waiting_share >= t.waiting_share
    return ((share is not None and share >= t.queue_share_warn)
            or (mt.waiting_share is not None and mt.waiting_share >= t.waiting_share))


def at_limit(mt: QueueingMetrics, t: Thresholds) -> list[Evidence]:
    """Each batch limit's P75 fill against batch_at_limit (those measured)."""
    out: list[Evidence] = []
    for name, value in (("step_fill_p75", mt.step_fill_p75),
                        ("running_fill_p75", mt.running_fill_p75),
                        ("kv_usage_p75", mt.kv_usage_p75)):
        if value is not None:
            out.append(check(name, value, ">=", "batch_at_limit", t.batch_at_limit))
    return out


def saturated(f: QueueingFacts, t: Thresholds) -> bool | None:
    """Whether the GPU is busy with no slack (reads gpu_busy_saturated, idle_waiting_saturated);
    None without a step log."""
    mt = f.metrics
    if not (f.has_steps and mt.gpu_busy_fraction is not None):
        return None
    return (mt.gpu_busy_fraction >= t.gpu_busy_saturated
            and (mt.idle_while_waiting_fraction or 0.0) < t.idle_waiting_saturated)
