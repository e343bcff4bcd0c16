"""The report page's prefix-cache and timing pictures, drawn from the report's JSON.

The capacity curve and the loss waterfall come from the replay; the hit-length, queue-time and
first-token histograms, KV usage over time and the inter-token gaps from the `plots` section
(`trace report` fills it; `--simulate` with modelled timing, marked so on every caption). As in
`render.html_workload`, each picture is a drawing function of (the report as builtins,
`Bounds`) with its extent next to it, so a page of two runs draws each pair on shared axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaotu_trace.render import fmt, svg
from yaotu_trace.render.html_parts import figure, unavailable
from yaotu_trace.render.html_workload import said
from yaotu_trace.render.shared_axes import (
    Bounds,
    Picture,
    drawn_pair,
    headroom,
    histogram_bounds,
    x_of,
    y_of,
)

Doc = dict[str, Any]
# Plots that request timing fills: `trace report --simulate` can model it.
TIMING_PLOTS = frozenset({"queue_time", "ttft", "kv_over_time", "gaps"})


def modelled(doc: Doc) -> dict[str, Any] | None:
    """The engine a report's timing was modelled on (`trace report --simulate`), else None."""
    engine = (doc.get("config") or {}).get("modelled")
    return engine if isinstance(engine, dict) else None


def _modelled_caption(caption: str, is_modelled: bool) -> str:
    """A timing panel's caption, marked when its timing is modelled rather than observed."""
    return f"{caption} (modelled)" if is_modelled else caption


def _plots(doc: Doc) -> dict[str, Any]:
    plots = doc.get("plots")
    return plots if isinstance(plots, dict) else {}


def _curve_points(doc: Doc) -> list[dict[str, Any]] | None:
    curve = doc.get("capacity_curve")
    if not isinstance(curve, dict) or not curve.get("points"):
        return None
    return sorted(curve["points"], key=lambda p: p["capacity_tokens"])


def _configured_capacity(doc: Doc) -> float | None:
    capacity = (doc.get("config") or {}).get("kv_capacity_tokens")
    return float(capacity) if isinstance(capacity, int | float) and capacity > 0 else None


def capacity_curve(doc: Doc, bounds: Bounds | None = None) -> str:
    """The token hit ratio against LRU capacity, the knee and configured capacity marked."""
    pts = _curve_points(doc)
    if pts is None:
        return unavailable("Hit ratio vs prefix-cache capacity",
                           "needs prompt content (token or block ids) for the capacity sweep")
    curve = doc["capacity_curve"]
    xs = [float(p["capacity_tokens"]) for p in pts]
    ys = [float(p["hit_ratio"]) for p in pts]
    vlines: list[tuple[float, str]] = []
    capacity = _configured_capacity(doc)
    if capacity is not None:
        vlines.append((capacity, f"configured KV capacity {fmt.tokens(capacity)}"))
    marks = [(float(p["capacity_tokens"]), float(p["hit_ratio"]),
              f"{p['label']}: {fmt.tokens(p['capacity_tokens'])} → {fmt.pct(p['hit_ratio'])}")
             for p in [curve.get("knee"), *(curve.get("shares") or [])]
             if isinstance(p, dict) and p.get("capacity_tokens")]
    unlimited = curve.get("unlimited_hit_ratio")
    hlines = [(float(unlimited), f"unlimited {fmt.pct(unlimited)}")] if unlimited else []
    chart = svg.line_chart(
        "capacity_curve", "Hit ratio vs LRU capacity", [svg.Line("hit ratio", xs, ys, step=True)],
        x=svg.Axis(label="prefix-cache capacity (tokens, log scale)", log=True,
                   fixed=x_of(bounds)),
        y=svg.Axis(label="token hit ratio", fmt=svg.percent, lo=0.0, fixed=y_of(bounds)),
        marks=svg.Marks(vlines=vlines, hlines=hlines, points=marks))
    knee = curve.get("knee") or {}
    note = (f"Preset {curve.get('preset')}; knee at {fmt.tokens(knee.get('capacity_tokens'))} "
            f"({fmt.pct(knee.get('hit_ratio'))}). Dots: knee and the capacities for 50/90/99 % "
            "of the reachable reuse.")
    if not vlines:
        note += " No KV capacity known: pass --kv-capacity or a step log to mark it."
    return figure("Hit ratio vs prefix-cache capacity", chart, note)


