"""The numbers the console draws as text charts (`render/text_charts.py`), as one frozen value.

A command fills `Report.charts` with them only when the console will draw them; they are never
in the JSON or the Markdown. Each chart holds the value its core computed: arrivals and lengths
(`profile/workload_figures.py`), KV over time (`profile/figures.py:kv_series`), the prefix-reuse
overview's capacity points (`prefix/overview.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the charts' types: a report without pictures never loads their modules
    from yaotu_trace.data.figures import Series
    from yaotu_trace.data.prefix_reuse import ReuseOverview
    from yaotu_trace.data.workload_figures import ArrivalSeries, LengthDistribution


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalCharts:
    """What the console draws as pictures; a None chart is left out (its table still shows
    the numbers)."""

    arrivals: ArrivalSeries | None = None
    prompt_len: LengthDistribution | None = None
    output_len: LengthDistribution | None = None
    capacity: ReuseOverview | None = None
    kv: Series | None = None
