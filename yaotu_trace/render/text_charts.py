"""Compact text charts for the console: numbers in, lines of text out.

A sparkline maps each value to one of eight block characters (▁▂▃▄▅▆▇█, or `.:-=+*#@` when
the output cannot encode them), scaled so the largest value drawn is the full block and a
zero is a blank; a value above zero is never blank. Every chart fits the width it is given.

The numbers are a report's `charts` (`data/charts.py:TerminalCharts`), which a command fills
only when the console will draw them, so the JSON and Markdown outputs never carry them.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from yaotu_trace.render import fmt

if TYPE_CHECKING:
    from yaotu_trace.data.charts import TerminalCharts
    from yaotu_trace.data.figures import Series
    from yaotu_trace.data.prefix_reuse import ReuseOverview
    from yaotu_trace.data.workload_figures import ArrivalSeries, LengthDistribution

UNICODE_LEVELS = "▁▂▃▄▅▆▇█"
ASCII_LEVELS = ".:-=+*#@"
INDENT = "  "
# Columns a length histogram gives each of its bins at most: wide enough to read, compact.
COLUMNS_PER_BIN = 2


def wrap(line: str, width: int) -> list[str]:
    """A line of words wrapped to `width`, continuations indented two more than it."""
    lead = line[:len(line) - len(line.lstrip())]
    return textwrap.wrap(line.strip(), width, initial_indent=lead,
                         subsequent_indent=lead + "  ", break_on_hyphens=False) or [""]


def levels(values: Sequence[float], top: float | None = None) -> list[int]:
    """0 (blank) for a value ≤ 0, else 1..8 in proportion to `top` (default: the largest);
    the largest value is 8 and a positive value at least 1."""
    scale = max(values, default=0.0) if top is None else top
    out = []
    for v in values:
        if not v > 0 or not scale > 0:
            out.append(0)
        else:
            out.append(max(1, min(8, math.ceil(8 * v / scale - 1e-9))))
    return out


def sparkline(values: Sequence[float], *, top: float | None = None, unicode: bool = True) -> str:
    """One character per value (see `levels`)."""
    chars = " " + (UNICODE_LEVELS if unicode else ASCII_LEVELS)
    return "".join(chars[k] for k in levels(values, top))


def group_means(values: Sequence[float], columns: int) -> tuple[list[float], int]:
    """The values averaged in runs of k consecutive values, the smallest k giving at most
    `columns` runs (the last run may be shorter); returns (means, k)."""
    if not values:
        return [], 1
    k = max(1, math.ceil(len(values) / max(1, columns)))
    means = [sum(values[i:i + k]) / len(values[i:i + k]) for i in range(0, len(values), k)]
    return means, k


def time_means(t_s: Sequence[float], values: Sequence[float], columns: int
               ) -> tuple[list[float | None], float, float]:
    """The mean value in each of `columns` equal stretches of [min t, max t] (None where no
    point falls); returns (means, start s, column width s)."""
    lo, hi = min(t_s), max(t_s)
    width_s = (hi - lo) / columns if hi > lo else 1.0
    sums = [0.0] * columns
    counts = [0] * columns
    for t, v in zip(t_s, values, strict=True):
        k = min(columns - 1, int((t - lo) / width_s))
        sums[k] += v
        counts[k] += 1
    return [s / c if c else None for s, c in zip(sums, counts, strict=True)], lo, width_s


def marks(width: int, points: Sequence[tuple[int, str]], *,
          unicode: bool = True) -> list[str]:
    """'▲' (or '^') at each column with its label after it, else before it; a label with no
    room beside its arrow goes on a second line, starting under its arrow."""
    arrow = "▲" if unicode else "^"
    pts = sorted((col, label) for col, label in points if col < width)
    line = [" "] * width
    for col, _ in pts:
        line[col] = arrow
    used = -1  # the last column written
    below: list[tuple[int, str]] = []
    for i, (col, label) in enumerate(pts):
        limit = pts[i + 1][0] - 2 if i + 1 < len(pts) else width - 1
        if col + len(label) <= limit:
            line[col + 1:col + 1 + len(label)] = label
            used = col + len(label)
        elif col - len(label) - 1 > used:
            line[col - len(label):col] = label
            used = col
        else:
            used = col
            below.append((col, label))
    out = ["".join(line).rstrip()]
    if below:
        second: list[str] = []
        for col, label in below:
            start = max(col, len(second) + (1 if second else 0))
            second += [" "] * (start - len(second)) + list(label)
        out.append("".join(second)[:width].rstrip())
    return out


def window_columns(start_s: float, end_s: float, first_s: float, column_s: float,
                   columns: int) -> tuple[int, int]:
    """The first and last column a window [start, end) overlaps."""
    a = max(0, min(columns - 1, int((start_s - first_s) / column_s)))
    b = max(a, min(columns - 1, math.ceil((end_s - first_s) / column_s) - 1))
    return a, b


def ranked_spans(width: int, spans: Sequence[tuple[int, int]], *, unicode: bool = True) -> str:
    """A line underlining each span of columns ('▔' or '^'), its rank (1 = the first span)
    in its first column."""
    line = [" "] * width
    for rank, (first, last) in enumerate(spans, start=1):
        for k in range(first, min(last, width - 1) + 1):
            line[k] = "▔" if unicode else "^"
        if first < width:
            line[first] = str(rank)
    return "".join(line).rstrip()


def wrap_items(head: str, items: Sequence[str], width: int) -> list[str]:
    """`head` and the items joined by ', ' in lines of at most `width` (continuations
    indented under the first item)."""
    lines, line = [], head
    for k, item in enumerate(items):
        piece = item if k == 0 else ", " + item
        if k and len(line) + len(piece) > width:
            lines.append(line + ",")
            line = " " * len(head) + item
        else:
            line += piece
    return [*lines, line]


def duration(seconds: float) -> str:
    """`fmt.seconds` without the decimals of a whole number of seconds: 60 s, 2.50 s."""
    text = fmt.seconds(seconds)
    return text.replace(".00 s", " s")


def arrivals_chart(series: ArrivalSeries, width: int, *, unicode: bool = True) -> list[str]:
    """Requests per second over the trace, the busiest windows underlined by rank (the
    tallest column can sit in the second: a narrower column than the window sees a sharper
    peak), the peak column and the mean."""
    room = max(10, width - len(INDENT))
    rates, k = group_means(series.requests_per_s, room)
    column_s = k * series.bin_s
    first_s = series.t_s[0]
    span_s = len(series.requests_per_s) * series.bin_s
    peak = max(rates)
    lines = [*wrap(f"Arrivals over time (requests/s; one column = {duration(column_s)}, "
                   f"{duration(span_s)} in all)", width),
             INDENT + sparkline(rates, unicode=unicode)]
    # A "busiest" window no busier than the mean (the last stretch of a short trace) is not
    # marked.
    busy = [w for w in series.busiest if w.rate_rps > series.mean_rate_rps]
    if busy:
        ranked = sorted(busy, key=lambda w: (-w.requests, w.start_s))
        spans = [window_columns(w.start_s, w.end_s, first_s, column_s, len(rates))
                 for w in ranked]
        lines.append(INDENT + ranked_spans(room, spans, unicode=unicode))
        window_s = ranked[0].end_s - ranked[0].start_s
        items = [f"{rank} {fmt.num(w.rate_rps)} req/s from {duration(w.start_s - first_s)}"
                 for rank, w in enumerate(ranked, start=1)]
        lines += [INDENT + line
                  for line in wrap_items(f"busiest {duration(window_s)}: ", items, room)]
    lines += wrap(f"{INDENT}peak {fmt.num(peak)} req/s (per {duration(column_s)} column), "
                  f"mean {fmt.num(series.mean_rate_rps)} req/s", width)
    return [line[:width] for line in lines]


def _bin_of(edges: Sequence[float], value: float) -> int:
    """The histogram bin holding `value` (the last bin holds its right edge)."""
    for k in range(len(edges) - 1):
        if value < edges[k + 1]:
            return k
    return len(edges) - 2


def length_chart(dist: LengthDistribution, width: int, *, unicode: bool = True) -> list[str]:
    """The length histogram as a sparkline with p50 and p99 marked under their bins."""
    room = max(10, width - len(INDENT))
    bins = len(dist.counts)
    per_bin = max(1, min(COLUMNS_PER_BIN, room // max(1, bins)))
    counts: list[float] = [float(c) for c in dist.counts]
    if bins > room:  # narrower than one column per bin: sum neighbouring bins
        means, k = group_means(counts, room)
        counts, per_bin = [m * k for m in means], 1
        edges = [dist.edges[min(i, bins)] for i in range(0, bins + 1, k)]
        if edges[-1] != dist.edges[-1]:
            edges.append(dist.edges[-1])
    else:
        edges = list(dist.edges)
    line = "".join(ch * per_bin for ch in sparkline(counts, unicode=unicode))
    scale = "log" if dist.log_x else "linear"
    lo, hi = fmt.length(dist.edges[0]), fmt.length(dist.edges[-1])
    points = [(_bin_of(edges, dist.p50) * per_bin, f"p50 {fmt.length(dist.p50)}"),
              (_bin_of(edges, dist.p99) * per_bin, f"p99 {fmt.length(dist.p99)}")]
    noun = "request" if dist.total == 1 else "requests"
    tail = f", {fmt.count(dist.overflow)} above" if dist.overflow else ""
    lines = [*wrap(f"{dist.label.capitalize()} ({fmt.count(dist.total)} {noun}; {scale} "
                   f"bins {lo} to {hi}{tail})", width),
             INDENT + line,
             *(INDENT + text for text in marks(room, points, unicode=unicode))]
    return [line[:width] for line in lines]


def capacity_chart(overview: ReuseOverview, width: int, *, unicode: bool = True) -> list[str]:
    """Hit ratio against LRU capacity: one bar per point the prefix-reuse section computed
    (the 50/90/99 % capacities, the knee, full reuse), in capacity order; unlimited when no
    capacity reaches full reuse."""
    seen: dict[int, list[str]] = {}
    by_capacity: dict[int, float] = {}
    points = [*overview.shares, *(p for p in (overview.knee, overview.full_reuse) if p)]
    for p in points:
        label = p.label if p.label in ("knee", "full reuse") else f"{p.label} of reuse"
        seen.setdefault(p.capacity_blocks, []).append(label)
        by_capacity[p.capacity_blocks] = p.hit_ratio
    rows = [(", ".join(seen[cap]), f"{fmt.count(cap)} blocks", by_capacity[cap])
            for cap in sorted(seen)]
    if overview.full_reuse is None:  # else full reuse already reaches the unlimited hits
        rows.append(("unlimited", "", overview.hit_ratio or 0.0))
    name_w = max(len(r[0]) for r in rows)
    cap_w = max(len(r[1]) for r in rows)
    ratio_w = len("100.0 %")
    bar_w = max(5, width - len(INDENT) - name_w - cap_w - ratio_w - 3)
    full, empty = ("█", "░") if unicode else ("#", ".")
    lines = wrap(f"Prefix hit ratio vs LRU capacity (preset {overview.preset}; bar: share of "
                 "prompt tokens hit)", width)
    for name, cap, ratio in rows:
        filled = round(bar_w * max(0.0, min(1.0, ratio)))
        bar = full * filled + empty * (bar_w - filled)
        lines.append(f"{INDENT}{name:<{name_w}} {cap:>{cap_w}} {bar} {fmt.pct(ratio):>{ratio_w}}")
    return [line[:width] for line in lines]


def kv_chart(series: Series, width: int, *, unicode: bool = True) -> list[str]:
    """KV usage (or demand) over time, scaled to the capacity when it is known and larger."""
    room = max(10, width - len(INDENT))
    columns = min(room, len(series.values))
    means, lo, column_s = time_means(series.t_s, series.values, columns)
    drawn = [0.0 if m is None else m for m in means]
    peak = max(series.values)
    top = max(peak, series.capacity or 0.0)
    as_share = series.unit == "share of the pool"

    def value(v: float) -> str:
        return fmt.pct(v) if as_share else fmt.tokens(v)

    capacity = ("" if series.capacity is None
                else f", full height = capacity {value(series.capacity)}"
                if top == series.capacity else "")
    lines = [*wrap(f"{series.label} over time ({series.source}; one column = "
                   f"{duration(column_s)}{capacity})", width),
             INDENT + sparkline(drawn, top=top, unicode=unicode)]
    peak_at = series.t_s[list(series.values).index(peak)] - lo
    mean = sum(series.values) / len(series.values)
    lines += wrap(f"{INDENT}peak {value(peak)} at {duration(peak_at)} from the start, "
                  f"mean {value(mean)}"
                  + ("" if series.capacity is None or as_share
                     else f", capacity {value(series.capacity)}"), width)
    return [line[:width] for line in lines]


def chart_lines(charts: TerminalCharts, width: int, *, unicode: bool = True) -> list[str]:
    """Every chart that has numbers, a blank line between two."""
    groups: list[list[str]] = []
    if charts.kv is not None and charts.kv.values:
        groups.append(kv_chart(charts.kv, width, unicode=unicode))
    if charts.arrivals is not None:
        groups.append(arrivals_chart(charts.arrivals, width, unicode=unicode))
    groups += [length_chart(dist, width, unicode=unicode)
               for dist in (charts.prompt_len, charts.output_len) if dist is not None]
    cap = charts.capacity
    if cap is not None and cap.available and (cap.shares or cap.knee or cap.full_reuse):
        groups.append(capacity_chart(cap, width, unicode=unicode))
    out: list[str] = []
    for group in groups:
        out += ([""] if out else []) + group
    return out