def _capacity_extent(doc: Doc) -> Bounds | None:
    """The curve's capacities (and the configured one) on a log axis; its ratios from 0."""
    pts = _curve_points(doc)
    if pts is None:
        return None
    xs = [float(p["capacity_tokens"]) for p in pts if p["capacity_tokens"] > 0]
    capacity = _configured_capacity(doc)
    xs += [capacity] if capacity is not None else []
    unlimited = doc["capacity_curve"].get("unlimited_hit_ratio") or 0.0
    top = max([float(p["hit_ratio"]) for p in pts] + [float(unlimited)])
    return Bounds(x=(min(xs), max(xs)) if xs else None, y=(0.0, headroom(top)), log_x=True)


def _waterfall_parts(doc: Doc) -> tuple[float, list[tuple[str, float]]] | None:
    """(ideal hit tokens, each step's loss) of the replay's waterfall, None without one."""
    reuse = doc.get("prefix_reuse")
    wf = reuse.get("waterfall") if isinstance(reuse, dict) else None
    steps = wf.get("steps") if isinstance(wf, dict) else None
    ideal = wf.get("ideal_hit_tokens") if isinstance(wf, dict) else None
    if not steps or ideal is None:
        return None
    return float(ideal), [(str(s.get("label") or s.get("step")), float(s.get("loss_tokens") or 0))
                          for s in steps]


def waterfall(doc: Doc, bounds: Bounds | None = None) -> str:
    """From the ideal prefix reuse down to what the engine's rules achieve."""
    parts = _waterfall_parts(doc)
    if parts is None:
        return unavailable("Where the reuse is lost", "needs prompt content for the replay")
    ideal, losses = parts
    chart = svg.waterfall_chart("waterfall", "Loss waterfall", ("ideal reuse", ideal), losses,
                                y_label="prefix-hit tokens", y_range=y_of(bounds))
    return figure("Where the reuse is lost", chart,
                  "From the ideal prefix reuse down to what the engine rules achieve; red bars "
                  "are the tokens each rule loses.")


def _waterfall_extent(doc: Doc) -> Bounds | None:
    parts = _waterfall_parts(doc)
    if parts is None:
        return None
    ideal, losses = parts
    floor, top = svg.waterfall_range(ideal, sum(max(v, 0.0) for _, v in losses))
    return Bounds(y=(floor, top), zoomed_y=floor > 0)


def _missing_plot(plots: dict[str, Any], key: str, caption: str) -> str:
    why = (plots or {}).get("unavailable", {}).get(key, "not computed by this command")
    return unavailable(caption, why, timing=key in TIMING_PLOTS)


def histogram(plots: dict[str, Any], key: str, caption: str, x_label: str, seconds: bool,
              is_modelled: bool = False, bounds: Bounds | None = None) -> str:
    """One of the `plots` histograms, p50 and p99 marked; one with no hit says so."""
    caption = _modelled_caption(caption, is_modelled)
    h = plots.get(key) if isinstance(plots, dict) else None
    if not isinstance(h, dict):
        return _missing_plot(plots, key, caption)
    if key == "hit_length" and _all_zero(h):
        return said(caption, f"No request reused a prefix: all {h['total']:,} requests hit "
                             "0 tokens.")
    x_fmt = svg.seconds if seconds else svg.short
    show = fmt.seconds if seconds else fmt.tokens
    vlines = [(h[p], f"{p} {show(h[p])}") for p in ("p50", "p99") if h.get(p) is not None]
    chart = svg.histogram_chart(key, caption, h["edges"], h["counts"],
                                x=svg.Axis(label=x_label, fmt=x_fmt, fixed=x_of(bounds)),
                                y=svg.Axis(label="requests", fixed=y_of(bounds)), vlines=vlines)
    note = f"{h['total']:,} requests; p50 {show(h['p50'])}, p90 {show(h['p90'])}, " \
           f"p99 {show(h['p99'])}."
    if h.get("overflow"):
        note += f" {h['overflow']:,} above {show(h['edges'][-1])} not drawn."
    return figure(caption, chart, note)


