"""The report page's workload pictures, drawn from the `workload_figures` section's JSON.

Every trace has some of these (arrivals and lengths at least), so a trace with no timing still
gets a drawn page. Each builder is a function of (that section as builtins, `Bounds`): with
bounds None a chart takes its axes from its own data; given bounds, it draws on those axes.
Each has an extent function next to it (the axes its own data needs), and `PICTURES` pairs
them, so a page of two runs puts the same picture of both on shared axes
(`render.shared_axes`). A picture the trace cannot
support is a `NotDrawn` (gathered into the page's one "Not drawn" line); one with nothing to
show says so in words (`said`) instead of drawing an empty chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any, NamedTuple

from yaotu_trace.render import fmt, svg
from yaotu_trace.render.html_parts import figure, unavailable
from yaotu_trace.render.shared_axes import (
    Bounds,
    Picture,
    drawn_pair,
    headroom,
    histogram_bounds,
    x_of,
    y_of,
)

Section = dict[str, Any]
# Bursts labelled with their rate on the arrivals chart (the most requests first); every burst
# is shaded and names its rate in its tooltip.
LABELLED_BURSTS = 3
# Points of the Poisson CDF drawn next to the interarrival CDF.
POISSON_POINTS = 80


# Time units of a time axis, by the span they suit (the largest that the span reaches twice).
_TIME_UNITS = ((2 * 86400.0, 86400.0, "days"), (2 * 3600.0, 3600.0, "h"),
               (120.0, 60.0, "min"), (0.0, 1.0, "s"))


def time_unit(span_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) for a time axis spanning `span_s`."""
    return next((scale, name) for least, scale, name in _TIME_UNITS if span_s >= least)


class TimeAxis(NamedTuple):
    """The x axis of a binned series: its first bin start and span (s), the unit and its
    seconds, and each bin start in that unit from the first."""

    t0_s: float
    span_s: float
    scale_s: float
    unit: str
    xs: list[float]


def time_axis(series: Section, bounds: Bounds | None = None) -> TimeAxis:
    """The time axis of a series with `t_s` and `bin_s`, in the unit its span reads best in
    (the shared span's, when `bounds` give one: both runs' axes then read in one unit)."""
    t0 = series["t_s"][0]
    span = _span_s(series)
    shared = span if bounds is None or bounds.x is None else bounds.x[1] - bounds.x[0]
    scale, unit = time_unit(shared)
    return TimeAxis(t0, span, scale, unit, [(t - t0) / scale for t in series["t_s"]])


def _span_s(series: Section) -> float:
    return float(series["t_s"][-1] - series["t_s"][0] + series["bin_s"])


def said(caption: str, words: str) -> str:
    """A figure whose data leaves nothing to draw, saying so in place of the chart."""
    return (f'<figure class="said"><figcaption>{escape(caption)}</figcaption>'
            f'<p class="note said">{escape(words)}</p></figure>')


def _missing(wf: Section, key: str, caption: str) -> str:
    why = (wf.get("unavailable") or {}).get(key, "not computed")
    return unavailable(caption, str(why))


def _scaled(bounds: Bounds | None, scale: float) -> svg.Range | None:
    if bounds is None or bounds.x is None:
        return None
    return bounds.x[0] / scale, bounds.x[1] / scale


