"""D005 (cost-model D5): interference below the material level."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check, fact
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(
    mt: InterferenceMetrics, t: Thresholds, fired: frozenset[str]
) -> Sequence[Evidence] | None:
    share = mt.interference_share
    if not (share is not None and share < t.interference_material):
        return None
    return (
        check("interference_share", share, "<", "interference_material",
              t.interference_material),
        fact("decode_seconds_lost", mt.decode_seconds_lost, "s"),
    )


RULE: Rule[InterferenceMetrics] = Rule(
    id="D005", axis=AxisName.PD_INTERFERENCE, severity=Severity.INFO, source="D5",
    title="Interference below the material level",
    trigger="interference_share < interference_material",
    evidence="interference_share",
    fix="not an interference problem; look at queueing, KV memory and prefix reuse",
    reads=("interference_material",),
    check=_check,
)
