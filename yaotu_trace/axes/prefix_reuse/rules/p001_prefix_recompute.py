"""P001 (cost-model C1): prefix recompute is material."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds

# What to read when reusable prefixes are computed again (P002 says the same): the hot
# prefixes' `why` names the loss, and each loss has its own place to look.
HOT_PREFIXES = ("read the hot prefixes' why: isolation (compare their salts, adapters and "
                "template bytes before the first block), routing (the instances they were "
                "sent to) or eviction (the pool's size and a tier below it)")


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    share = mt.recomputed_share_of_prefill
    gap_ok = mt.reuse_gap is None or mt.reuse_gap > t.reuse_gap
    if not (share is not None and share > t.recompute_waste and gap_ok):
        return None
    ev = [check("recomputed_share_of_prefill", share, ">", "recompute_waste", t.recompute_waste),
          fact("recomputed_reusable_tokens", mt.recomputed_reusable_tokens, "tokens")]
    if mt.reuse_gap is not None:
        ev.insert(0, check("reuse_gap", mt.reuse_gap, ">", "reuse_gap", t.reuse_gap))
        ev.append(fact("observed_hit_rate", mt.observed_hit_rate, "ratio"))
    ev.append(fact("achievable_hit_rate", mt.achievable_hit_rate, "ratio"))
    return ev


RULE: Rule[PrefixMetrics] = Rule(
    id="P001", axis=AxisName.PREFIX_REUSE, severity=Severity.WARNING, source="C1",
    title="Prefix recompute is material",
    trigger=(
        "achievable − observed hit rate > reuse_gap and recomputed reusable tokens > "
        "recompute_waste of prefill tokens (without cached_tokens: the latter alone)"
    ),
    evidence="achievable_hit_rate, observed_hit_rate, recomputed_share_of_prefill",
    fix="attribute the gap (cache keys, routing, capacity: P003–P005) and remove the largest "
        "loss first",
    cause=Cause.PREFIX_RECOMPUTE, remedies=(Remedy.FIX_CACHE_KEYS,), next_step=HOT_PREFIXES,
    reads=("recompute_waste", "reuse_gap"),
    check=_check,
)