def arrivals_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """Requests per second over time, the busiest windows and the bursts shaded."""
    caption = "Requests per second over time"
    a = wf.get("arrivals")
    if not isinstance(a, dict):
        return _missing(wf, "arrivals", caption)
    t0, span, scale, unit, xs = time_axis(a, bounds)
    # A window as long as half the trace marks nothing: the whole plot would be shaded.
    busiest = [w for w in a["busiest"] if w["end_s"] - w["start_s"] < span / 2]
    largest = sorted(a["bursts"], key=lambda b: -b["requests"])[:LABELLED_BURSTS]
    bands = [svg.Band((b["start_s"] - t0) / scale, (b["end_s"] - t0) / scale,
                      f"burst {svg.short(b['rate_rps'])}/s" if b in largest else "",
                      "burst",
                      f"burst: {b['requests']:,} requests at {fmt.num(b['rate_rps'])} req/s")
             for b in a["bursts"]]
    bands += [svg.Band((w["start_s"] - t0) / scale, (w["end_s"] - t0) / scale,
                       f"busiest {svg.short(w['rate_rps'])}/s", "busy",
                       f"busiest window: {w['requests']:,} requests, "
                       f"{fmt.num(w['rate_rps'])} req/s")
              for w in busiest]
    chart = svg.line_chart(
        "arrivals", caption, [svg.Line("requests/s", xs, a["requests_per_s"])],
        x=svg.Axis(label=f"time since the first arrival ({unit})", fixed=_scaled(bounds, scale)),
        y=svg.Axis(label="requests per second", lo=0.0, fixed=y_of(bounds)),
        marks=svg.Marks(hlines=[(a["mean_rate_rps"], f"mean {fmt.num(a['mean_rate_rps'])}/s")],
                        bands=bands))
    window = fmt.seconds(max(60.0, a["bin_s"]))
    windows = (f"the {len(busiest)} busiest {window} windows (amber)" if busiest else
               f"no busiest {window} window (the trace spans {fmt.seconds(span)})")
    note = (f"Bins of {fmt.seconds(a['bin_s'])}; peak {fmt.num(a['peak_rate_rps'])} req/s, "
            f"mean {fmt.num(a['mean_rate_rps'])} req/s. Shaded: {windows} and "
            f"{len(a['bursts'])} bursts (red: bins above both twice the mean and the Poisson "
            "band).")
    return figure(f"{caption} ({fmt.seconds(a['bin_s'])} bins)", chart, note)


def _arrivals_extent(wf: Section) -> Bounds | None:
    a = wf.get("arrivals")
    if not isinstance(a, dict):
        return None
    top = max([*a["requests_per_s"], a["mean_rate_rps"]])
    return Bounds(x=(0.0, _span_s(a)), y=(0.0, headroom(top)))


# The two token series of the arrivals, drawn apart: output tokens are often a fiftieth of the
# prompt tokens (Azure code: 71 against 5,250 per second) and would lie flat on a shared axis.
_TOKEN_SERIES = {
    "prompt": ("prompt_tokens_per_s", "Prompt tokens of the requests arriving in each bin, per "
               "second of the bin (the prefill work they bring)"),
    "output": ("output_tokens_per_s", "Output tokens of the requests arriving in each bin, per "
               "second of the bin (the decode work they bring, generated later)"),
}


def tokens_figure(wf: Section, kind: str, bounds: Bounds | None = None) -> str:
    """Prompt (`kind` "prompt") or output tokens per second of the arrivals over time."""
    key, what = _TOKEN_SERIES[kind]
    caption = f"{kind.title()} tokens per second over time"
    a = wf.get("arrivals")
    if not isinstance(a, dict):
        return _missing(wf, "arrivals", caption)
    _, _, scale, unit, xs = time_axis(a, bounds)
    values = a[key]
    mean = sum(values) / len(values)
    chart = svg.line_chart(
        f"{kind}_tokens", caption, [svg.Line(f"{kind} tokens/s", xs, values)],
        x=svg.Axis(label=f"time since the first arrival ({unit})", fixed=_scaled(bounds, scale)),
        y=svg.Axis(label="tokens per second", lo=0.0, fixed=y_of(bounds)),
        marks=svg.Marks(hlines=[(mean, f"mean {fmt.num(mean)}/s")]))
    return figure(f"{caption} ({fmt.seconds(a['bin_s'])} bins)", chart,
                  f"{what}; mean {fmt.num(mean)}, peak {fmt.num(max(values))} tokens/s.")


def _tokens_extent(kind: str) -> Callable[[Section], Bounds | None]:
    key = _TOKEN_SERIES[kind][0]

    def extent(wf: Section) -> Bounds | None:
        a = wf.get("arrivals")
        if not isinstance(a, dict):
            return None
        return Bounds(x=(0.0, _span_s(a)), y=(0.0, headroom(max(a[key]))))
    return extent


def _tokens(kind: str) -> Callable[[Section, Bounds | None], str]:
    def draw(wf: Section, bounds: Bounds | None) -> str:
        return tokens_figure(wf, kind, bounds)
    return draw


