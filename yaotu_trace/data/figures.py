"""The data behind the HTML report's timing pictures, as frozen builtins: histograms, time
series, a window of inter-token gaps (computed by `profile/figures.py`). The HTML renderer
draws these numbers and `trace report --format json` shows the same ones."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Histogram:
    """Counts per bin; `edges` has one more entry than `counts`. Values above the last edge
    are counted in `overflow` (the tail beyond the 99.5th percentile) so the bars stay readable.
    """

    label: str
    unit: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    overflow: int
    total: int
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """A time series (x in seconds of the trace clock), with an optional capacity line."""

    label: str
    unit: str
    source: str
    t_s: tuple[float, ...]
    values: tuple[float, ...]
    capacity: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GapWindow:
    """Inter-token gaps in a window around the longest stall, with the prefill work overlaid.

    `prefill_spans_s` are (start, end, prefill tokens) of steps that computed prefill (step log)
    or, without one, (t, t, 0) marks at other requests' first tokens.
    """

    start_s: float
    end_s: float
    token_t_s: tuple[float, ...]
    gap_s: tuple[float, ...]
    median_gap_s: float
    prefill_spans_s: tuple[tuple[float, float, int], ...]
    prefill_source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlotData:
    """Everything the report draws that no other section carries; None = not measurable here,
    with the reason in `unavailable`."""

    hit_length: Histogram | None
    queue_time: Histogram | None
    ttft: Histogram | None
    kv_over_time: Series | None
    gaps: GapWindow | None
    unavailable: dict[str, str]
