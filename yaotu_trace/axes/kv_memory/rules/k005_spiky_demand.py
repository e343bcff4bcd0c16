"""K005 (cost-model B4): preemption at low average KV usage: spiky demand."""

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
    _, at_value = usage_at_preemption(mt)
    if not (preempting(mt) and mt.kv_usage_mean is not None
            and mt.kv_usage_mean < t.kv_low_usage
            and (at_value is None or at_value < t.kv_preempt_usage)):
        return None
    return (
        check("kv_usage_mean", mt.kv_usage_mean, "<", "kv_low_usage", t.kv_low_usage),
        fact("preemptions_total", mt.preemptions_total, "preemptions"),
        fact("n_safe_p95", mt.n_safe_p95, "requests"),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K005", axis=AxisName.KV_MEMORY, severity=Severity.WARNING, source="B4",
    title="Preemption at low average KV usage: spiky demand",
    trigger="preemptions > 0 and mean KV usage < kv_low_usage",
    evidence="kv_usage_mean, preemptions_total, n_safe_p95",
    fix="cap concurrency near n_safe_p95 (capacity / P95 final length)",
    cause=Cause.SPIKY_DEMAND, remedies=(Remedy.LARGER_KV_POOL, Remedy.CONCURRENCY_CAP),
    reads=("kv_low_usage", "kv_preempt_usage"),
    check=_check,
)
