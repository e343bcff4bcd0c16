"""D005 (cost-model D5): interference below the material level."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    f: InterferenceFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    share = mt.interference_share
    if not (share is not None and share < t.interference_material):
        return None
    return (
        check("interference_share", share, "<", "interference_material",
              t.interference_material),
        fact("decode_seconds_lost", mt.decode_seconds_lost, "s"),
    )


RULE: Rule[InterferenceFacts] = Rule(
    id="D005", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D5",
    title="Interference below the material level",
    trigger="interference_share < interference_material",
    evidence="interference_share",
    fix="not an interference problem; look at queueing, KV memory and prefix reuse",
    cause=None, remedies=(),
    reads=("interference_material",),
    check=_check,
)
