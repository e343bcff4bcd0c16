"""Q011: most of latency is queued and no rule names why: admission is blocked, and the data
does not say by what."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds

# Causes found earlier that do not explain a queue: failed requests are a finding of their own.
_NOT_A_QUEUE_CAUSE = frozenset({Cause.REQUEST_FAILURES})


def queue_share(f: QueueingFacts) -> tuple[str, float | None]:
    """The queue's share of latency, else of TTFT, with its name."""
    mt = f.metrics
    if mt.queue_share_of_latency is not None:
        return "queue_share_of_latency", mt.queue_share_of_latency
    return "queue_share_of_ttft", mt.queue_share_of_ttft


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    name, share = queue_share(f)
    if not (share is not None and share >= t.queue_share_of_ttft
            and not (found - _NOT_A_QUEUE_CAUSE)):
        return None
    ev = [check(name, share, ">=", "queue_share_of_ttft", t.queue_share_of_ttft)]
    if mt.waiting_deferred_share is not None:
        # vLLM's num_requests_waiting_by_reason: capacity = KV blocks, seats or token budget
        ev.append(fact("waiting_capacity_share", 1.0 - mt.waiting_deferred_share, "ratio"))
    ev += [
        fact("kv_usage_queued", mt.kv_usage_queued, "ratio"),
        fact("kv_blocked_queued", mt.kv_blocked_queued, "ratio"),
        fact("running_fill_queued", mt.running_fill_queued, "ratio"),
        fact("step_fill_queued", mt.step_fill_queued, "ratio"),
        fact("busy_queued", mt.busy_queued, "ratio"),
        fact("growth_rho", mt.growth_rho, "ratio"),
        fact("burst_ratio", mt.burst_ratio, "ratio"),
    ]
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q011", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK,
    title="Admission blocked, reason not in the data",
    trigger=(
        "queue_share_of_latency (else of TTFT) ≥ queue_share_of_ttft and no rule Q001–Q005 or "
        "Q010 names a cause: requests wait most of their latency to be admitted, and the data "
        "given cannot say for what"
    ),
    evidence="the queue share, the waiting requests' reason (vLLM), KV usage and KV-blocked "
    "steps, seat and budget fill, GPU busy, growth_rho and burst_ratio where the queue is",
    fix=(
        "add the input that tells the reasons apart: a step log with head_blocks_needed and "
        "kv_blocks_free (KV admission; `trace simulate --steps-out` writes them), num_running "
        "and the step tokens (seats and budget), GPU busy and idle gaps (dispatch), or vLLM's "
        "vllm:num_requests_waiting_by_reason (capacity or deferred) in --metrics"
    ),
    cause=Cause.ADMISSION_BLOCKED, remedies=(),
    next_step="add a step log with the admission signal (head_blocks_needed, kv_blocks_free) "
    "or a metrics export with vllm:num_requests_waiting_by_reason: the queue is most of "
    "latency, and what blocks admission decides the remedy",
    reads=("queue_share_of_ttft",),
    check=_check,
)
