"""P007 (cost-model C1, C2): prefill lost to routing dominates: the routing is the
bottleneck."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.prefix_reuse.rules.p003_routing_loss import routing_evidence
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    # NOTE: the prefix axis' bottleneck scale: a quarter of the prompt tokens prefilled again
    # that the cache could have supplied (P002's reuse_dominant), here lost to routing.
    return routing_evidence(mt, "reuse_dominant", t.reuse_dominant)


RULE: Rule[PrefixMetrics] = Rule(
    id="P007", axis=AxisName.PREFIX_REUSE, severity=Severity.BOTTLENECK, source="C2",
    title="Prefill lost to routing dominates: cache-aware routing is the largest saving",
    trigger=(
        "replicas > 1 and prefix-affinity routing over the same instances hits ≥ "
        "reuse_dominant of the prompt tokens more than the trace's own routing"
    ),
    evidence="affinity_gain_share, achievable_hit_rate (as routed), affinity_hit_rate",
    fix="route by prefix (sgl-router cache_aware, Dynamo kv-aware) before adding compute",
    cause=Cause.ROUTING, remedies=(Remedy.CACHE_AWARE_ROUTING,),
    next_step="replay with --scope instance --route prefix-affinity to see the routed caches",
    reads=("reuse_dominant",),
    check=_check,
)
