"""D008: the KV transfer dominates TTFT in a disaggregated deployment."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts, transfer_share_at_least
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    return transfer_share_at_least(f.metrics, "kv_transfer_dominant", t.kv_transfer_dominant)


RULE: Rule[InterferenceFacts] = Rule(
    id="D008", axis=AxisName.PD_INTERFERENCE, severity=Severity.BOTTLENECK, source="D4",
    title="KV transfer dominates TTFT",
    trigger="disaggregated, and Σ KV transfer / Σ TTFT ≥ kv_transfer_dominant",
    evidence="transfer_ttft_share, kv_transfer_p50_s, kv_transfer_p90_s",
    fix=(
        "the link sets TTFT: co-locate with chunked prefill unless RDMA of ≥ 100 Gb/s per node "
        "is available (cost-model §3.4)"
    ),
    cause=Cause.KV_TRANSFER, remedies=(Remedy.COLOCATE_CHUNKED,),
    reads=("kv_transfer_dominant",),
    check=_check,
)
