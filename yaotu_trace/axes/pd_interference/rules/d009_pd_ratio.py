"""D009: the P:D ratio is off: one pool queues while the other idles."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    pm = mt.placement
    if pm is None:
        return None
    sides = (("prefill", pm.prefill_wait_share, "decode", pm.decode_busy_share),
             ("decode", pm.decode_wait_share, "prefill", pm.prefill_busy_share))
    for queued, wait, idle, busy in sides:
        if (wait is not None and busy is not None and wait >= t.pool_wait_share
                and busy <= t.pool_idle_busy):
            return (
                check(f"{queued}_wait_share", wait, ">=", "pool_wait_share", t.pool_wait_share),
                check(f"{idle}_busy_share", busy, "<=", "pool_idle_busy", t.pool_idle_busy),
                fact("pd_instances", f"{pm.prefill_instances}:{pm.decode_instances}"),
                fact("move_instances", f"{idle} → {queued}"),
                fact("busy_source", pm.busy_source),
            )
    return None


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
        "move instances from the idle pool to the queued one (move_instances says which way), "
        "or let idle decode instances prefill locally"
    ),
    cause=Cause.PD_RATIO, remedies=(Remedy.COLOCATE_CHUNKED,),
    reads=("pool_wait_share", "pool_idle_busy"),
    check=_check,
)
