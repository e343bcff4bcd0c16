"""The prefix_reuse rules, one file each, in id order (the order they are evaluated and listed).

A new rule is a new file here holding a `RULE` (see `yaotu_trace.axes.rule`) and one line below.
"""

from __future__ import annotations

from typing import Final

from yaotu_trace.axes.rule import load_rules, severities

RULES: Final = load_rules(__name__, (
    "p001_prefix_recompute",
    "p002_prefix_recompute_dominates",
    "p003_routing_loss",
    "p004_capacity_loss",
    "p005_cache_key_loss",
    "p006_observed_hits_unknown",
    "p007_routing_loss_dominates",
))
SEVERITY_OF: Final = severities(RULES)
