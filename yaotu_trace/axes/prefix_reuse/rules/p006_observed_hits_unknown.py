"""P006: reusable prefixes, observed hits unknown."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not (mt.observed_hit_rate is None and mt.achievable_hit_rate is not None
            and mt.achievable_hit_rate > t.reuse_gap):
        return None
    return (
        check("achievable_hit_rate", mt.achievable_hit_rate, ">", "reuse_gap", t.reuse_gap),
        fact("achievable_hit_tokens", mt.achievable_hit_tokens, "tokens"),
    )


RULE: Rule[PrefixMetrics] = Rule(
    id="P006", axis=AxisName.PREFIX_REUSE, severity=Severity.INFO,
    title="Reusable prefixes, observed hits unknown",
    trigger=(
        "no observed hits (cached_tokens or prefix-cache metrics) and achievable_hit_rate > "
        "reuse_gap"
    ),
    evidence="achievable_hit_rate, achievable_hit_tokens",
    fix=(
        "make sure prefix caching is on and export cached_tokens or "
        "vllm:prefix_cache_hits_total to compare"
    ),
    cause=None, remedies=(),
    reads=("reuse_gap",),
    check=_check,
)
