"""K006: internal block waste above the PagedAttention norm."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.kv_memory.metrics import KvMetrics
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: KvMetrics, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    if not (mt.block_waste_fraction is not None and mt.block_waste_fraction > t.block_waste):
        return None
    return (
        check("block_waste_fraction", mt.block_waste_fraction, ">", "block_waste",
              t.block_waste),
        fact("block_size_tokens", mt.block_size_tokens, "tokens"),
    )


RULE: Rule[KvMetrics] = Rule(
    id="K006", axis=AxisName.KV_MEMORY, severity=Severity.INFO,
    title="Internal block waste above the PagedAttention norm",
    trigger="block_waste_fraction > block_waste",
    evidence="block_waste_fraction, block_size_tokens",
    fix="a smaller block size for short sequences",
    cause=None, remedies=(),
    reads=("block_waste",),
    check=_check,
)