def _interarrival_range(c: Section) -> svg.Range:
    """The gaps' own range widened to Poisson's (mean/100 to 10 × mean)."""
    mean = c["mean_gap_s"]
    lo = min(c["gap_s"][0], mean / 100) if mean > 0 else c["gap_s"][0]
    return lo, max(c["gap_s"][-1] * 1.5, 10 * mean)


def _interarrival_extent(wf: Section) -> Bounds | None:
    c = wf.get("interarrival")
    if not isinstance(c, dict):
        return None
    lo, hi = _interarrival_range(c)
    return Bounds(x=(_first_x(c, lo), hi), log_x=True)


def _first_x(c: Section, lo: float) -> float:
    """Where the trace's line starts: just left of its shortest gap when that is the axis's
    start, so its first step is drawn."""
    return c["gap_s"][0] * 0.999 if lo >= c["gap_s"][0] else lo


def interarrival_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """The interarrival CDF against Poisson at the same mean, on a log x axis."""
    caption = "Interarrival times against Poisson"
    c = wf.get("interarrival")
    if not isinstance(c, dict):
        return _missing(wf, "interarrival", caption)
    # The axis spans Poisson's own range too (from mean/100 to 10 × mean), so a trace whose
    # gaps sit in a narrow band (batched arrivals) is drawn against the curve it departs from;
    # Poisson's CDF there is its definition, 1 − exp(−gap / mean gap).
    mean = c["mean_gap_s"]
    lo, hi = _interarrival_range(c) if bounds is None or bounds.x is None else bounds.x
    xs = [_first_x(c, lo), *c["gap_s"], hi]
    trace_share = [c["zero_gap_share"], *c["share"], 1.0]
    grid = [lo * (hi / lo) ** (k / POISSON_POINTS) for k in range(POISSON_POINTS + 1)]
    poisson = [1.0 - math.exp(-x / mean) if mean > 0 else 1.0 for x in grid]
    chart = svg.line_chart(
        "interarrival", caption, [svg.Line("trace", xs, trace_share, step=True),
                                  svg.Line("Poisson, same mean", grid, poisson)],
        x=svg.Axis(label="gap between arrivals (log scale)", fmt=svg.seconds, log=True,
                   fixed=x_of(bounds)),
        y=svg.Axis(label="share of gaps ≤ x", fmt=svg.percent, lo=0.0, hi=1.0),
        legend_at="bottom")
    cv = "n/a" if c.get("cv") is None else fmt.num(c["cv"])
    note = (f"Mean gap {fmt.seconds(c['mean_gap_s'])}; CV {cv} (Poisson = 1); KS distance "
            f"{fmt.num(c['ks_distance'])}; {fmt.pct(c['zero_gap_share'])} of the gaps are zero "
            "(simultaneous arrivals, the trace's line starting above 0).")
    return figure(caption, chart, note)


def length_figure(wf: Section, key: str, bounds: Bounds | None = None) -> str:
    """The histogram of one length (log bins when `log_x`), p50 and p99 marked."""
    name = "Prompt" if key == "prompt_len" else "Output"
    caption = f"{name} length per request"
    d = wf.get(key)
    if not isinstance(d, dict):
        return _missing(wf, key, caption)
    return _distribution_chart(d, DistributionFigure(
        name=key, caption=caption, x_label="tokens per request", show=fmt.tokens,
        what=f"{d['total']:,} successful requests"), bounds)


def _length_extent(key: str) -> Callable[[Section], Bounds | None]:
    def extent(wf: Section) -> Bounds | None:
        d = wf.get(key)
        return _distribution_extent(d) if isinstance(d, dict) else None
    return extent


def _distribution_extent(d: Section) -> Bounds:
    return histogram_bounds(d["edges"], d["counts"], d["log_x"])


@dataclass(frozen=True, slots=True, kw_only=True)
class DistributionFigure:
    """How one distribution (a `LengthDistribution` as builtins) is drawn: the plot's name and
    caption, what its x axis measures and how its ticks read, how a value reads in the marker
    labels and the note (`show`), and what the note says was counted (`what`)."""

    name: str
    caption: str
    x_label: str
    show: Callable[[Any], str]
    what: str
    x_fmt: svg.Formatter = svg.short


