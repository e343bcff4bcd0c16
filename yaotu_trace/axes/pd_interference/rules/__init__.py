"""The pd_interference rules, one file each, in id order (the order they are evaluated and
listed): D001–D006 judge interference, D007–D011 the placement of a disaggregated deployment.

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
    "d007_kv_transfer",
    "d008_kv_transfer_dominates",
    "d009_pd_ratio",
    "d010_transfer_failures",
    "d011_pool_queue_dominates",
))
SEVERITY_OF: Final = severities(RULES)
