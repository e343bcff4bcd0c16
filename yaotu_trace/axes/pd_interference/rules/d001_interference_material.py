"""D001 (cost-model D1): prefill/decode interference is material."""

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
    if not (coincides(mt, t) and share is not None and share >= t.interference_material):
        return None
    return (check("interference_share", share, ">=", "interference_material",
                  t.interference_material), coincidence(mt, t), *stall_evidence(mt))


RULE: Rule[InterferenceFacts] = Rule(
    id="D001", axis=AxisName.PD_INTERFERENCE, severity=Severity.WARNING, source="D1",
    title="Prefill/decode interference is material",
    trigger=(
        "interference_share ≥ interference_material and prefill_coincidence ≥ "
        "prefill_coincidence"
    ),
    evidence="interference_share, decode_seconds_lost, prefill_coincidence, stalls",
    fix="compare chunked prefill against P/D disaggregation (see the ledger)",
    cause=Cause.PREFILL_INTERFERENCE, remedies=(Remedy.CHUNKED_PREFILL, Remedy.PD_DISAGGREGATION),
    reads=("interference_material", "prefill_coincidence"),
    check=_check,
)
