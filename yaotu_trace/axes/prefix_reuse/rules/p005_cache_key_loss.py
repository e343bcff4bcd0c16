"""P005: reuse lost to cache keys (tenant salt, adapter, template)."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: PrefixMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not (mt.key_loss_share is not None and mt.key_loss_share > t.reuse_gap):
        return None
    return (check("key_loss_share", mt.key_loss_share, ">", "reuse_gap", t.reuse_gap),)


RULE: Rule[PrefixMetrics] = Rule(
    id="P005", axis=AxisName.PREFIX_REUSE, severity=Severity.WARNING,
    title="Reuse lost to cache keys (tenant salt, adapter, template)",
    trigger="the cache-key share of the loss waterfall > reuse_gap",
    evidence="key_loss_share",
    fix="review tenant salts and adapter namespaces; keep templates byte-stable",
    cause=Cause.CACHE_KEYS, remedies=(Remedy.TENANT_SALT_REVIEW,),
    reads=("reuse_gap",),
    check=_check,
)
