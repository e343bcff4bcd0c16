"""P003 (cost-model C2): reuse lost to routing: cache-aware routing candidate."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def routing_evidence(mt: PrefixMetrics, name: str, threshold: float
                     ) -> tuple[Evidence, ...] | None:
    """The evidence that cache-aware routing over the same instances would hit more than the
    trace's own routing by ≥ `threshold` of the prompt tokens; None below it, with one
    instance, or when the replay could not route."""
    gain = mt.affinity_gain_share
    if not ((mt.instances or 1) > 1 and gain is not None and gain >= threshold):
        return None
    return (
        check("affinity_gain_share", gain, ">=", name, threshold),
        fact("achievable_hit_rate", mt.achievable_hit_rate, "ratio"),
        fact("affinity_hit_rate", mt.affinity_hit_rate, "ratio"),
        fact("instances", mt.instances, "instances"),
    )


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    return routing_evidence(mt, "routing_gap", t.routing_gap)


RULE: Rule[PrefixMetrics] = Rule(
    id="P003", axis=AxisName.PREFIX_REUSE, severity=Severity.WARNING, source="C2",
    title="Reuse lost to routing: cache-aware routing candidate",
    trigger=(
        "replicas > 1 and the prefix replay under prefix-affinity routing over the same "
        "instances hits ≥ routing_gap of the prompt tokens more than the trace's own routing"
    ),
    evidence="affinity_gain_share, achievable_hit_rate (as routed), affinity_hit_rate",
    fix="cache-aware (prefix-affinity) routing; watch hot-prefix load imbalance",
    cause=Cause.ROUTING, remedies=(Remedy.CACHE_AWARE_ROUTING,),
    next_step="replay with --scope instance --route prefix-affinity to see the routed caches",
    reads=("routing_gap",),
    check=_check,
)
