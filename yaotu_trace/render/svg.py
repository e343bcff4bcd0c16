"""Small SVG charts as strings: lines, histograms, waterfalls and gap scatters.

Pure functions of numbers (no report types, no I/O): each returns one `<svg class="plot">`
element whose data marks carry the class `mark`, so a page can tell that a plot was drawn.
Text is escaped; coordinates are rounded to keep the file small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640
HEIGHT = 300
MARGIN_LEFT = 64
MARGIN_RIGHT = 20
MARGIN_TOP = 16
MARGIN_BOTTOM = 48

PALETTE = ("#2f6db5", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f")
Formatter = Callable[[float], str]


Range = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Band:
    """A shaded stretch of the x axis [start, end) with a label above it; `css` picks its
    colour (`busy`, `burst`)."""

    start: float
    end: float
    label: str
    css: str = ""
    tip: str = ""


@dataclass(frozen=True, slots=True)
class Frame:
    """Plot area and the data → pixel maps of one chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    log_x: bool = False
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def left(self) -> float:
        """Left edge of the plot area (px)."""
        return MARGIN_LEFT

    @property
    def right(self) -> float:
        """Right edge of the plot area (px)."""
        return self.width - MARGIN_RIGHT

    @property
    def top(self) -> float:
        """Top edge of the plot area (px)."""
        return MARGIN_TOP

    @property
    def bottom(self) -> float:
        """Bottom edge of the plot area (px)."""
        return self.height - MARGIN_BOTTOM

    def x(self, value: float) -> float:
        """Data x to px."""
        if self.log_x:
            lo, hi, v = math.log10(self.x0), math.log10(self.x1), math.log10(max(value, self.x0))
        else:
            lo, hi, v = self.x0, self.x1, value
        span = hi - lo or 1.0
        return self.left + (v - lo) / span * (self.right - self.left)

    def y(self, value: float) -> float:
        """Data y to px (up is larger)."""
        span = self.y1 - self.y0 or 1.0
        return self.bottom - (value - self.y0) / span * (self.bottom - self.top)


