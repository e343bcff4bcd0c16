"""The thresholds of `trace diagnose`, re-exported from `yaotu_trace.axes.thresholds`.

They live in the axes layer, next to the rules that read them; this name stays for callers
above it (the command line parses `--threshold` through it).
"""

from __future__ import annotations

from yaotu_trace.axes.thresholds import (
    THRESHOLDS,
    Threshold,
    Thresholds,
    make_thresholds,
    parse_threshold_options,
    unknown_message,
)

__all__ = ["THRESHOLDS", "Threshold", "Thresholds", "make_thresholds",
           "parse_threshold_options", "unknown_message"]
