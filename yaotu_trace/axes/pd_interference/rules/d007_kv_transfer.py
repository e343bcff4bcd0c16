"""D007: the KV transfer is a material share of TTFT in a disaggregated deployment."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts, transfer_share_at_least
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    return transfer_share_at_least(f.metrics, "transfer_ttft_share", t.transfer_ttft_share)


RULE: Rule[InterferenceFacts] = Rule(
    id="D007", axis=AxisName.PD_INTERFERENCE, severity=Severity.WARNING, source="D3",
    title="KV transfer is a material share of TTFT",
    trigger="disaggregated, and Σ KV transfer / Σ TTFT ≥ transfer_ttft_share",
    evidence="transfer_ttft_share, kv_transfer_p50_s, kv_transfer_p90_s, transfer_source",
    fix=(
        "a faster link (RDMA, more NICs), layer-wise KV streaming, FP8 KV (halves the bytes), "
        "or co-locate with chunked prefill (see the ledger)"
    ),
    cause=Cause.KV_TRANSFER, remedies=(Remedy.COLOCATE_CHUNKED,),
    reads=("transfer_ttft_share",),
    check=_check,
)
