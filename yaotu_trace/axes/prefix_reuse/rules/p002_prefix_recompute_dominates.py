"""P002 (cost-model C1): prefix recompute dominates prefill work."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.prefix_reuse.rules.p001_prefix_recompute import HOT_PREFIXES
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    # Only on top of material recompute (P001) found first: then whether it dominates.
    share = mt.recomputed_share_of_prefill
    if not (Cause.PREFIX_RECOMPUTE in found and share is not None and share >= t.reuse_dominant):
        return None
    return (
        check("recomputed_share_of_prefill", share, ">=", "reuse_dominant", t.reuse_dominant),
        fact("recomputed_reusable_tokens", mt.recomputed_reusable_tokens, "tokens"),
    )


RULE: Rule[PrefixMetrics] = Rule(
    id="P002", axis=AxisName.PREFIX_REUSE, severity=Severity.BOTTLENECK, source="C1",
    title="Prefix recompute dominates prefill work",
    trigger="recomputed_share_of_prefill ≥ reuse_dominant",
    evidence="recomputed_share_of_prefill, recomputed_reusable_tokens",
    fix="remove the largest loss (cache keys, routing or capacity: P003–P005) before adding "
        "compute",
    cause=Cause.PREFIX_RECOMPUTE, remedies=(Remedy.FIX_CACHE_KEYS,), next_step=HOT_PREFIXES,
    reads=("reuse_dominant",),
    check=_check,
)
