"""`trace analyze` of a summary-only benchmark result: its run-level numbers, with units, and
the sections that need per-request data."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Grid, Heading, KeyValues, Line, View

# With more statistics than fit a line (inference-perf saves 15), these are shown.
MAX_STATS = 7
SHOWN_STATS = ("mean", "std", "min", "median", "p50", "p90", "p99", "max")


def view(summary: Any) -> View:
    """The run's settings, totals and latency statistics as the tool saved them (its notes are
    the input's, shown with it)."""
    blocks: View = [Heading(text=f"Benchmark summary  ({summary.tool}, run-level numbers only)",
                            markdown=f"Benchmark summary ({summary.tool}, run-level numbers only)")]
    if summary.run:
        blocks.append(KeyValues(rows=[(v.label, _shown(v)) for v in summary.run],
                                header=("setting", "value")))
    if summary.totals:
        blocks.append(KeyValues(rows=[(v.label, _shown(v)) for v in summary.totals]))
    if summary.latencies:
        held = list(dict.fromkeys(s for lat in summary.latencies for s in lat.stats))
        stats = [s for s in SHOWN_STATS if s in held] if len(held) > MAX_STATS else held
        blocks.append(Grid(
            header=["distribution", "unit", *stats],
            rows=[[lat.metric, lat.unit, *(fmt.as_given(lat.stats.get(s), 4) for s in stats)]
                  for lat in summary.latencies],
        ))
        if len(stats) < len(held):
            blocks.append(Line(text=f"{len(held)} statistics per distribution in the file, "
                                    f"{len(stats)} shown; all of them: --format json",
                               style="dim"))
    blocks.append(Line(
        text="not available without per-request data: " + "; ".join(summary.unavailable)
             + f" ({summary.fix})",
        style="dim",
    ))
    return blocks


def _shown(value: Any) -> str:
    """A number in the tool's unit as the file holds it, or a setting as saved."""
    text = value.value if isinstance(value.value, str) else fmt.as_given(value.value)
    return f"{text} {value.unit}".rstrip()
