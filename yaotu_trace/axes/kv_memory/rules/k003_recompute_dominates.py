"""K003 (cost-model B2): preemption recompute dominates."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.kv_memory.metrics import KvMetrics
from yaotu_trace.axes.kv_memory.rules.shared import preempting
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: KvMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    frac = mt.recompute_token_fraction
    if not (preempting(mt) and frac is not None and frac > t.recompute_dominant):
        return None
    return (
        check("recompute_token_fraction", frac, ">", "recompute_dominant", t.recompute_dominant),
        fact("recomputed_tokens", mt.recomputed_tokens, "tokens"),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K003", axis=AxisName.KV_MEMORY, severity=Severity.BOTTLENECK, source="B2",
    title="Preemption recompute dominates",
    trigger="recompute_token_fraction > recompute_dominant",
    evidence="recompute_token_fraction, recomputed_tokens",
    fix="capacity budget, block organisation and concurrency first, not splitting clusters",
    cause=Cause.PREEMPTION, remedies=(Remedy.LARGER_KV_POOL, Remedy.CONCURRENCY_CAP),
    reads=("recompute_dominant",),
    check=_check,
)