def _all_zero(h: dict[str, Any]) -> bool:
    """A histogram whose every value is 0: all in the first bin, which ends below one."""
    counts, edges = h.get("counts") or [], h.get("edges") or [0.0, 0.0]
    return (bool(h.get("total")) and not h.get("overflow") and counts[:1] == [h["total"]]
            and float(edges[1]) <= 1.0)


def _histogram_extent(key: str) -> Callable[[Doc], Bounds | None]:
    def extent(doc: Doc) -> Bounds | None:
        h = _plots(doc).get(key)
        if not isinstance(h, dict) or (key == "hit_length" and _all_zero(h)):
            return None
        return histogram_bounds(h["edges"], h["counts"])
    return extent


def _histogram_picture(key: str, caption: str, x_label: str, seconds: bool) -> Picture:
    def draw(doc: Doc, bounds: Bounds | None) -> str:
        timed = key != "hit_length" and modelled(doc) is not None
        return histogram(_plots(doc), key, caption, x_label, seconds, timed, bounds)
    return Picture(draw, _histogram_extent(key))


def kv_over_time(doc: Doc, bounds: Bounds | None = None) -> str:
    """KV usage over the trace's time, the pool's capacity marked when known."""
    plots = _plots(doc)
    caption = _modelled_caption("KV usage over time", modelled(doc) is not None)
    s = plots.get("kv_over_time")
    if not isinstance(s, dict):
        return _missing_plot(plots, "kv_over_time", caption)
    ratio = s["unit"] == "share of the pool"
    cap = s.get("capacity")
    hlines = [(float(cap), "KV capacity")] if isinstance(cap, int | float) and cap > 0 else []
    chart = svg.line_chart(
        "kv_over_time", s["label"], [svg.Line(s["label"], s["t_s"], s["values"])],
        x=svg.Axis(label="trace time (s)"),
        y=svg.Axis(label=s["unit"], fmt=svg.percent if ratio else svg.short, lo=0.0,
                   hi=1.0 if ratio else None, fixed=y_of(bounds)),
        marks=svg.Marks(hlines=hlines))
    return figure(_modelled_caption(f"{s['label']} over time", modelled(doc) is not None),
                  chart, f"Source: {s['source']}.")


def _kv_extent(doc: Doc) -> Bounds | None:
    """Only the value axis, from 0 (a share of the pool is always 0-100 %): the time axis is
    each run's own trace clock, which two captured runs do not share."""
    s = _plots(doc).get("kv_over_time")
    if not isinstance(s, dict) or not s["values"] or s["unit"] == "share of the pool":
        return None
    cap = s.get("capacity")
    top = max([float(v) for v in s["values"]] + ([float(cap)] if isinstance(cap, int | float)
                                                   else []))
    return Bounds(y=(0.0, headroom(top)))


def gaps(doc: Doc, bounds: Bounds | None = None) -> str:
    """The inter-token gaps around the longest stall, prefill work shaded behind them."""
    plots = _plots(doc)
    caption = _modelled_caption("Inter-token gaps with prefill overlaid",
                                modelled(doc) is not None)
    g = plots.get("gaps")
    if not isinstance(g, dict):
        return _missing_plot(plots, "gaps", caption)
    y_max = bounds.y[1] if bounds is not None and bounds.y is not None else None
    chart = svg.gap_chart("gaps", caption, g["token_t_s"], g["gap_s"], g["prefill_spans_s"],
                          median_s=g.get("median_gap_s"), y_max=y_max)
    return figure(caption, chart,
                  f"The {len(g['gap_s']):,} token gaps nearest the longest stall; shaded: "
                  f"{g['prefill_source']}.")


def _gaps_extent(doc: Doc) -> Bounds | None:
    """Only the gap axis: each run's window is its own stretch around its longest stall."""
    g = _plots(doc).get("gaps")
    if not isinstance(g, dict) or not g["gap_s"]:
        return None
    return Bounds(y=(0.0, max(g["gap_s"]) * 1.08 or 1.0))


