"""What the queueing verdict rests on, and what would confirm or change it: the evidence each
axis names (its notes) and the next measurements (its next steps)."""

from __future__ import annotations

from yaotu_trace.axes.base import Cause
from yaotu_trace.axes.queueing.metrics import QueueingMetrics
from yaotu_trace.axes.thresholds import Thresholds

# How each source counts the queue and the running batch, in words.
SOURCE_WORDS = {
    "steps": "the step log's num_waiting",
    "metrics": "the metrics' waiting gauge",
    "requests": "the request table's arrivals and schedules",
}
RUNNING_WORDS = {
    "steps": "the step log's num_running",
    "metrics": "the metrics' running gauge",
    "requests": "the request table's concurrency",
}


def evidence_note(mt: QueueingMetrics, t: Thresholds) -> str | None:
    """The windows the causes were judged in and where their counts came from."""
    if mt.queue_source is None:
        return None
    where = SOURCE_WORDS[mt.queue_source]
    if not mt.queued_windows:
        return (f"the queue ({where}) never grows by {t.growth_min_requests:g} requests in a "
                f"{mt.window_s:g} s window nor stands across one: no cause to judge")
    text = (f"causes judged in the {mt.growing_windows} window(s) of {mt.window_s:g} s where "
            f"the queue grows and the {mt.queued_windows} where requests wait (queue from "
            f"{where}")
    if mt.running_source is not None:
        text += f"; running from {RUNNING_WORDS[mt.running_source]}"
    return text + ")"


def confirm_steps(mt: QueueingMetrics, cause: Cause | None, has_steps: bool) -> list[str]:
    """What would change the cause, or decide an unidentified one (a burst judged without a
    step log says so in the axis' notes)."""
    out: list[str] = []
    if cause == Cause.ARRIVAL_BURST and has_steps:
        out.append("it would change with arrivals no faster in the growing windows than "
                   "elsewhere (a steady overload) or idle GPU gaps there")
    if cause != Cause.UNIDENTIFIED:
        return out
    if mt.kv_usage_queued is None:
        out.append("add KV usage (step log kv_blocks_used and kv_blocks_total or kv_usage, or "
                   "vllm:kv_cache_usage_perc) to test kv_admission")
    if mt.growing_windows and mt.burst_ratio is None and mt.interarrival_cv is None:
        out.append("arrival times are unknown (no request trace): a request table's arrival_s "
                   "tells a burst from a steady overload")
    elif mt.growing_windows and mt.burst_ratio is None:
        out.append("the queue grows in every window of the arrival span: a steady overload, "
                   "not a burst; compare the service rate with the mean load")
    return out
