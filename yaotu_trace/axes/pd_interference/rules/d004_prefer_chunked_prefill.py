"""D004 (cost-model D4): prefer chunked prefill: disaggregation fails the network check.

Decided with the remedy ledger's P/D disaggregation network check, which emits the hit;
the words live here with the other rules.
"""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, Severity
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.rule import Rule

RULE: Rule[InterferenceMetrics] = Rule(
    id="D004", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D4",
    title="Prefer chunked prefill: disaggregation fails the network check",
    trigger="D001 or D002, and the network check of D003 fails",
    evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
    fix="chunked prefill; disaggregation would add TTFT on this link",
    reads=("network_share_max", "transfer_ttft_share"),
)
