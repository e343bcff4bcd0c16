"""What the interference rules judge together: the axis' facts, the stalls' coincidence with
prefill and the stall numbers shown with them, the network check's evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from yaotu_trace.axes.base import Evidence, check, fact
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.pd_interference.network import Network
from yaotu_trace.axes.pd_interference.placement import PlacementMetrics
from yaotu_trace.axes.rule import Fired
from yaotu_trace.axes.thresholds import Thresholds


@dataclass(frozen=True, slots=True, kw_only=True)
class InterferenceFacts:
    """The interference metrics, and the P/D network check of the same input, computed when a
    rule first asks for it (only material interference makes disaggregation a question)."""

    metrics: InterferenceMetrics
    network: Callable[[], Network]


def coincidence(mt: InterferenceMetrics, t: Thresholds) -> Evidence:
    """prefill_coincidence against its threshold."""
    return check("prefill_coincidence", mt.prefill_coincidence, ">=", "prefill_coincidence",
                 t.prefill_coincidence)


def coincides(mt: InterferenceMetrics, t: Thresholds) -> bool:
    """Whether the stalls line up with prefill (D001 and D002 need it)."""
    coin = mt.prefill_coincidence
    return (mt.interference_share is not None and coin is not None
            and coin >= t.prefill_coincidence)


def stall_evidence(mt: InterferenceMetrics) -> tuple[Evidence, ...]:
    """The stall numbers every interference finding shows."""
    return (
        fact("decode_seconds_lost", mt.decode_seconds_lost, "s"),
        fact("stalls", mt.stalls, "gaps"),
        fact("stall_threshold_s", mt.stall_threshold_s, "s"),
    )


def transfer_share_at_least(mt: InterferenceMetrics, threshold_name: str, threshold: float
                            ) -> tuple[Evidence, ...] | None:
    """The evidence of a KV transfer that takes ≥ `threshold` of TTFT (D007 at the material
    share, D008 at the dominant one), None below it or when the run is not disaggregated."""
    pm = mt.placement
    share = None if pm is None else pm.transfer_ttft_share
    if pm is None or share is None or share < threshold:
        return None
    return (check("transfer_ttft_share", share, ">=", threshold_name, threshold),
            *transfer_evidence(pm))


def transfer_evidence(pm: PlacementMetrics) -> tuple[Evidence, ...]:
    """The transfer numbers every KV-transfer finding shows."""
    return (
        fact("kv_transfer_p50_s", pm.kv_transfer_s.p50, "s"),
        fact("kv_transfer_p90_s", pm.kv_transfer_s.p90, "s"),
        fact("kv_transfer_seconds_total", pm.kv_transfer_seconds_total, "s"),
        fact("transfer_source", pm.transfer_source),
    )


def network_evidence(net: Network, t: Thresholds) -> Fired:
    """The network check's numbers against its thresholds (D003 and D004 show the same), and
    why it cannot pass without the KV bytes per token."""
    evidence = (
        check("kv_bytes_per_s_peak", net.peak_rate, "<=", "network_share_max × link",
              t.network_share_max * net.link_bytes_s, "bytes/s"),
        check("transfer_ttft_share", net.xfer_share, "<=", "transfer_ttft_share",
              t.transfer_ttft_share),
        fact("link_gbps", net.link_gbps, "Gb/s"),
    )
    return Fired(evidence, "" if net.kv_bytes_per_token is not None else
                 "KV bytes per token unknown (--model): the network check cannot pass")


@dataclass(frozen=True, slots=True)
class ShortPool:
    """The pool that queues (`queued`, its wait as a share of TTFT) and the other one (`idle`,
    its busy share or load, None when nothing measures it)."""

    queued: str
    wait: float
    idle: str
    busy: float | None


def short_pool(pm: PlacementMetrics, wait_at_least: float, idle_busy: float, *,
               busy_known: bool) -> ShortPool | None:
    """The first pool whose wait is ≥ `wait_at_least` of TTFT while the other is busy ≤
    `idle_busy`; with `busy_known=False`, also while the other's load is not measured (the
    request intervals' upper bound above `idle_busy` measures nothing)."""
    upper_bound = (pm.busy_source or "").startswith("request intervals")
    sides = (("prefill", pm.prefill_wait_share, "decode", pm.decode_busy_share),
             ("decode", pm.decode_wait_share, "prefill", pm.prefill_busy_share))
    for queued, wait, idle, busy in sides:
        if wait is None or wait < wait_at_least:
            continue
        if busy is not None and busy <= idle_busy:
            return ShortPool(queued, wait, idle, busy)
        if not busy_known and (busy is None or upper_bound):
            return ShortPool(queued, wait, idle, None)
    return None


def pool_evidence(pm: PlacementMetrics, pool: ShortPool, wait_name: str, wait_threshold: float,
                  idle_busy: float) -> tuple[Evidence, ...]:
    """The numbers every P:D-ratio finding shows: the queued pool's wait and the other's load
    against their thresholds, the shape, which way to move instances, where the load is from."""
    busy = (check(f"{pool.idle}_busy_share", pool.busy, "<=", "pool_idle_busy", idle_busy)
            if pool.busy is not None else fact(f"{pool.idle}_busy_share", None))
    return (
        check(f"{pool.queued}_wait_share", pool.wait, ">=", wait_name, wait_threshold),
        busy,
        fact("pd_instances", f"{pm.prefill_instances}:{pm.decode_instances}"),
        fact("move_instances", f"{pool.idle} → {pool.queued}"),
        fact("busy_source", pm.busy_source),
    )
