"""The pd_interference rules, one file each, in id order (the order they are evaluated and listed).

A new rule is a new file here holding a `RULE` (see `yaotu_trace.axes.rule`) and one line below.
"""

from __future__ import annotations

from typing import Final

from yaotu_trace.axes.rule import load_rules, severities

RULES: Final = load_rules(__name__, (
    "d001_interference_material",
    "d002_interference_dominates",
    "d003_disaggregation_passes",
    "d004_prefer_chunked_prefill",
    "d005_interference_minor",
    "d006_stalls_unexplained",
))
SEVERITY_OF: Final = severities(RULES)
