"""K002 (cost-model B2): material preemption recompute."""

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
    frac, share = mt.recompute_token_fraction, mt.preempted_request_share
    if not (preempting(mt) and ((frac is not None and frac > t.recompute_material)
                                or (share is not None and share > t.preempted_material))):
        return None
    return (
        check("recompute_token_fraction", frac, ">", "recompute_material", t.recompute_material),
        check("preempted_request_share", share, ">", "preempted_material", t.preempted_material),
        fact("recomputed_tokens", mt.recomputed_tokens, "tokens"),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K002", axis=AxisName.KV_MEMORY, severity=Severity.WARNING, source="B2",
    title="Material preemption: its recompute, or the requests it hits",
    trigger=(
        "recompute_token_fraction > recompute_material or preempted_request_share > "
        "preempted_material"
    ),
    evidence="recompute_token_fraction, preempted_request_share, recomputed_tokens",
    fix="size the KV pool or cap concurrency so preemption stays rare",
    cause=Cause.PREEMPTION, remedies=(Remedy.LARGER_KV_POOL, Remedy.CONCURRENCY_CAP),
    reads=("recompute_material", "preempted_material"),
    check=_check,
)
