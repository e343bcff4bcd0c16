"""D011: one pool's queue is most of TTFT: the P:D ratio is the bottleneck."""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, Cause, Severity
from yaotu_trace.axes.pd_interference.rules.shared import (
    InterferenceFacts,
    pool_evidence,
    short_pool,
)
from yaotu_trace.axes.rule import Fired, Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]) -> Fired | None:
    pm = f.metrics.placement
    if pm is None:
        return None
    # NOTE: the same scale as a queue anywhere else (Q001, D008): half of TTFT waiting is the
    # bottleneck. The other pool's load need not be measured: a pool this short is the
    # finding whichever way the instances then move.
    pool = short_pool(pm, t.queue_share_of_ttft, t.pool_idle_busy, busy_known=False)
    if pool is None:
        return None
    detail = "" if pool.busy is not None else (
        f"the {pool.idle} pool's load is not measured (add a step log or the metrics export): "
        f"if it is busy too, both pools are short")
    return Fired(pool_evidence(pm, pool, "queue_share_of_ttft", t.queue_share_of_ttft,
                               t.pool_idle_busy), detail)


RULE: Rule[InterferenceFacts] = Rule(
    id="D011", axis=AxisName.PD_INTERFERENCE, severity=Severity.BOTTLENECK,
    title="P:D ratio off: one pool's queue is most of TTFT",
    trigger=(
        "disaggregated, and one pool's wait (the decode pool's: decode_start_s − "
        "first_token_s − kv_transfer_s) ≥ queue_share_of_ttft of the client's TTFT while "
        "the other pool is busy ≤ pool_idle_busy or its load is not measured"
    ),
    evidence="prefill_wait_share or decode_wait_share, the other pool's busy share, "
             "move_instances",
    fix=(
        "move instances from the other pool to the queued one (the ledger prices one), or add "
        "instances to the queued pool when the other is busy too"
    ),
    cause=Cause.PD_RATIO, remedies=(Remedy.MOVE_INSTANCES, Remedy.COLOCATE_CHUNKED),
    reads=("queue_share_of_ttft", "pool_idle_busy"),
    check=_check,
)