def _distribution_chart(d: Section, spec: DistributionFigure, bounds: Bounds | None) -> str:
    show = spec.show
    vlines = [(d[p], f"{p} {show(d[p])}") for p in ("p50", "p99")
              if d.get(p) is not None and (not d["log_x"] or d[p] > 0)]
    chart = svg.histogram_chart(
        spec.name, spec.caption, d["edges"], d["counts"],
        x=svg.Axis(label=spec.x_label + (" (log scale)" if d["log_x"] else ""), fmt=spec.x_fmt,
                   log=d["log_x"], fixed=x_of(bounds)),
        y=svg.Axis(label="count", fixed=y_of(bounds)), vlines=vlines)
    note = (f"{spec.what}; p50 {show(d['p50'])}, p90 {show(d['p90'])}, p99 {show(d['p99'])}."
            + (" Log-spaced bins: the values span decades." if d["log_x"] else ""))
    if d.get("overflow"):
        note += f" {d['overflow']:,} above {show(d['edges'][-1])} not drawn (in the CDF)."
    return figure(spec.caption, chart, note)


def lengths_cdf_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """The CDFs of prompt and output lengths on one chart (log x when they span decades)."""
    caption = "Prompt and output length CDFs"
    dists = [(label, wf.get(key)) for label, key in (("prompt", "prompt_len"),
                                                      ("output", "output_len"))]
    present = [(label, d) for label, d in dists if isinstance(d, dict)]
    if not present:
        return _missing(wf, "prompt_len", caption)
    log_x = any(d["log_x"] for _, d in present)
    chart = svg.line_chart(
        "length_cdf", caption, [svg.Line(f"{label} tokens", d["cdf_tokens"], d["cdf_share"],
                                         step=True) for label, d in present],
        x=svg.Axis(label="tokens per request" + (" (log scale)" if log_x else ""), log=log_x,
                   fixed=x_of(bounds)),
        y=svg.Axis(label="share of requests ≤ x", fmt=svg.percent, lo=0.0, hi=1.0,
                   fixed=y_of(bounds)),
        legend_at="bottom")
    note = "; ".join(f"{label} p50 {fmt.tokens(d['p50'])}, p99 {fmt.tokens(d['p99'])}"
                     for label, d in present) + "."
    if log_x:
        note += " Zero-length requests are left off the log axis."
    return figure(caption, chart, note)


def _lengths_cdf_extent(wf: Section) -> Bounds | None:
    present = [d for d in (wf.get("prompt_len"), wf.get("output_len")) if isinstance(d, dict)]
    if not present:
        return None
    log_x = any(d["log_x"] for d in present)
    xs = [x for d in present for x in d["cdf_tokens"] if not log_x or x > 0]
    return Bounds(x=(min(xs), max(xs)), log_x=log_x) if xs else None


def tenants_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """Each tenant's share of the requests."""
    caption = "Requests per tenant"
    tenants = wf.get("tenants")
    if not tenants:
        return _missing(wf, "tenants", caption)
    chart = svg.bar_chart(
        "tenants", caption, [str(t["label"]) for t in tenants],
        [float(t["request_share"]) for t in tenants],
        value=svg.Axis(label="share of the requests", fmt=svg.percent, fixed=x_of(bounds)),
        horizontal=True)
    return figure(caption, chart, f"{len(tenants)} bars, the most requests first.")


def _tenants_extent(wf: Section) -> Bounds | None:
    tenants = wf.get("tenants")
    if not tenants:
        return None
    return Bounds(x=(0.0, headroom(max(float(t["request_share"]) for t in tenants), 0.1)))


def session_depth_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """Sessions by their number of turns."""
    caption = "Sessions by depth"
    s = wf.get("sessions")
    if not isinstance(s, dict):
        return _missing(wf, "sessions", caption)
    depths = [str(d) for d in s["depths"]]
    if len(depths) >= 30:
        depths[-1] += "+"
    chart = svg.bar_chart("session_depth", caption, depths,
                          [float(v) for v in s["sessions_by_depth"]],
                          value=svg.Axis(label="sessions", fixed=y_of(bounds)),
                          category_label="turns per session")
    one_turn = " Every session has one turn." if list(s["depths"]) == [1] else ""
    return figure(caption, chart, f"{s['sessions']:,} sessions.{one_turn}")


