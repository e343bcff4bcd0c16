"""Q004 (cost-model A4): batch shape limited by policy."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check
from yaotu_trace.axes.queueing.rules.shared import (
    QueueingFacts,
    persistent_queue,
    saturated,
    saturation_evidence,
)
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    tokens, running, kv = mt.tokens_per_step_queued, mt.running_fill_queued, mt.kv_usage_queued
    if not (persistent_queue(f, t) and saturated(f, t)
            and tokens is not None and tokens < t.underfill_tokens
            and running is not None and running < t.batch_underfilled
            and (kv is None or kv < t.kv_low_usage)):
        return None
    ev = [
        check("tokens_per_step_queued", tokens, "<", "underfill_tokens", t.underfill_tokens,
              "tokens"),
        check("running_fill_queued", running, "<", "batch_underfilled", t.batch_underfilled),
        *saturation_evidence(f, t),
    ]
    if kv is not None:
        ev.append(check("kv_usage_queued", kv, "<", "kv_low_usage", t.kv_low_usage))
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q004", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A4",
    title="Batch shape limited by policy",
    trigger=(
        "in the windows where requests wait: the GPU busy ≥ gpu_busy_saturated with "
        "idle-while-waiting < idle_waiting_saturated, mean tokens per step < underfill_tokens, "
        "running < batch_underfilled × the seat cap and KV usage < kv_low_usage"
    ),
    evidence="tokens_per_step_queued, running_fill_queued, busy_queued, kv_usage_queued",
    fix=(
        "raise max_num_batched_tokens or max_num_seqs; shortest-prompt-first admission against "
        "head-of-line blocking"
    ),
    cause=Cause.BATCH_SHAPE, remedies=(Remedy.BATCH_BUDGET,),
    reads=("underfill_tokens", "batch_underfilled", "kv_low_usage",
           "gpu_busy_saturated", "idle_waiting_saturated", "waiting_share", "queue_share_warn"),
    check=_check,
)