def _r(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 × 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten within [lo, hi]; with 1, 2 and 5 × 10^k when that gives under three, and
    every other power when there are more than eight, so a log axis always reads."""
    if lo <= 0 or hi <= lo:
        return [lo]
    first, last = math.floor(math.log10(lo)), math.floor(math.log10(hi))
    powers = [10.0**k for k in range(first, last + 1) if lo <= 10.0**k <= hi]
    if len(powers) < 3:
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in (1, 2, 5)
                 if lo <= m * 10.0**k <= hi]
        return ticks if len(ticks) >= 2 else nice_ticks(lo, hi, 3)
    while len(powers) > 8:
        powers = powers[::2]
    return powers


def short(value: float) -> str:
    """Axis labels: 1.2k, 3.4M, 0.05."""
    mag = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if mag >= scale:
            return f"{value / scale:.3g}{unit}"
    if mag == 0:
        return "0"
    if mag < 0.01:
        return f"{value:.1e}"
    return f"{value:.3g}"


def percent(value: float) -> str:
    """A 0–1 ratio as an axis label."""
    return f"{100 * value:.0f}%"


def seconds(value: float) -> str:
    """Seconds as an axis label with a readable unit."""
    mag = abs(value)
    if mag == 0:
        return "0"
    if mag < 1:
        return f"{value * 1e3:.3g} ms"
    if mag < 600:
        return f"{value:.3g} s"
    if mag < 36000:  # ticks of 2e+03 s read as minutes
        return f"{value / 60:.3g} min"
    return f"{value / 3600:.3g} h"


@dataclass(frozen=True, slots=True, kw_only=True)
class Axis:
    """One axis of a chart: its label, how its ticks read, a log scale and its range.

    `lo` and `hi` pin one end of the range the data gives (a line chart's value axis: 0 to 1
    for a share; an unpinned top gets 5 % headroom); `fixed` forces the whole range (two charts
    on shared axes). Each chart says which of these it reads.
    """

    label: str = ""
    fmt: Formatter = short
    log: bool = False
    lo: float | None = None
    hi: float | None = None
    fixed: Range | None = None


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a line chart: its name (tooltip and legend), its points, and whether it
    is drawn in steps (a CDF, a binned series) rather than straight segments."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    step: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Marks:
    """What a line chart draws besides its lines: labelled vertical and horizontal lines (x or
    y value, label), labelled points (x, y, tooltip) and shaded x bands."""

    vlines: Sequence[tuple[float, str]] = ()
    hlines: Sequence[tuple[float, str]] = ()
    points: Sequence[tuple[float, float, str]] = ()
    bands: Sequence[Band] = ()


NO_MARKS = Marks()
# A histogram's count axis, as most of them label it.
COUNT_AXIS = Axis(label="requests")


def _open(name: str, title: str, frame: Frame) -> list[str]:
    return [
        f'<svg class="plot" data-plot="{escape(name)}" role="img" '
        f'viewBox="0 0 {frame.width} {frame.height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]


def _axes(frame: Frame, x_ticks: Sequence[float], y_ticks: Sequence[float], x_fmt: Formatter,
          y_fmt: Formatter, x_label: str, y_label: str) -> list[str]:
    out = ['<g class="axes">']
    for t in y_ticks:
        y = frame.y(t)
        out.append(f'<line class="grid" x1="{_r(frame.left)}" x2="{_r(frame.right)}" '
                   f'y1="{_r(y)}" y2="{_r(y)}"/>')
        out.append(f'<text class="tick" x="{_r(frame.left - 6)}" y="{_r(y + 4)}" '
                   f'text-anchor="end">{escape(y_fmt(t))}</text>')
    for t in x_ticks:
        x = frame.x(t)
        out.append(f'<line class="tickmark" x1="{_r(x)}" x2="{_r(x)}" y1="{_r(frame.bottom)}" '
                   f'y2="{_r(frame.bottom + 4)}"/>')
        out.append(f'<text class="tick" x="{_r(x)}" y="{_r(frame.bottom + 17)}" '
                   f'text-anchor="middle">{escape(x_fmt(t))}</text>')
    out.append(f'<line class="axis" x1="{_r(frame.left)}" x2="{_r(frame.right)}" '
               f'y1="{_r(frame.bottom)}" y2="{_r(frame.bottom)}"/>')
    out.append(f'<line class="axis" x1="{_r(frame.left)}" x2="{_r(frame.left)}" '
               f'y1="{_r(frame.top)}" y2="{_r(frame.bottom)}"/>')
    mid_x = (frame.left + frame.right) / 2
    out.append(f'<text class="label" x="{_r(mid_x)}" y="{_r(frame.height - 8)}" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    mid_y = (frame.top + frame.bottom) / 2
    out.append(f'<text class="label" x="14" y="{_r(mid_y)}" text-anchor="middle" '
               f'transform="rotate(-90 14 {_r(mid_y)})">{escape(y_label)}</text>')
    out.append("</g>")
    return out


def _vline(frame: Frame, x_value: float, label: str, css: str = "marker",
           label_dy: float = 12) -> list[str]:
    x = frame.x(x_value)
    if not (frame.left - 0.5 <= x <= frame.right + 0.5):
        return []
    anchor = "end" if x > (frame.left + frame.right) / 2 else "start"
    dx = -4 if anchor == "end" else 4
    return [f'<g class="{css}"><line x1="{_r(x)}" x2="{_r(x)}" y1="{_r(frame.top)}" '
            f'y2="{_r(frame.bottom)}"/><text x="{_r(x + dx)}" y="{_r(frame.top + label_dy)}" '
            f'text-anchor="{anchor}">{escape(label)}</text></g>']


def _bands(frame: Frame, bands: Sequence[Band]) -> list[str]:
    """Shaded x stretches, at least 2 px wide; labels in two rows, a label left out when it
    would overlap one already placed (its tooltip still names it)."""
    out: list[str] = []
    placed: list[list[tuple[float, float]]] = [[], []]
    for band in bands:
        xa = max(frame.x(band.start), frame.left)
        xb = min(frame.x(band.end), frame.right)
        if xb < frame.left or xa > frame.right:
            continue
        width = max(xb - xa, 2.0)
        tip = band.tip or band.label
        out.append(f'<rect class="mark band {escape(band.css)}" x="{_r(xa)}" y="{_r(frame.top)}" '
                   f'width="{_r(width)}" height="{_r(frame.bottom - frame.top)}">'
                   f"<title>{escape(tip)}</title></rect>")
        if not band.label:
            continue
        half = 3.2 * len(band.label)
        cx = min(max(xa + width / 2, frame.left + half), frame.right - half)
        span = (cx - half - 4, cx + half + 4)
        for row, taken in enumerate(placed):
            if all(span[1] <= a or span[0] >= b for a, b in taken):
                taken.append(span)
                out.append(f'<text class="band-label {escape(band.css)}" x="{_r(cx)}" '
                           f'y="{_r(frame.top + 11 + 13 * row)}" text-anchor="middle">'
                           f"{escape(band.label)}</text>")
                break
    return out


def bar_chart(
    name: str,
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    value: Axis,
    category_label: str = "",
    horizontal: bool = False,
) -> str:
    """One bar per category, its value written at its end. Horizontal bars suit long names
    (tenants); vertical ones short numeric categories (session depth). The `value` axis reads
    its label, format and `fixed` range (else from 0 to the tallest bar and 10 % more)."""
    value_label, value_fmt = value.label, value.fmt
    n = max(len(labels), 1)
    top = max(max(values, default=0.0), 0.0) or 1.0
    v0, v1 = value.fixed or (0.0, top * 1.1)
    out: list[str]
    if horizontal:
        longest = max((len(lb) for lb in labels), default=4)
        left = min(max(6.5 * longest + 14, MARGIN_LEFT), 240)
        row = 22
        height = int(MARGIN_TOP + row * n + MARGIN_BOTTOM)
        frame = Frame(v0, v1, 0.0, float(n), height=height)
        out = _open(name, title, frame)
        plot_left = left
        span = frame.right - plot_left
        def xv(v: float) -> float:
            return plot_left + (v - v0) / ((v1 - v0) or 1.0) * span
        out.append('<g class="axes">')
        for t in nice_ticks(v0, v1):
            out.append(f'<line class="grid" x1="{_r(xv(t))}" x2="{_r(xv(t))}" '
                       f'y1="{_r(frame.top)}" y2="{_r(frame.bottom)}"/>')
            out.append(f'<text class="tick" x="{_r(xv(t))}" y="{_r(frame.bottom + 17)}" '
                       f'text-anchor="middle">{escape(value_fmt(t))}</text>')
        out.append(f'<line class="axis" x1="{_r(plot_left)}" x2="{_r(plot_left)}" '
                   f'y1="{_r(frame.top)}" y2="{_r(frame.bottom)}"/>')
        out.append(f'<text class="label" x="{_r((plot_left + frame.right) / 2)}" '
                   f'y="{_r(frame.height - 8)}" text-anchor="middle">{escape(value_label)}'
                   "</text></g>")
        for i, (label, v) in enumerate(zip(labels, values, strict=True)):
            y = frame.top + i * row + 3
            w = max(xv(v) - plot_left, 1.0)
            out.append(f'<text class="tick" x="{_r(plot_left - 6)}" y="{_r(y + 12)}" '
                       f'text-anchor="end">{escape(label)}</text>')
            out.append(f'<rect class="mark bar" x="{_r(plot_left)}" y="{_r(y)}" '
                       f'width="{_r(w)}" height="{row - 6}"><title>{escape(label)}: '
                       f"{escape(value_fmt(v))}</title></rect>")
            out.append(f'<text class="value" x="{_r(plot_left + w + 4)}" y="{_r(y + 12)}">'
                       f"{escape(value_fmt(v))}</text>")
    else:
        frame = Frame(0.0, float(n), v0, v1)
        out = _open(name, title, frame)
        slot = (frame.right - frame.left) / n
        every = max(1, math.ceil(n * 24 / (frame.right - frame.left)))
        out += _axes(frame, [], nice_ticks(v0, v1), short, value_fmt, category_label,
                     value_label)
        for i, (label, v) in enumerate(zip(labels, values, strict=True)):
            x = frame.left + i * slot + slot * 0.12
            y = frame.y(max(v, v0))
            out.append(f'<rect class="mark bar" x="{_r(x)}" y="{_r(y)}" '
                       f'width="{_r(slot * 0.76)}" height="{_r(max(frame.bottom - y, 0.5))}">'
                       f"<title>{escape(label)}: {escape(value_fmt(v))}</title></rect>")
            if i % every == 0:
                out.append(f'<text class="tick" x="{_r(x + slot * 0.38)}" '
                           f'y="{_r(frame.bottom + 15)}" text-anchor="middle">{escape(label)}'
                           "</text>")
    out.append("</svg>")
    return "\n".join(out)


def _legend(frame: Frame, names: Sequence[str], at: str = "top") -> list[str]:
    """Colour keys at the plot's top right, or its bottom right (`at="bottom"`: where a CDF,
    risen by then, leaves room)."""
    out = []
    first = frame.top + 8 if at == "top" else frame.bottom - 8 - 16 * len(names)
    for i, name in enumerate(names):
        y = first + 8 + 16 * i if at != "top" else first + 16 * i
        x = frame.right - 170
        color = PALETTE[i % len(PALETTE)]
        out.append(f'<g class="legend"><rect x="{_r(x)}" y="{_r(y - 8)}" width="12" height="10" '
                   f'fill="{color}"/><text x="{_r(x + 18)}" y="{_r(y + 1)}">{escape(name)}'
                   "</text></g>")
    return out


def line_chart(
    name: str,
    title: str,
    lines: Sequence[Line],
    *,
    x: Axis,
    y: Axis,
    marks: Marks = NO_MARKS,
    legend_at: str = "top",
) -> str:
    """One or more lines over a shared x axis, with the `marks` over them and a legend (at the
    plot's "top" or "bottom" right) when there are two lines or more. The x axis reads its
    label, format, log scale and `fixed` range; the y axis its label, format, `lo`, `hi` and
    `fixed` range."""
    log_x, x_fmt, y_fmt, y_min, y_max = x.log, x.fmt, y.fmt, y.lo, y.hi
    vlines, hlines, points, bands = marks.vlines, marks.hlines, marks.points, marks.bands
    xs = [v for line in lines for v in line.xs if math.isfinite(v) and (not log_x or v > 0)]
    ys = [v for line in lines for v in line.ys if math.isfinite(v)]
    xs += [v for v, _ in vlines if math.isfinite(v) and (not log_x or v > 0)]
    ys += [v for v, _ in hlines if math.isfinite(v)]
    if not xs or not ys:
        xs, ys = [0.0, 1.0], [0.0, 1.0]
    x0, x1 = x.fixed or (min(xs), max(xs))
    if x1 <= x0:
        x1 = x0 * 10 if log_x else x0 + 1
    lo = min(ys) if y_min is None else y_min
    hi = max(ys) if y_max is None else y_max
    if hi <= lo:
        hi = lo + 1
    hi += (hi - lo) * 0.05 if y_max is None else 0
    if y.fixed is not None:
        lo, hi = y.fixed
    frame = Frame(x0, x1, lo, hi, log_x=log_x)
    x_ticks = log_ticks(x0, x1) if log_x else nice_ticks(x0, x1)
    out = _open(name, title, frame)
    out += _axes(frame, x_ticks, nice_ticks(lo, hi), x_fmt, y_fmt, x.label, y.label)
    out += _bands(frame, bands)
    for value, _ in hlines:
        py = frame.y(value)
        out.append(f'<g class="marker"><line x1="{_r(frame.left)}" x2="{_r(frame.right)}" '
                   f'y1="{_r(py)}" y2="{_r(py)}"/></g>')
    for i, line in enumerate(lines):
        pts = [(frame.x(vx), frame.y(vy)) for vx, vy in zip(line.xs, line.ys, strict=True)
               if math.isfinite(vx) and math.isfinite(vy) and (not log_x or vx > 0)]
        if not pts:
            continue
        d = f"M{_r(pts[0][0])},{_r(pts[0][1])}"
        for qx, qy in pts[1:]:
            d += f"H{_r(qx)}V{_r(qy)}" if line.step else f"L{_r(qx)},{_r(qy)}"
        color = PALETTE[i % len(PALETTE)]
        out.append(f'<path class="mark line" d="{d}" stroke="{color}"><title>'
                   f"{escape(line.label)}</title></path>")
    for value, label in hlines:  # over the lines, haloed, so that a busy series cannot hide them
        out.append(f'<g class="marker"><text x="{_r(frame.left + 4)}" '
                   f'y="{_r(frame.y(value) - 4)}">{escape(label)}</text></g>')
    for value, label in vlines:
        out += _vline(frame, value, label, label_dy=30)
    for px, py, label in points:
        if math.isfinite(px) and math.isfinite(py) and (not log_x or px > 0):
            out.append(f'<circle class="mark point" cx="{_r(frame.x(px))}" '
                       f'cy="{_r(frame.y(py))}" r="4"><title>{escape(label)}</title></circle>')
    if len(lines) > 1:
        out += _legend(frame, [line.label for line in lines], legend_at)
    out.append("</svg>")
    return "\n".join(out)


def histogram_axes(edges: Sequence[float], counts: Sequence[int],
                   log_x: bool = False) -> tuple[Range, Range]:
    """The axes a histogram takes on its own: its edges (from the first above 0 on a log axis)
    and its tallest bar with 5 % headroom."""
    x0 = float(edges[0])
    if log_x and x0 <= 0:
        x0 = min((e for e in edges if e > 0), default=1.0)
    return (x0, float(edges[-1])), (0.0, max(max(counts, default=0), 1) * 1.05)


def histogram_chart(
    name: str,
    title: str,
    edges: Sequence[float],
    counts: Sequence[int],
    *,
    x: Axis,
    y: Axis = COUNT_AXIS,
    vlines: Sequence[tuple[float, str]] = (),
) -> str:
    """Bars of a histogram (log-spaced bins on a log x axis when `x.log`), with labelled
    vertical lines; each bar's tooltip gives its range and count. Each axis reads its label,
    format and `fixed` range (else its own, `histogram_axes`); x also its log scale."""
    log_x, x_fmt = x.log, x.fmt
    own_x, own_y = histogram_axes(edges, counts, log_x)
    x0, x1 = x.fixed or own_x
    if log_x and x0 <= 0:
        x0 = own_x[0]
    if x1 <= x0:
        x1 = x0 * 10 if log_x else x0 + 1
    y0, y1 = y.fixed or own_y
    frame = Frame(x0, x1, y0, y1, log_x=log_x)
    out = _open(name, title, frame)
    x_ticks = log_ticks(x0, x1) if log_x else nice_ticks(x0, x1)
    out += _axes(frame, x_ticks, nice_ticks(y0, y1), x_fmt, y.fmt, x.label, y.label)
    for lo_e, hi_e, c in zip(edges, edges[1:], counts, strict=False):
        # at least 2 px: a bin narrow on a shared axis (one value in a run) stays visible
        px, w = frame.x(lo_e), max(frame.x(hi_e) - frame.x(lo_e) - 1, 2.0)
        py = frame.y(c)
        out.append(f'<rect class="mark bar" x="{_r(px)}" y="{_r(py)}" width="{_r(w)}" '
                   f'height="{_r(frame.bottom - py)}"><title>{escape(x_fmt(lo_e))}–'
                   f"{escape(x_fmt(hi_e))}: {c:,}</title></rect>")
    for i, (value, label) in enumerate(vlines):  # staggered: close lines keep both labels
        out += _vline(frame, value, label, label_dy=12 + 13 * i)
    out.append("</svg>")
    return "\n".join(out)


def _wrap(label: str, width_chars: int) -> list[str]:
    """Split a label into at most three lines of about `width_chars` characters."""
    words = label.split()
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= width_chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    if len(lines) > 3:
        lines = [*lines[:2], " ".join(lines[2:])]
    return [ln if len(ln) <= width_chars else ln[: width_chars - 1] + "…" for ln in lines]


def _precise(digits: int) -> Formatter:
    """`short` with enough significant digits to tell close ticks apart."""
    def show(value: float) -> str:
        mag = abs(value)
        for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if mag >= scale:
                return f"{value / scale:.{max(digits, 3)}g}{unit}"
        return f"{value:.{max(digits, 3)}g}"

    return show


def waterfall_range(start_tokens: float, total_loss: float) -> Range:
    """The y axis a waterfall takes on its own: from 0, or from just under what is achieved
    when the losses are small next to the total (so that each stays visible)."""
    floor = 0.0
    if start_tokens > 0 and 0 < total_loss < 0.3 * start_tokens:
        floor = max(0.0, start_tokens - total_loss
                    - max(total_loss, start_tokens * 0.002) * 0.8)
    return floor, start_tokens + (start_tokens - floor) * 0.1 or 1.0


def waterfall_chart(
    name: str,
    title: str,
    start: tuple[str, float],
    losses: Sequence[tuple[str, float]],
    *,
    y_label: str = "tokens",
    y_fmt: Formatter = short,
    y_range: Range | None = None,
) -> str:
    """From the ideal down to what is achieved: one floating bar per loss, totals solid.

    When the losses are small next to the total, the y axis starts above zero (said on the
    chart) so that each loss stays visible. With no loss at all the axis starts at zero and
    the chart says so: a zoomed axis of empty bars would look like a broken chart.
    `y_range` forces the axis (two runs' waterfalls on one scale).
    """
    labels = [start[0], *(lbl for lbl, _ in losses), "achieved"]
    total_loss = sum(max(v, 0.0) for _, v in losses)
    floor, top = y_range or waterfall_range(start[1], total_loss)
    frame = Frame(0, len(labels), floor, top, height=HEIGHT + 14)
    out = _open(name, title, frame)
    ticks = nice_ticks(floor, top)
    if floor > 0:
        step = ticks[1] - ticks[0] if len(ticks) > 1 else top - floor
        digits = max(0, -math.floor(math.log10(step)) + math.floor(math.log10(top)) + 1)
        y_fmt = _precise(digits)
    note = f"(axis starts at {y_fmt(floor)})" if floor > 0 else ""
    if losses and total_loss == 0:
        note = "no step loses any of it"
    out += _axes(frame, [], ticks, short, y_fmt, "", y_label)
    if note:
        out.append(f'<text class="tick" x="{_r(frame.right)}" y="{_r(frame.top + 4)}" '
                   f'text-anchor="end">{escape(note)}</text>')
    slot = (frame.right - frame.left) / len(labels)
    level = start[1]
    bars: list[tuple[str, float, float, str]] = [(start[0], floor, level, "total")]
    for label, loss in losses:
        bars.append((label, level - loss, level, "loss"))
        level -= loss
    bars.append(("achieved", floor, level, "total"))
    chars = max(int(slot / 6.8), 6)
    for i, (label, lo, hi, kind) in enumerate(bars):
        x = frame.left + i * slot + slot * 0.15
        w = slot * 0.7
        y_top, y_bot = frame.y(hi), frame.y(max(lo, floor))
        h = max(y_bot - y_top, 1.5)
        value = (hi - lo) if kind == "loss" else hi
        text = y_fmt(value) if kind == "total" or value == 0 else f"−{y_fmt(value)}"
        out.append(f'<rect class="mark bar {kind}" x="{_r(x)}" y="{_r(y_top)}" width="{_r(w)}" '
                   f'height="{_r(h)}"><title>{escape(label)}: {escape(text)}</title></rect>')
        out.append(f'<text class="value" x="{_r(x + w / 2)}" y="{_r(y_top - 4)}" '
                   f'text-anchor="middle">{escape(text)}</text>')
        cx = x + w / 2
        for k, line in enumerate(_wrap(label, chars)):
            out.append(f'<text class="tick" x="{_r(cx)}" y="{_r(frame.bottom + 15 + 13 * k)}" '
                       f'text-anchor="middle">{escape(line)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def gap_chart(
    name: str,
    title: str,
    token_t_s: Sequence[float],
    gap_s: Sequence[float],
    spans: Sequence[tuple[float, float, int]],
    *,
    median_s: float | None = None,
    y_max: float | None = None,
) -> str:
    """Inter-token gaps over time (dots) with prefill work shaded behind them; `y_max` forces
    the gap axis (two runs' gaps on one scale, each over its own stretch of time)."""
    if not token_t_s:
        token_t_s, gap_s = [0.0], [0.0]
    x0 = min(min(token_t_s), min((s for s, _, _ in spans), default=token_t_s[0]))
    x1 = max(max(token_t_s), max((e for _, e, _ in spans), default=token_t_s[0]))
    if x1 <= x0:
        x1 = x0 + 1
    hi = y_max or max(gap_s) * 1.08 or 1.0
    frame = Frame(x0, x1, 0.0, hi)
    out = _open(name, title, frame)
    origin = x0
    out += _axes(frame, nice_ticks(x0, x1), nice_ticks(0, hi),
                 lambda v: seconds(v - origin) if v != origin else "0", seconds,
                 f"time since {short(origin)} s of the trace clock", "inter-token gap")
    for s, e, tokens in spans:
        xa, xb = frame.x(s), frame.x(e)
        tip = f"prefill {tokens:,} tokens" if tokens else "a request's first token (prefill)"
        out.append(f'<rect class="prefill" x="{_r(xa)}" y="{_r(frame.top)}" '
                   f'width="{_r(max(xb - xa, 1.0))}" height="{_r(frame.bottom - frame.top)}">'
                   f"<title>{escape(tip)}</title></rect>")
    if median_s is not None:
        y = frame.y(median_s)
        out.append(f'<g class="marker"><line x1="{_r(frame.left)}" x2="{_r(frame.right)}" '
                   f'y1="{_r(y)}" y2="{_r(y)}"/><text x="{_r(frame.right - 4)}" y="{_r(y - 4)}" '
                   f'text-anchor="end">median {escape(seconds(median_s))}</text></g>')
    dots = [f'<circle cx="{_r(frame.x(t))}" cy="{_r(frame.y(g))}" r="1.8"/>'
            for t, g in zip(token_t_s, gap_s, strict=True)]
    out.append('<g class="mark dots">' + "".join(dots) + "</g>")
    out.append("</svg>")
    return "\n".join(out)
