"""D007: the KV transfer is a material share of TTFT in a disaggregated deployment."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.pd_interference.rules.shared import transfer_evidence
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: InterferenceMetrics, t: Thresholds, fired: frozenset[str]
) -> Sequence[Evidence] | None:
    pm = mt.placement
    share = None if pm is None else pm.transfer_ttft_share
    if pm is None or share is None or share < t.transfer_ttft_share:
        return None
    return (check("transfer_ttft_share", share, ">=", "transfer_ttft_share",
                  t.transfer_ttft_share), *transfer_evidence(pm))


RULE: Rule[InterferenceMetrics] = Rule(
    id="D007", axis=AxisName.PD_INTERFERENCE, severity=Severity.WARNING, source="D3",
    title="KV transfer is a material share of TTFT",
    trigger="disaggregated, and Σ KV transfer / Σ TTFT ≥ transfer_ttft_share",
    evidence="transfer_ttft_share, kv_transfer_p50_s, kv_transfer_p90_s, transfer_source",
    fix=(
        "a faster link (RDMA, more NICs), layer-wise KV streaming, FP8 KV (halves the bytes), "
        "or co-locate with chunked prefill (see the ledger)"
    ),
    reads=("transfer_ttft_share",),
    check=_check,
)
