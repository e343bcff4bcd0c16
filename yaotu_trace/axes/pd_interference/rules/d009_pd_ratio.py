"""D009: the P:D ratio is off: one pool queues while the other idles."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity
from yaotu_trace.axes.pd_interference.rules.shared import (
    InterferenceFacts,
    pool_evidence,
    short_pool,
)
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    pm = f.metrics.placement
    if pm is None:
        return None
    pool = short_pool(pm, t.pool_wait_share, t.pool_idle_busy, busy_known=True)
    if pool is None:
        return None
    return pool_evidence(pm, pool, "pool_wait_share", t.pool_wait_share, t.pool_idle_busy)


RULE: Rule[InterferenceFacts] = Rule(
    id="D009", axis=AxisName.PD_INTERFERENCE, severity=Severity.WARNING,
    title="P:D ratio off: one pool queues while the other idles",
    trigger=(
        "disaggregated, and one pool's wait ≥ pool_wait_share of TTFT while the other pool is "
        "busy ≤ pool_idle_busy"
    ),
    evidence="prefill_wait_share or decode_wait_share, the other pool's busy share, "
             "move_instances",
    fix=(
        "move instances from the idle pool to the queued one (move_instances says which way; "
        "the ledger prices one), or let idle decode instances prefill locally"
    ),
    cause=Cause.PD_RATIO, remedies=(Remedy.MOVE_INSTANCES, Remedy.COLOCATE_CHUNKED),
    reads=("pool_wait_share", "pool_idle_busy"),
    check=_check,
)
