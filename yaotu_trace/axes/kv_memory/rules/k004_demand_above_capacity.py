"""K004 (cost-model B3): peak KV demand above capacity."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, fact
from yaotu_trace.axes.kv_memory.metrics import KvMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: KvMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not (mt.peak_demand_tokens is not None and mt.kv_capacity_tokens is not None
            and mt.peak_demand_tokens > mt.kv_capacity_tokens):
        return None
    # The demand is an estimate from the request table (an upper bound); a measured usage
    # that never came near full says the pool held it.
    measured = mt.kv_usage_max
    if measured is not None and measured < t.kv_preempt_usage:
        return None
    return (
        fact("peak_demand_tokens", mt.peak_demand_tokens, "tokens"),
        fact("kv_capacity_tokens", mt.kv_capacity_tokens, "tokens"),
        fact("demand_over_capacity_share", mt.demand_over_capacity_share, "ratio"),
        fact("extra_kv_bytes", mt.extra_kv_bytes, "bytes"),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K004", axis=AxisName.KV_MEMORY, severity=Severity.WARNING, source="B3",
    title="Peak KV demand above capacity",
    trigger=("peak_demand_tokens > kv_capacity_tokens, unless the measured KV usage (step log "
             "or metrics) peaks below kv_preempt_usage"),
    evidence="peak_demand_tokens, kv_capacity_tokens, extra_kv_bytes",
    fix=(
        "FP8 KV (÷2), more TP (watch KV-head replication), higher gpu_memory_utilization, or "
        "lower max_num_seqs (trades back to queueing)"
    ),
    cause=Cause.KV_CAPACITY, remedies=(Remedy.LARGER_KV_POOL, Remedy.CONCURRENCY_CAP),
    reads=("kv_preempt_usage",),
    check=_check,
)
