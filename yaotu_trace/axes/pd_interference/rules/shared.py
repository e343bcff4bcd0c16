"""What several interference rules read: the stalls' coincidence with prefill and the stall
numbers shown with them."""

from __future__ import annotations

from yaotu_trace.axes.base import Evidence, check, fact
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.pd_interference.placement import PlacementMetrics
from yaotu_trace.axes.thresholds import Thresholds


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
