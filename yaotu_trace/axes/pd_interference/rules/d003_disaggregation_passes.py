"""D003 (cost-model D3): P/D disaggregation passes the network check.

Decided with the remedy ledger's P/D disaggregation network check, which emits the hit;
the words live here with the other rules.
"""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, Severity
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.rule import Rule

RULE: Rule[InterferenceMetrics] = Rule(
    id="D003", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D3",
    title="P/D disaggregation passes the network check",
    trigger=(
        "D001 or D002, and prefill KV rate ≤ network_share_max × link and transfer ≤ "
        "transfer_ttft_share of TTFT"
    ),
    evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
    fix="disaggregation is a candidate; weigh its routing and failure handling",
    reads=("network_share_max", "transfer_ttft_share"),
)