def _session_depth_extent(wf: Section) -> Bounds | None:
    s = wf.get("sessions")
    if not isinstance(s, dict) or not s["sessions_by_depth"]:
        return None
    return Bounds(y=(0.0, headroom(max(float(v) for v in s["sessions_by_depth"]), 0.1)))


def think_time_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """The distribution of the think time between consecutive turns of a session."""
    caption = "Think time between turns"
    s = wf.get("sessions")
    if not isinstance(s, dict):
        return _missing(wf, "sessions", caption)
    d = s.get("think_time")
    if not isinstance(d, dict):
        return said(caption, "No session has two turns: there is no think time to draw.")
    return _distribution_chart(d, DistributionFigure(
        name="think_time", caption=caption, x_label="think time", show=fmt.seconds,
        what=f"{d['total']:,} gaps, each measured from {s['think_time_from']} to the next "
        "turn's arrival", x_fmt=svg.seconds), bounds)


def _think_time_extent(wf: Section) -> Bounds | None:
    s = wf.get("sessions")
    d = s.get("think_time") if isinstance(s, dict) else None
    return _distribution_extent(d) if isinstance(d, dict) else None


def reuse_figure(wf: Section, bounds: Bounds | None = None) -> str:
    """The prefix-hit ratio per bin of arrivals, the overall ratio as a line."""
    caption = "Prefix-hit ratio over time"
    r = wf.get("reuse_over_time")
    if not isinstance(r, dict):
        return _missing(wf, "reuse_over_time", caption)
    _, _, scale, unit, xs = time_axis(r, bounds)
    overall = r["overall_hit_ratio"]
    chart = svg.line_chart(
        "reuse_over_time", caption, [svg.Line("hit ratio", xs, r["hit_ratio"], step=True)],
        x=svg.Axis(label=f"time since the first arrival ({unit})", fixed=_scaled(bounds, scale)),
        y=svg.Axis(label="token hit ratio", fmt=svg.percent, lo=0.0, hi=1.0,
                   fixed=y_of(bounds)),
        marks=svg.Marks(hlines=[(overall, f"overall {fmt.pct(overall)}")]))
    return figure(f"{caption} ({fmt.seconds(r['bin_s'])} bins)", chart,
                  f"Prefix-hit tokens over prompt tokens of the requests arriving in each "
                  f"{fmt.seconds(r['bin_s'])}, under the replay's preset; overall "
                  f"{fmt.pct(overall)}.")


def _reuse_extent(wf: Section) -> Bounds | None:
    r = wf.get("reuse_over_time")
    return Bounds(x=(0.0, _span_s(r))) if isinstance(r, dict) else None


def _length(key: str) -> Callable[[Section, Bounds | None], str]:
    def draw(wf: Section, bounds: Bounds | None) -> str:
        return length_figure(wf, key, bounds)
    return draw


# The workload pictures in page order, each with the axes its own data needs.
PICTURES = (
    Picture(arrivals_figure, _arrivals_extent),
    Picture(_tokens("prompt"), _tokens_extent("prompt")),
    Picture(_tokens("output"), _tokens_extent("output")),
    Picture(interarrival_figure, _interarrival_extent),
    Picture(_length("prompt_len"), _length_extent("prompt_len")),
    Picture(_length("output_len"), _length_extent("output_len")),
    Picture(lengths_cdf_figure, _lengths_cdf_extent),
    Picture(tenants_figure, _tenants_extent),
    Picture(session_depth_figure, _session_depth_extent),
    Picture(think_time_figure, _think_time_extent),
    Picture(reuse_figure, _reuse_extent),
)


def workload_figures(doc: dict[str, Any]) -> list[str]:
    """The workload pictures of one run in page order; [] when the report has none."""
    wf = doc.get("workload_figures")
    if not isinstance(wf, dict):
        return []
    return [picture.draw(wf, None) for picture in PICTURES]


def workload_pairs(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str]]:
    """The workload pictures of two runs, each pair on the axes that hold both; [] when
    neither report has them."""
    sections = [doc.get("workload_figures") for doc in (before, after)]
    if not any(isinstance(wf, dict) for wf in sections):
        return []
    before_wf, after_wf = (wf if isinstance(wf, dict) else {} for wf in sections)
    return [drawn_pair(picture, before_wf, after_wf) for picture in PICTURES]
