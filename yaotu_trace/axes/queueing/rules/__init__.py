"""The queueing rules, one file each, in id order (the order they are evaluated and listed).

A new rule is a new file here holding a `RULE` (see `yaotu_trace.axes.rule`) and one line below.
"""

from __future__ import annotations

from typing import Final

from yaotu_trace.axes.rule import load_rules, severities

RULES: Final = load_rules(__name__, (
    "q000_little_mismatch",
    "q001_arrival_burst",
    "q002_bursty_arrivals",
    "q003_dispatch_overhead",
    "q004_batch_shape",
    "q005_kv_admission",
    "q006_queueing_unexplained",
    "q007_failures_under_load",
    "q008_failures_on_one_instance",
    "q009_failures",
    "q010_load_imbalance",
    "q011_admission_blocked",
))
SEVERITY_OF: Final = severities(RULES)
