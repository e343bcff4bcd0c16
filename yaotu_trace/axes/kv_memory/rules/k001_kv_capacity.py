"""K001 (cost-model B1): preemption at a full KV cache."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.kv_memory.metrics import KvMetrics
from yaotu_trace.axes.kv_memory.rules.shared import preempting, usage_at_preemption
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: KvMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    at_name, at_value = usage_at_preemption(mt)
    if not (preempting(mt) and at_value is not None and at_value >= t.kv_preempt_usage):
        return None
    return (
        fact("preemptions_total", mt.preemptions_total, "preemptions"),
        check(at_name, at_value, ">=", "kv_preempt_usage", t.kv_preempt_usage),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K001", axis=AxisName.KV_MEMORY, severity=Severity.BOTTLENECK, source="B1",
    title="Preemption at a full KV cache",
    trigger="preemptions > 0 and KV usage at the preempting steps ≥ kv_preempt_usage",
    evidence="preemptions_total, kv_usage_at_preemption",
    fix=(
        "raise gpu_memory_utilization, FP8 KV, more TP, or lower max_num_seqs / "
        "max_num_batched_tokens"
    ),
    cause=Cause.KV_CAPACITY, remedies=(Remedy.LARGER_KV_POOL, Remedy.CONCURRENCY_CAP),
    reads=("kv_preempt_usage",),
    check=_check,
)
