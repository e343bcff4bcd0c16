"""Q004 (cost-model A4): batch shape limited by policy."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, persistent_queue, saturated
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: QueueingFacts, t: Thresholds, fired: frozenset[str]) -> Sequence[Evidence] | None:
    mt = f.metrics
    td = mt.tokens_per_step
    if not (persistent_queue(f, t) and saturated(f, t)
            and td is not None and td.p50 is not None and td.p50 < t.underfill_tokens
            and mt.running_fill_p75 is not None and mt.running_fill_p75 < t.batch_underfilled
            and (mt.kv_usage_p75 is None or mt.kv_usage_p75 < t.kv_low_usage)):
        return None
    ev = [
        check("tokens_per_step_p50", td.p50, "<", "underfill_tokens", t.underfill_tokens,
              "tokens"),
        check("running_fill_p75", mt.running_fill_p75, "<", "batch_underfilled",
              t.batch_underfilled),
        check("gpu_busy_fraction", mt.gpu_busy_fraction, ">=", "gpu_busy_saturated",
              t.gpu_busy_saturated),
    ]
    if mt.kv_usage_p75 is not None:
        ev.append(check("kv_usage_p75", mt.kv_usage_p75, "<", "kv_low_usage", t.kv_low_usage))
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q004", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A4",
    title="Batch shape limited by policy",
    trigger=(
        "a standing queue, gpu_busy_fraction ≥ gpu_busy_saturated, median tokens_per_step < "
        "underfill_tokens, running_fill_p75 < batch_underfilled and KV usage < kv_low_usage"
    ),
    evidence="tokens_per_step P50, running_fill_p75, gpu_busy_fraction, kv_usage_p75",
    fix=(
        "raise max_num_batched_tokens or max_num_seqs; shortest-prompt-first admission against "
        "head-of-line blocking"
    ),
    reads=("underfill_tokens", "batch_underfilled", "kv_low_usage",
           "gpu_busy_saturated", "idle_waiting_saturated", "waiting_share", "queue_share_warn"),
    check=_check,
)
