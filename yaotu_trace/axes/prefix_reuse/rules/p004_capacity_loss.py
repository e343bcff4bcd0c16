"""P004 (cost-model C3): reuse lost to cache capacity."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not (mt.capacity_loss_share is not None and mt.capacity_loss_share > t.capacity_gap):
        return None
    return (check("capacity_loss_share", mt.capacity_loss_share, ">", "capacity_gap",
                  t.capacity_gap),)


RULE: Rule[PrefixMetrics] = Rule(
    id="P004", axis=AxisName.PREFIX_REUSE, severity=Severity.WARNING, source="C3",
    title="Reuse lost to cache capacity",
    trigger="the capacity share of the loss waterfall > capacity_gap",
    evidence="capacity_loss_share",
    fix="a CPU tier below the GPU pool (the ledger's kv_tier entry names its size, the hits it "
        "wins back and what its loads cost, by Mooncake Eq. 2) or a larger pool",
    cause=Cause.CACHE_CAPACITY, remedies=(Remedy.KV_TIER, Remedy.LARGER_KV_POOL),
    reads=("capacity_gap",),
    check=_check,
)
