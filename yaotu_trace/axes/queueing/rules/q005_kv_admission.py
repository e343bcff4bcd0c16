"""Q005 (cost-model A5): admission blocked by KV memory."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, persistent_queue
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    kv, running = mt.kv_usage_queued, mt.running_fill_queued
    blocked = mt.kv_blocked_queued
    # The seat check binds only when max_num_seqs is known: an inferred cap is the most seen.
    cap_known = mt.seq_cap_inferred is False
    by_usage = (kv is not None and kv >= t.kv_admission_usage
                and (running is None or not cap_known or running < t.batch_underfilled))
    # NOTE: the step log's admission signal says it directly: the head of the queue asked for
    # more blocks than were free. Long prompts are blocked at a usage far below 90 %.
    by_signal = blocked is not None and blocked >= t.kv_blocked_share
    if not (persistent_queue(f, t) and (by_usage or by_signal)):
        return None
    ev: list[Evidence] = []
    if by_usage:
        ev.append(check("kv_usage_queued", kv, ">=", "kv_admission_usage",
                        t.kv_admission_usage))
        if running is not None and cap_known:
            ev.append(check("running_fill_queued", running, "<", "batch_underfilled",
                            t.batch_underfilled))
    if by_signal:
        ev.append(check("kv_blocked_queued", blocked, ">=", "kv_blocked_share",
                        t.kv_blocked_share))
        if not by_usage:
            ev += [fact("kv_usage_queued", kv, "ratio"),
                   fact("running_fill_queued", running, "ratio")]
    ev.append(fact("queued_windows", mt.queued_windows, "windows"))
    if mt.waiting_share is not None:
        ev.append(fact("waiting_share", mt.waiting_share, "ratio"))
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q005", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A5",
    title="Admission blocked by KV memory",
    trigger=(
        "in the windows where requests wait: the first waiting request needs more KV blocks "
        "than are free in ≥ kv_blocked_share of the steps that leave requests waiting (the "
        "step log's head_blocks_needed against kv_blocks_free), or KV usage ≥ "
        "kv_admission_usage and running < batch_underfilled × max_num_seqs (when it is known)"
    ),
    evidence="kv_blocked_queued, kv_usage_queued, running_fill_queued, queued_windows, "
    "waiting_share",
    fix="see the kv_memory axis: capacity budget, block organisation and concurrency",
    cause=Cause.KV_ADMISSION, remedies=(Remedy.LARGER_KV_POOL,),
    reads=("kv_admission_usage", "kv_blocked_share", "batch_underfilled", "waiting_share",
           "queue_share_warn"),
    check=_check,
)
