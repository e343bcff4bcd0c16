"""D003 (cost-model D3): P/D disaggregation passes the network check.

Judged once interference is material (D001, D002), after the axis' other rules: the network
check (`axes/pd_interference/network.py`) is what the ledger prices disaggregation with.
"""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, Cause, Severity
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts, network_evidence
from yaotu_trace.axes.rule import Fired, Mark, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]) -> Fired | None:
    if Cause.PREFILL_INTERFERENCE not in found or not f.network().passes:
        return None
    return network_evidence(f.network(), t)


RULE: Rule[InterferenceFacts] = Rule(
    id="D003", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D3",
    title="P/D disaggregation passes the network check",
    trigger=(
        "D001 or D002, and prefill KV rate ≤ network_share_max × link and transfer ≤ "
        "transfer_ttft_share of TTFT"
    ),
    evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
    fix="disaggregation is a candidate; weigh its routing and failure handling",
    cause=None, remedies=(), marks=frozenset({Mark.WEIGHS_REMEDY}),
    reads=("network_share_max", "transfer_ttft_share"),
    check=_check,
)