def observed_hits(doc: Doc, bounds: Bounds | None = None) -> str:
    """The engine's own hit share per window of arrivals beside the replay's, the stretch
    where the engine falls short (`trace check --fail-on observed-shortfall`) shaded."""
    caption = "Engine-reported against replayed prefix-cache hits"
    r = doc.get("observed_vs_replayed")
    if not isinstance(r, dict) or not r.get("windows"):
        return unavailable(caption, "the trace carries no cached_tokens counted by its engine")
    windows = [w for w in r["windows"] if w["prompt_tokens"]]
    xs = [(w["start_s"] + w["end_s"]) / 2 for w in windows]
    replay = f"replayed ({r['preset']} rules)" if r.get("preset") else "replayed"
    lines = [svg.Line("engine-reported", xs,
                      [w["observed_hit_tokens"] / w["prompt_tokens"] for w in windows]),
             svg.Line(replay, xs,
                      [w["replayed_hit_tokens"] / w["prompt_tokens"] for w in windows])]
    short = r.get("shortfall")
    bands = [] if short is None else [svg.Band(
        short["start_s"], short["end_s"], "shortfall", "burst",
        f"from {fmt.num(short['start_s'])} s to {fmt.num(short['end_s'])} s the engine hit "
        f"{short['observed_hit_tokens']:,} of {short['prompt_tokens']:,} prompt tokens, the "
        f"replay {short['replayed_hit_tokens']:,}")]
    chart = svg.line_chart(
        "observed_hits", caption, lines, x=svg.Axis(label="arrival time (s)"),
        y=svg.Axis(label="hit tokens / prompt tokens", fmt=svg.percent, lo=0.0, hi=1.0,
                   fixed=y_of(bounds)),
        marks=svg.Marks(bands=bands))
    margins = (f"{r['points'] * 100:g} points of the prompt tokens and "
               f"{r['relative'] * 100:g} % of the replayed hits")
    where = ("no stretch falls short by " + margins if short is None else
             f"shaded: {fmt.num(short['start_s'])}–{fmt.num(short['end_s'])} s, where the "
             f"engine falls short of the replay by {margins} or more")
    return figure(caption, chart, f"Ten windows of arrivals; {where}.")


def _observed_extent(doc: Doc) -> Bounds | None:
    """Only the share axis, 0–100 %: each run's windows are on its own trace clock."""
    return Bounds(y=(0.0, 1.0)) if isinstance(doc.get("observed_vs_replayed"), dict) else None


def _has_observed(doc: Doc) -> bool:
    return isinstance(doc.get("observed_vs_replayed"), dict)


def _has_replay(doc: Doc) -> bool:
    return "capacity_curve" in doc or "plots" in doc


def _has_waterfall(doc: Doc) -> bool:
    reuse = doc.get("prefix_reuse")
    return bool(_plots(doc)) or (isinstance(reuse, dict) and "waterfall" in reuse)


def _has_plots(doc: Doc) -> bool:
    return bool(_plots(doc))


# The cache and timing pictures in page order, each with the test of whether a report has
# its panel at all (a report of another command may have none).
PICTURES: tuple[tuple[Callable[[Doc], bool], Picture], ...] = (
    (_has_replay, Picture(capacity_curve, _capacity_extent)),
    (_has_waterfall, Picture(waterfall, _waterfall_extent)),
    (_has_observed, Picture(observed_hits, _observed_extent)),
    (_has_plots, _histogram_picture("hit_length", "Prefix-cache hit length per request",
                                    "hit tokens per request", seconds=False)),
    (_has_plots, _histogram_picture("queue_time", "Queue time", "queue time", seconds=True)),
    (_has_plots, _histogram_picture("ttft", "Time to first token", "time to first token",
                                    seconds=True)),
    (_has_plots, Picture(kv_over_time, _kv_extent)),
    (_has_plots, Picture(gaps, _gaps_extent)),
)


def timing_figures(doc: Doc) -> list[str]:
    """The cache and timing pictures of one run, in page order; those the trace cannot
    support say why."""
    return [picture.draw(doc, None) for has, picture in PICTURES if has(doc)]


def timing_pairs(before: Doc, after: Doc) -> list[tuple[str, str]]:
    """The same pictures of two runs, each pair on the axes that hold both."""
    return [drawn_pair(picture, before, after) for has, picture in PICTURES
            if has(before) or has(after)]
