"""P003 (cost-model C2): reuse lost to routing: cache-aware routing candidate."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not ((mt.instances or 1) > 1 and mt.routing_loss_share is not None
            and mt.routing_loss_share > t.routing_gap):
        return None
    return (
        check("routing_loss_share", mt.routing_loss_share, ">", "routing_gap", t.routing_gap),
        fact("instances", mt.instances, "instances"),
    )


RULE: Rule[PrefixMetrics] = Rule(
    id="P003", axis=AxisName.PREFIX_REUSE, severity=Severity.WARNING, source="C2",
    title="Reuse lost to routing: cache-aware routing candidate",
    trigger="replicas > 1 and the routing share of the loss waterfall > routing_gap",
    evidence="routing_loss_share",
    fix="cache-aware (prefix-affinity) routing; watch hot-prefix load imbalance",
    cause=Cause.ROUTING, remedies=(Remedy.CACHE_AWARE_ROUTING,),
    next_step="replay with --route prefix-affinity to size the routing gain",
    reads=("routing_gap",),
    check=_check,
)
