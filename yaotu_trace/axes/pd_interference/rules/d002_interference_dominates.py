"""D002 (cost-model D1): prefill/decode interference dominates decode time."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check
from yaotu_trace.axes.pd_interference.rules.shared import (
    InterferenceFacts,
    coincidence,
    coincides,
    stall_evidence,
)
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    share = mt.interference_share
    if not (coincides(mt, t) and share is not None and share >= t.interference_dominant):
        return None
    return (check("interference_share", share, ">=", "interference_dominant",
                  t.interference_dominant), coincidence(mt, t), *stall_evidence(mt))


RULE: Rule[InterferenceFacts] = Rule(
    id="D002", axis=AxisName.PD_INTERFERENCE, severity=Severity.BOTTLENECK, source="D1",
    title="Prefill/decode interference dominates decode time",
    trigger=(
        "interference_share ≥ interference_dominant and prefill_coincidence ≥ "
        "prefill_coincidence"
    ),
    evidence="interference_share, decode_seconds_lost, prefill_coincidence",
    fix=(
        "chunked prefill with a budget from the TBT SLO, or P/D disaggregation when the "
        "network check passes"
    ),
    cause=Cause.PREFILL_INTERFERENCE, remedies=(Remedy.CHUNKED_PREFILL, Remedy.PD_DISAGGREGATION),
    reads=("interference_dominant", "prefill_coincidence"),
    check=_check,
)
