"""D010: transfers fail or fall back to local prefill."""

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
    share = None if pm is None else pm.failure_share
    if pm is None or share is None or share < t.transfer_failure_share:
        return None
    return (
        check("failure_share", share, ">=", "transfer_failure_share", t.transfer_failure_share),
        fact("transfer_failures", pm.transfer_failures, "requests"),
        fact("fallback_requests", pm.fallback_requests, "requests"),
        fact("disaggregated_requests", pm.disaggregated_requests, "requests"),
    )


RULE: Rule[InterferenceFacts] = Rule(
    id="D010", axis=AxisName.PD_INTERFERENCE, severity=Severity.WARNING,
    title="KV transfers fail or fall back to local prefill",
    trigger=(
        "disaggregated, and (failed transfers + fallbacks) / handed-off requests ≥ "
        "transfer_failure_share"
    ),
    evidence="failure_share, transfer_failures, fallback_requests",
    fix=(
        "check the transfer engine's errors and timeouts and the prefill pool's load; a "
        "fallback prefills on the decode instance and stalls its decodes"
    ),
    cause=Cause.TRANSFER_FAILURES, remedies=(Remedy.COLOCATE_CHUNKED,),
    reads=("transfer_failure_share",),
    check=_check,
)
