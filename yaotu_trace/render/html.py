"""One self-contained HTML page of a report: the pictures, the verdict, the tables.

A pure function of the `Report`: every number drawn is already in it (`trace report` adds the
histograms and series in its `plots` section). Nothing is fetched: the style and the one small
script are inline and the plots are inline SVG, so the file works offline and in CI artifacts.
The script only marks the page once every plot has drawn marks (`data-plots-drawn`), which the
browser test reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from yaotu_trace.data.report import Report
from yaotu_trace.render import fmt, svg
from yaotu_trace.render.blocks import (
    MARKDOWN,
    Block,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    Panel,
    Styled,
)
from yaotu_trace.render.views import load_view, view_name

# Views the page draws its own way, from the report's JSON: pictures, the verdict and its
# tables. Every other section with a view is drawn from its blocks, after them.
OWN_VIEWS = frozenset({"verdict", "axes", "principal", "ledger", "findings", "profile",
                       "prefix_reuse", "capacity_curve"})

STYLE = """
:root { --fg: #1d2433; --muted: #5b6475; --line: #d8dde6; --bg: #ffffff; --card: #f7f8fa;
  --ok: #2e7d32; --warn: #b26a00; --bad: #c62828; --na: #6b7280; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg); }
header { padding: 20px 32px 12px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
main { padding: 8px 32px 40px; max-width: 1400px; }
section { margin-top: 26px; }
h2 { font-size: 18px; margin: 0 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 12px 0 4px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 18px; }
figure { margin: 0; background: var(--card); border: 1px solid var(--line); border-radius: 6px;
  padding: 10px 12px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
figure p.note { margin: 6px 0 0; color: var(--muted); font-size: 13px; }
.unavailable { color: var(--muted); font-style: italic; padding: 24px 8px; }
svg.plot { width: 100%; height: auto; display: block; }
svg.plot text { font: 11px system-ui, sans-serif; fill: var(--muted); }
svg.plot text.label { font-size: 12px; fill: var(--fg); }
svg.plot text.value { font-size: 11px; fill: var(--fg); }
svg.plot .grid { stroke: #e6e9ef; }
svg.plot .axis, svg.plot .tickmark { stroke: #8a93a3; }
svg.plot .line { fill: none; stroke-width: 2; }
svg.plot .point { fill: #d1495b; stroke: #fff; stroke-width: 1; }
svg.plot .bar { fill: #2f6db5; }
svg.plot .bar.loss { fill: #d1495b; }
svg.plot .bar.total { fill: #2f6db5; }
svg.plot .dots circle { fill: #2f6db5; fill-opacity: 0.55; }
svg.plot .prefill { fill: #edae49; fill-opacity: 0.28; }
svg.plot .marker line { stroke: #c62828; stroke-dasharray: 5 4; stroke-width: 1.5; }
svg.plot .marker text { fill: #c62828; font-weight: 600; }
svg.plot .legend text { fill: var(--fg); }
table { border-collapse: collapse; margin: 6px 0; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left;
  vertical-align: top; }
th { background: var(--card); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.status { font-weight: 700; text-transform: uppercase; font-size: 12px; letter-spacing: .03em; }
.status.ok { color: var(--ok); } .status.warning { color: var(--warn); }
.status.bottleneck { color: var(--bad); } .status.insufficient_data { color: var(--na); }
.verdict { border-left: 5px solid var(--bad); background: #fff5f5; padding: 10px 14px;
  border-radius: 4px; }
.verdict.calm { border-color: var(--ok); background: #f3faf3; }
.verdict.undecided { border-color: var(--na); background: var(--card); }
.verdict strong { font-size: 16px; }
ul.notes { color: var(--muted); font-size: 13px; }
"""

# Marks the page once every plot has drawn marks; reports missing ones in the console.
SCRIPT = """
(function () {
  var plots = document.querySelectorAll("svg.plot");
  var empty = [];
  plots.forEach(function (p) {
    if (p.querySelectorAll(".mark").length === 0) { empty.push(p.dataset.plot); }
  });
  document.body.dataset.plotsTotal = String(plots.length);
  document.body.dataset.plotsDrawn = empty.length === 0 ? "ok" : "missing:" + empty.join(",");
  if (empty.length) { console.warn("plots without marks: " + empty.join(", ")); }
})();
"""


def _num(value: Any, how: Callable[[Any], str] = fmt.num) -> str:
    return fmt.MISSING if value is None else how(value)


def _table(header: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(caption: str, body: str, note: str | None = None) -> str:
    extra = f'<p class="note">{escape(note)}</p>' if note else ""
    return f"<figure><figcaption>{escape(caption)}</figcaption>{body}{extra}</figure>"


def _unavailable(caption: str, why: str) -> str:
    return _figure(caption, f'<div class="unavailable">Not available on this trace: '
                   f"{escape(why)}.</div>")


def _axes_list(doc: dict[str, Any]) -> list[dict[str, Any]]:
    axes = doc.get("axes")
    if isinstance(axes, dict):
        return [{"name": k, **v} for k, v in axes.items() if isinstance(v, dict)]
    return [a for a in axes or [] if isinstance(a, dict)]


def _verdict(doc: dict[str, Any]) -> str:
    verdict = doc.get("verdict")
    axes = _axes_list(doc)
    if not isinstance(verdict, dict) and not axes:
        return ""
    parts = ["<section id=\"verdict\"><h2>Verdict</h2>"]
    if isinstance(verdict, dict):
        calm = "" if verdict.get("principal_axis") else (
            " undecided" if verdict.get("insufficient_data") else " calm")
        summary = verdict.get("summary") or verdict.get("principal_axis") or "no bottleneck"
        parts.append(f'<div class="verdict{calm}"><strong>{escape(str(summary))}</strong>'
                     f"<p>{escape(str(verdict.get('reason') or ''))}</p>")
        if verdict.get("fix_order"):
            parts.append("<p>Fix order: " + " → ".join(escape(str(a))
                                                       for a in verdict["fix_order"]) + "</p>")
        parts.append("</div>")
    if axes:
        rows = []
        for a in axes:
            status = str(a.get("status"))
            rules = ", ".join(str(f.get("id")) for f in a.get("findings") or []
                              if isinstance(f, dict)) or fmt.MISSING
            missing = "; ".join(str(m) for m in a.get("missing") or []) or ""
            rows.append([escape(str(a.get("name"))),
                         f'<span class="status {escape(status)}">{escape(status)}</span>',
                         escape(str(a.get("cause") or fmt.MISSING)),
                         _num(a.get("score"), fmt.pct),
                         escape(str(a.get("score_basis") or "")), escape(rules),
                         escape(missing)])
        parts.append(_table(["axis", "status", "cause", "score", "score basis", "rules",
                             "missing data"], rows, numeric={3}))
    parts.append("</section>")
    return "".join(parts)


def _capacity_curve(doc: dict[str, Any]) -> str:
    curve = doc.get("capacity_curve")
    if not isinstance(curve, dict) or not curve.get("points"):
        return _unavailable("Hit ratio vs prefix-cache capacity",
                            "needs prompt content (token or block ids) for the capacity sweep")
    pts = sorted(curve["points"], key=lambda p: p["capacity_tokens"])
    xs = [float(p["capacity_tokens"]) for p in pts]
    ys = [float(p["hit_ratio"]) for p in pts]
    vlines: list[tuple[float, str]] = []
    capacity = (doc.get("config") or {}).get("kv_capacity_tokens")
    if isinstance(capacity, int | float) and capacity > 0:
        vlines.append((float(capacity), f"configured KV capacity {fmt.tokens(capacity)}"))
    marks = [(float(p["capacity_tokens"]), float(p["hit_ratio"]),
              f"{p['label']}: {fmt.tokens(p['capacity_tokens'])} → {fmt.pct(p['hit_ratio'])}")
             for p in [curve.get("knee"), *(curve.get("shares") or [])]
             if isinstance(p, dict) and p.get("capacity_tokens")]
    unlimited = curve.get("unlimited_hit_ratio")
    hlines = [(float(unlimited), f"unlimited {fmt.pct(unlimited)}")] if unlimited else []
    chart = svg.line_chart("capacity_curve", "Hit ratio vs LRU capacity", [("hit ratio", xs, ys)],
                           x_label="prefix-cache capacity (tokens, log scale)",
                           y_label="token hit ratio", log_x=True, y_fmt=svg.percent, y_min=0.0,
                           vlines=vlines, hlines=hlines, points=marks, step=True)
    knee = curve.get("knee") or {}
    note = (f"Preset {curve.get('preset')}; knee at {fmt.tokens(knee.get('capacity_tokens'))} "
            f"({fmt.pct(knee.get('hit_ratio'))}). Dots: knee and the capacities for 50/90/99 % "
            "of the reachable reuse.")
    if not vlines:
        note += " No KV capacity known: pass --kv-capacity or a step log to mark it."
    return _figure("Hit ratio vs prefix-cache capacity", chart, note)


def _waterfall(doc: dict[str, Any]) -> str:
    reuse = doc.get("prefix_reuse")
    wf = reuse.get("waterfall") if isinstance(reuse, dict) else None
    steps = wf.get("steps") if isinstance(wf, dict) else None
    ideal = wf.get("ideal_hit_tokens") if isinstance(wf, dict) else None
    if not steps or ideal is None:
        return _unavailable("Where the reuse is lost", "needs prompt content for the replay")
    losses = [(str(s.get("label") or s.get("step")), float(s.get("loss_tokens") or 0))
              for s in steps]
    chart = svg.waterfall_chart("waterfall", "Loss waterfall",
                                ("ideal reuse", float(ideal)), losses,
                                y_label="prefix-hit tokens")
    return _figure("Where the reuse is lost", chart,
                   "From the ideal prefix reuse down to what the engine rules achieve; red bars "
                   "are the tokens each rule loses.")


def _hist(plots: dict[str, Any], key: str, caption: str, x_label: str,
          seconds: bool) -> str:
    h = plots.get(key) if isinstance(plots, dict) else None
    if not isinstance(h, dict):
        why = (plots or {}).get("unavailable", {}).get(key, "not computed by this command")
        return _unavailable(caption, why)
    x_fmt = svg.seconds if seconds else svg.short
    show = fmt.seconds if seconds else fmt.tokens
    vlines = [(h[p], f"{p} {show(h[p])}") for p in ("p50", "p99") if h.get(p) is not None]
    chart = svg.histogram_chart(key, caption, h["edges"], h["counts"], x_label=x_label,
                                x_fmt=x_fmt, vlines=vlines)
    note = f"{h['total']:,} requests; p50 {show(h['p50'])}, p90 {show(h['p90'])}, " \
           f"p99 {show(h['p99'])}."
    if h.get("overflow"):
        note += f" {h['overflow']:,} above {show(h['edges'][-1])} not drawn."
    return _figure(caption, chart, note)


def _kv(plots: dict[str, Any]) -> str:
    caption = "KV usage over time"
    s = plots.get("kv_over_time") if isinstance(plots, dict) else None
    if not isinstance(s, dict):
        why = (plots or {}).get("unavailable", {}).get("kv_over_time", "not computed")
        return _unavailable(caption, why)
    ratio = s["unit"] == "share of the pool"
    cap = s.get("capacity")
    hlines = [(float(cap), "KV capacity")] if isinstance(cap, int | float) and cap > 0 else []
    chart = svg.line_chart("kv_over_time", s["label"], [(s["label"], s["t_s"], s["values"])],
                           x_label="trace time (s)", y_label=s["unit"],
                           y_fmt=svg.percent if ratio else svg.short, y_min=0.0,
                           y_max=1.0 if ratio else None, hlines=hlines)
    return _figure(f"{s['label']} over time", chart, f"Source: {s['source']}.")


def _gaps(plots: dict[str, Any]) -> str:
    caption = "Inter-token gaps with prefill overlaid"
    g = plots.get("gaps") if isinstance(plots, dict) else None
    if not isinstance(g, dict):
        why = (plots or {}).get("unavailable", {}).get("gaps", "not computed")
        return _unavailable(caption, why)
    chart = svg.gap_chart("gaps", caption, g["token_t_s"], g["gap_s"], g["prefill_spans_s"],
                          median_s=g.get("median_gap_s"))
    return _figure(caption, chart,
                   f"The {len(g['gap_s']):,} token gaps nearest the longest stall; shaded: "
                   f"{g['prefill_source']}.")


def _tenants(doc: dict[str, Any]) -> str:
    reuse = doc.get("prefix_reuse")
    tenants = reuse.get("per_tenant") if isinstance(reuse, dict) else None
    if not tenants:
        return ""
    rows = [[escape(str(t["label"])), fmt.count(t["requests"]), fmt.tokens(t["prompt_tokens"]),
             fmt.tokens(t["hit_tokens"]), fmt.pct(t["hit_ratio"])] for t in tenants]
    return ("<section id=\"tenants\"><h2>Per tenant</h2>"
            + _table(["tenant", "requests", "prompt tokens", "hit tokens", "hit ratio"], rows,
                     numeric={1, 2, 3, 4}) + "</section>")


def _quantity(q: dict[str, Any]) -> str:
    value = q.get("value")
    unit = q.get("unit")
    if value is None:
        shown = fmt.MISSING
    elif unit == "ratio":
        shown = fmt.pct(value)
    elif unit == "s":
        shown = fmt.seconds(value)
    elif unit == "bytes":
        shown = fmt.bytes_(value)
    elif unit == "tokens":
        shown = fmt.tokens(value)
    else:
        shown = f"{fmt.num(value)} {unit or ''}".strip()
    return (f"{escape(str(q.get('name')))}: <b>{escape(shown)}</b>"
            f"<br><small>{escape(str(q.get('basis') or ''))}</small>")


def _ledger(doc: dict[str, Any]) -> str:
    ledger = doc.get("ledger")
    if not isinstance(ledger, list) or not ledger:
        return ""
    rows = [[escape(str(e.get("remedy"))), escape(str(e.get("axis"))),
             escape(", ".join(e.get("triggered_by") or [])),
             "<br>".join(_quantity(q) for q in e.get("saves") or []) or fmt.MISSING,
             "<br>".join(_quantity(q) for q in e.get("adds") or []) or fmt.MISSING]
            for e in ledger]
    return ("<section id=\"ledger\"><h2>Ledger: what each remedy saves and adds</h2>"
            + _table(["remedy", "axis", "rules", "saves", "adds"], rows) + "</section>")


def _findings(doc: dict[str, Any]) -> str:
    findings = doc.get("findings")
    if not isinstance(findings, list) or not findings:
        return ""
    rows = [[escape(str(f.get("id"))),
             f'<span class="status {escape(str(f.get("severity")))}">'
             f"{escape(str(f.get('severity')))}</span>",
             escape(str(f.get("axis"))), escape(str(f.get("message") or f.get("title")))]
            for f in findings]
    return ("<section id=\"findings\"><h2>Findings</h2>"
            + _table(["rule", "severity", "axis", "message"], rows) + "</section>")


def _profile(doc: dict[str, Any]) -> str:
    p = doc.get("profile")
    if not isinstance(p, dict):
        return ""
    a, lengths, pop = p.get("arrivals") or {}, p.get("lengths") or {}, p.get("population") or {}
    rows = [
        ["requests", fmt.count(a.get("requests"))],
        ["span", _num(a.get("span_s"), fmt.seconds)],
        ["mean rate", f"{_num(a.get('mean_rate_rps'))} req/s"],
        ["peak-to-mean (1 s bins)", _num(a.get("peak_to_mean"))],
        ["interarrival CV", _num(a.get("interarrival_cv"))],
        ["prompt tokens p50 / p99", " / ".join(
            _num((lengths.get("prompt_len") or {}).get(k), fmt.count) for k in ("p50", "p99"))],
        ["output tokens p50 / p99", " / ".join(
            _num((lengths.get("output_len") or {}).get(k), fmt.count) for k in ("p50", "p99"))],
        ["tenants / sessions", f"{_num(pop.get('tenants'), fmt.count)} / "
                               f"{_num(pop.get('sessions'), fmt.count)}"],
    ]
    if p.get("successful_requests") is not None:  # lengths and pictures leave failures out
        rows.append(["lengths and latencies", f"successful requests only: "
                     f"{fmt.count(p['successful_requests'])} of {fmt.count(p.get('requests'))}"])
    return ("<section id=\"profile\"><h2>Workload</h2>"
            + _table(["", "value"], [[escape(k), escape(v)] for k, v in rows], numeric={1})
            + "</section>")


def _view_sections(report: Report) -> list[str]:
    """A `<section>` per section that has a view the page does not draw its own way."""
    out = []
    for name, section in report.sections.items():
        target = None if section is None else view_name(name, section)
        if target is not None and target not in OWN_VIEWS:
            body = draw(load_view(target)(section))
            if body:
                out.append(f'<section id="{escape(name)}">{body}</section>')
    return out


def draw(blocks: list[Block]) -> str:
    """HTML of the blocks; like the terminal, it takes the console's wording, not Markdown's."""
    return "".join(_draw_block(b) for b in blocks if b.only != MARKDOWN)


def _draw_block(block: Block) -> str:
    match block:
        case Heading():
            tag = "h2" if block.level <= 3 else "h3"
            return f"<{tag}>{escape(block.text)}</{tag}>"
        case Line():
            return f"<p>{escape(block.text.strip())}</p>" if block.text.strip() else ""
        case KeyValues():
            rows = [[escape(label), escape(value)] for label, value in block.rows]
            return _titled(block.title, _table(list(block.header), rows, numeric={1}))
        case Grid():
            rows = [[escape(c.text if isinstance(c, Styled) else c) for c in row]
                    for row in block.rows]
            aligns = [c.align for c in block.columns] if block.columns else (
                ["left"] + ["right"] * (len(block.header) - 1))
            numeric = {k for k, a in enumerate(aligns) if a == "right"}
            return _titled(block.title, _table(list(block.header), rows, numeric=numeric))
        case Notes():
            items = "".join(f"<li>{escape(n)}</li>" for n in block.notes)
            return f'<ul class="notes">{items}</ul>' if items else ""
        case Panel():
            return f"<h3>{escape(block.title)}</h3>{draw(list(block.blocks))}"
    raise TypeError(f"no HTML drawing for {type(block).__name__}")


def _titled(title: str | None, table: str) -> str:
    return (f"<h3>{escape(title)}</h3>" if title else "") + table


def render_html(report: Report) -> str:
    """The whole page; sections a report lacks are left out or say why they are missing."""
    doc = report.to_dict()
    inp = doc["input"]
    plots = doc.get("plots") if isinstance(doc.get("plots"), dict) else {}
    title = f"yaotu-trace {report.command}: {inp['path']}"
    figures: list[str] = []
    if "capacity_curve" in doc or "plots" in doc:
        figures.append(_capacity_curve(doc))
    reuse = doc.get("prefix_reuse")
    if plots or (isinstance(reuse, dict) and "waterfall" in reuse):
        figures.append(_waterfall(doc))
    if plots:
        figures += [
            _hist(plots, "hit_length", "Prefix-cache hit length per request",
                  "hit tokens per request", seconds=False),
            _hist(plots, "queue_time", "Queue time", "queue time", seconds=True),
            _hist(plots, "ttft", "Time to first token", "time to first token", seconds=True),
            _kv(plots),
            _gaps(plots),
        ]
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in inp.get("notes") or [])
    body = [
        f"<header><h1>{escape(title)}</h1><p>{fmt.count(inp['requests'])} requests · format "
        f"{escape(str(inp['format']))} · yaotu-trace {escape(str(doc['tool']['version']))}"
        "</p></header><main>",
        _verdict(doc),
        (f"<section id=\"plots\"><h2>Pictures</h2><div class=\"grid\">{''.join(figures)}"
         "</div></section>") if figures else "",
        _tenants(doc),
        _ledger(doc),
        _findings(doc),
        _profile(doc),
        *_view_sections(report),
        f"<section id=\"notes\"><h2>Notes</h2><ul class=\"notes\">{notes}</ul></section>"
        if notes else "",
        "</main>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<link rel=\"icon\" href=\"data:,\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + f"<script>{SCRIPT}</script></body></html>\n"
    )
