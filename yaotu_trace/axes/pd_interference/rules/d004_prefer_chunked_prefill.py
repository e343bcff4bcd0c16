"""D004 (cost-model D4): prefer chunked prefill: disaggregation fails the network check.

Judged once interference is material (D001, D002), after the axis' other rules, on the network
check D003 passes.
"""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, Cause, Severity
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts, network_evidence
from yaotu_trace.axes.rule import Fired, Mark, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]) -> Fired | None:
    if Cause.PREFILL_INTERFERENCE not in found or f.network().passes:
        return None
    return network_evidence(f.network(), t)


RULE: Rule[InterferenceFacts] = Rule(
    id="D004", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D4",
    title="Prefer chunked prefill: disaggregation fails the network check",
    trigger="D001 or D002, and the network check of D003 fails",
    evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
    fix="chunked prefill; disaggregation would add TTFT on this link",
    cause=None, remedies=(), marks=frozenset({Mark.WEIGHS_REMEDY}),
    reads=("network_share_max", "transfer_ttft_share"),
    check=_check,
)
