"""The kv_memory rules, one file each, in id order (the order they are evaluated and listed).

A new rule is a new file here holding a `RULE` (see `yaotu_trace.axes.rule`) and one line below.
"""

from __future__ import annotations

from typing import Final

from yaotu_trace.axes.rule import load_rules, severities

RULES: Final = load_rules(__name__, (
    "k001_kv_capacity",
    "k002_preemption_recompute",
    "k003_recompute_dominates",
    "k004_demand_above_capacity",
    "k005_spiky_demand",
    "k006_block_waste",
))
SEVERITY_OF: Final = severities(RULES)
