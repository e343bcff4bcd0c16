"""One self-contained HTML page of a report: the pictures, the verdict, the tables.

A pure function of the `Report`: every number drawn is already in it (`trace report` adds the
histograms and series in its `plots` section). Nothing is fetched: the style and the one small
script are inline and the plots are inline SVG, so the file works offline and in CI artifacts.
The script only marks the page once every plot has drawn marks (`data-plots-drawn`), which the
browser test reads back.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from itertools import zip_longest
from typing import Any

from yaotu_trace.data.report import Report, to_builtins
from yaotu_trace.render import fmt
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
from yaotu_trace.render.html_diff import diff_sections
from yaotu_trace.render.html_parts import (
    TWO_RUN_SIMULATE_HINT,
    NotDrawn,
    not_drawn_line,
    num,
    quantity,
    table,
)
from yaotu_trace.render.html_timing import modelled, timing_figures, timing_pairs
from yaotu_trace.render.html_workload import said, workload_figures, workload_pairs
from yaotu_trace.render.views import load_view, view_name

# Views the page draws its own way, from the report's JSON: pictures, the verdict and its
# tables. Every other section with a view is drawn from its blocks, after them.
OWN_VIEWS = frozenset({"verdict", "axes", "principal", "ledger", "findings", "profile",
                       "prefix_reuse", "capacity_curve"})
# Sections of a two-run report that are not the run after's own: the run before and the diff.
TWO_RUN_KEYS = frozenset({"before", "diff"})

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
svg.plot .marker text { fill: #c62828; font-weight: 600; paint-order: stroke; stroke: #fff;
  stroke-width: 3px; }
svg.plot .legend text { fill: var(--fg); }
svg.plot .band.busy { fill: #edae49; fill-opacity: 0.3; }
svg.plot .band.burst { fill: #d1495b; fill-opacity: 0.22; }
svg.plot text.band-label { font-size: 11px; font-weight: 700; paint-order: stroke;
  stroke: #fff; stroke-width: 3px; }
svg.plot text.band-label.busy { fill: #8a5a00; }
svg.plot text.band-label.burst { fill: #a3293a; }
figure p.note.said { font-size: 14px; padding: 24px 8px; }
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
.modelled { border-left: 5px solid var(--warn); background: #fff8ec; padding: 6px 14px;
  border-radius: 4px; }
.modelled p { margin: 4px 0; } p.modelled-note { color: var(--warn); }
ul.notes { color: var(--muted); font-size: 13px; }
.status.same, .status.improved, .status.unchanged { color: var(--ok); }
.status.differs, .status.regressed { color: var(--bad); }
.status.unknown { color: var(--na); }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 18px;
  margin-top: 14px; }
.pair > .side { min-width: 0; overflow-x: auto; }
.pair > .side > section { margin-top: 0; }
.pair > .side h2 { font-size: 16px; }
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


def _anchor(name: str, side: str) -> str:
    """A section's id: `verdict`, or `before-verdict` for one run of a two-run page."""
    return f"{side}-{name}" if side else name


def _axes_list(doc: dict[str, Any]) -> list[dict[str, Any]]:
    axes = doc.get("axes")
    if isinstance(axes, dict):
        return [{"name": k, **v} for k, v in axes.items() if isinstance(v, dict)]
    return [a for a in axes or [] if isinstance(a, dict)]


def _verdict(doc: dict[str, Any], side: str = "") -> str:
    verdict = doc.get("verdict")
    axes = _axes_list(doc)
    if not isinstance(verdict, dict) and not axes:
        return ""
    parts = [f"<section id=\"{_anchor('verdict', side)}\"><h2>Verdict</h2>"]
    if isinstance(verdict, dict):
        calm = "" if verdict.get("principal_axis") else (
            " undecided" if verdict.get("insufficient_data") else " calm")
        summary = verdict.get("summary") or verdict.get("principal_axis") or "no bottleneck"
        parts.append(f'<div class="verdict{calm}"><strong>{escape(str(summary))}</strong>'
                     f"<p>{escape(str(verdict.get('reason') or ''))}</p>"
                     f"{_modelled_verdict(doc)}")
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
                         num(a.get("score"), fmt.pct),
                         escape(str(a.get("score_basis") or "")), escape(rules),
                         escape(missing)])
        parts.append(table(["axis", "status", "cause", "score", "score basis", "rules",
                             "missing data"], rows, numeric={3}))
    parts.append("</section>")
    return "".join(parts)


def _modelled_verdict(doc: dict[str, Any]) -> str:
    """The verdict's word that it judges modelled timing ('' for observed timing)."""
    if modelled(doc) is None:
        return ""
    return ('<p class="modelled-note">Timing modelled, not observed: the queueing, KV and '
            "interference axes judge the engine model's run of these arrivals and lengths.</p>")


def _modelled_banner(doc: dict[str, Any]) -> str:
    """The banner under the header of a report whose timing is modelled: the engine stated."""
    run = modelled(doc)
    if run is None:
        return ""
    engine = run.get("engine") or {}
    pd_split = engine.get("pd")
    instances = (f"{pd_split[0]} prefill + {pd_split[1]} decode" if pd_split
                 else str(engine.get("instances")))
    settings = [("model", run.get("model")), ("GPU", run.get("gpu")),
                ("max_num_seqs", engine.get("max_num_seqs")),
                ("KV blocks", num(engine.get("kv_blocks"), fmt.count)),
                ("block size", f"{engine.get('block_size_tokens')} tokens"),
                ("max batched tokens", num(engine.get("max_batched_tokens"), fmt.count)),
                ("chunked prefill", "on" if engine.get("chunked_prefill") else "off"),
                ("prefix caching", "on" if engine.get("prefix_caching") else "off"),
                ("instances", instances)]
    items = " · ".join(f"{escape(k)} {escape(str(v))}" for k, v in settings)
    return (f'<section id="modelled" class="modelled"><p><strong>Modelled timing.</strong> '
            f"{escape(str(run.get('basis') or ''))}. Engine: {items}.</p></section>")


def _tenants(doc: dict[str, Any], side: str = "") -> str:
    reuse = doc.get("prefix_reuse")
    tenants = reuse.get("per_tenant") if isinstance(reuse, dict) else None
    if not tenants:
        return ""
    rows = [[escape(str(t["label"])), fmt.count(t["requests"]), fmt.tokens(t["prompt_tokens"]),
             fmt.tokens(t["hit_tokens"]), fmt.pct(t["hit_ratio"])] for t in tenants]
    return (f"<section id=\"{_anchor('tenants', side)}\"><h2>Per tenant</h2>"
            + table(["tenant", "requests", "prompt tokens", "hit tokens", "hit ratio"], rows,
                     numeric={1, 2, 3, 4}) + "</section>")


def _ledger(doc: dict[str, Any], side: str = "") -> str:
    ledger = doc.get("ledger")
    if not isinstance(ledger, list) or not ledger:
        return ""
    rows = [[escape(str(e.get("remedy"))), escape(str(e.get("axis"))),
             escape(", ".join(e.get("triggered_by") or [])),
             "<br>".join(quantity(q) for q in e.get("saves") or []) or fmt.MISSING,
             "<br>".join(quantity(q) for q in e.get("adds") or []) or fmt.MISSING]
            for e in ledger]
    return (f"<section id=\"{_anchor('ledger', side)}\">"
            "<h2>Ledger: what each remedy saves and adds</h2>"
            + table(["remedy", "axis", "rules", "saves", "adds"], rows) + "</section>")


def _findings(doc: dict[str, Any], side: str = "") -> str:
    findings = doc.get("findings")
    if not isinstance(findings, list) or not findings:
        return ""
    rows = [[escape(str(f.get("id"))),
             f'<span class="status {escape(str(f.get("severity")))}">'
             f"{escape(str(f.get('severity')))}</span>",
             escape(str(f.get("axis"))), escape(str(f.get("message") or f.get("title")))]
            for f in findings]
    return (f"<section id=\"{_anchor('findings', side)}\"><h2>Findings</h2>"
            + table(["rule", "severity", "axis", "message"], rows) + "</section>")


def _profile(doc: dict[str, Any], side: str = "") -> str:
    p = doc.get("profile")
    if not isinstance(p, dict):
        return ""
    a, lengths, pop = p.get("arrivals") or {}, p.get("lengths") or {}, p.get("population") or {}
    rows = [
        ["requests", fmt.count(a.get("requests"))],
        ["span", num(a.get("span_s"), fmt.seconds)],
        ["mean rate", f"{num(a.get('mean_rate_rps'))} req/s"],
        ["peak-to-mean (1 s bins)", num(a.get("peak_to_mean"))],
        ["interarrival CV", num(a.get("interarrival_cv"))],
        ["prompt tokens p50 / p99", " / ".join(
            num((lengths.get("prompt_len") or {}).get(k), fmt.count) for k in ("p50", "p99"))],
        ["output tokens p50 / p99", " / ".join(
            num((lengths.get("output_len") or {}).get(k), fmt.count) for k in ("p50", "p99"))],
        ["tenants / sessions", f"{num(pop.get('tenants'), fmt.count)} / "
                               f"{num(pop.get('sessions'), fmt.count)}"],
    ]
    if p.get("successful_requests") is not None:  # lengths and pictures leave failures out
        rows.append(["lengths and latencies", f"successful requests only: "
                     f"{fmt.count(p['successful_requests'])} of {fmt.count(p.get('requests'))}"])
    return (f"<section id=\"{_anchor('profile', side)}\"><h2>Workload</h2>"
            + table(["", "value"], [[escape(k), escape(v)] for k, v in rows], numeric={1})
            + "</section>")


def _view_sections(sections: Mapping[str, Any], side: str = "") -> list[str]:
    """A `<section>` per section that has a view the page does not draw its own way."""
    out = []
    for name, section in sections.items():
        target = None if section is None else view_name(name, section)
        if target is not None and target not in OWN_VIEWS:
            body = draw(load_view(target)(section))
            if body:
                out.append(f'<section id="{escape(_anchor(name, side))}">{body}</section>')
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
            return _titled(block.title, table(list(block.header), rows, numeric={1}))
        case Grid():
            rows = [[escape(c.text if isinstance(c, Styled) else c) for c in row]
                    for row in block.rows]
            aligns = [c.align for c in block.columns] if block.columns else (
                ["left"] + ["right"] * (len(block.header) - 1))
            numeric = {k for k, a in enumerate(aligns) if a == "right"}
            return _titled(block.title, table(list(block.header), rows, numeric=numeric))
        case Notes():
            items = "".join(f"<li>{escape(n)}</li>" for n in block.notes)
            return f'<ul class="notes">{items}</ul>' if items else ""
        case Panel():
            return f"<h3>{escape(block.title)}</h3>{draw(list(block.blocks))}"
    raise TypeError(f"no HTML drawing for {type(block).__name__}")


def _titled(title: str | None, body: str) -> str:
    return (f"<h3>{escape(title)}</h3>" if title else "") + body


def _pictures(workload: list[str], others: list[str]) -> str:
    """The workload group, then the cache and timing pictures; those not drawn in one line."""
    groups = [(title, [f for f in figures if not isinstance(f, NotDrawn)])
              for title, figures in (("Workload", workload),
                                     ("Prefix cache and timing", others))]
    if not workload and not others:
        return ""
    drawn = "".join(f"<h3>{title}</h3><div class=\"grid\">{''.join(figures)}</div>"
                    for title, figures in groups if figures)
    return (f"<section id=\"plots\"><h2>Pictures</h2>{drawn}"
            f"{not_drawn_line(workload + others)}</section>")


def _notes(inp: dict[str, Any], side: str = "") -> str:
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in inp.get("notes") or [])
    return (f"<section id=\"{_anchor('notes', side)}\"><h2>Notes</h2><ul class=\"notes\">"
            f"{notes}</ul></section>") if notes else ""


def _input_line(inp: dict[str, Any]) -> str:
    return f"{fmt.count(inp['requests'])} requests · format {escape(str(inp['format']))}"


def render_html(report: Report) -> str:
    """The whole page; sections a report lacks are left out or say why they are missing.

    A report with a run before (`trace report AFTER --before BEFORE`) is drawn as the diff
    on top and the two runs side by side below.
    """
    doc = report.to_dict()
    before = report.sections.get("before")
    if isinstance(before, Mapping) and isinstance(doc.get("diff"), dict):
        return _two_runs(report, doc, before)
    inp = doc["input"]
    title = f"yaotu-trace {report.command}: {inp['path']}"
    body = [
        f"<header><h1>{escape(title)}</h1><p>{_input_line(inp)}"
        f" · yaotu-trace {escape(str(doc['tool']['version']))}</p></header><main>",
        _modelled_banner(doc),
        _verdict(doc),
        _pictures(workload_figures(doc), timing_figures(doc)),
        _tenants(doc),
        _ledger(doc),
        _findings(doc),
        _profile(doc),
        *_view_sections(report.sections),
        _notes(inp),
        "</main>",
    ]
    return _page(title, body)


def _two_runs(report: Report, doc: dict[str, Any], before: Mapping[str, Any]) -> str:
    """The diff (conditions, axis changes, the ledger of the change), then each picture and
    table of the run before next to the same one of the run after, each pair of pictures on
    shared axes."""
    before_doc: dict[str, Any] = to_builtins(before)
    after_sections = {k: v for k, v in report.sections.items() if k not in TWO_RUN_KEYS}
    sides = (("before", before_doc, before), ("after", doc, after_sections))
    title = (f"yaotu-trace {report.command}: {before_doc['input']['path']} → "
             f"{doc['input']['path']}")
    head = [[f"<h2>{side.title()}: {escape(str(d['input']['path']))}</h2>"
             f"<p>{_input_line(d['input'])}</p>" for side, d, _ in sides],
            [_verdict(d, side) for side, d, _ in sides]]
    rows = [[build(d, side) for side, d, _ in sides]
            for build in (_profile, _tenants, _ledger, _findings)]
    rows += [list(pair) for pair in zip_longest(
        *(_view_sections(s, side) for side, _, s in sides), fillvalue="")]
    rows += [[_notes(d["input"], side) for side, d, _ in sides]]
    sides_css = [side for side, _, _ in sides]
    body = [
        f"<header><h1>{escape(title)}</h1><p>before and after a change · yaotu-trace "
        f"{escape(str(doc['tool']['version']))}</p></header><main>",
        diff_sections(doc["diff"]),
        '<section id="runs"><h2>The two runs side by side</h2><p class="note">Each run as '
        "trace report shows it alone, on all its requests; each pair of pictures shares its "
        "axes, so the same height is the same value on both sides (a time axis of the trace "
        "clock, and a log length axis next to a linear one, stay each run's own).</p>"
        + _pair_rows(head, sides_css)
        + _paired_pictures(before_doc, doc, sides_css)
        + _pair_rows(rows, sides_css) + "</section>",
        "</main>",
    ]
    return _page(title, body)


def _pair_rows(rows: list[list[str]], sides: list[str]) -> str:
    """Each row as its cells side by side; rows empty on both sides left out."""
    return "".join('<div class="pair">' + "".join(
        f'<div class="side {side}">{cell}</div>' for side, cell in zip(sides, row, strict=True))
        + "</div>" for row in rows if any(row))


def _paired_pictures(before: dict[str, Any], after: dict[str, Any], sides: list[str]) -> str:
    """The workload group, then the cache and timing pictures, each pair on shared axes. A
    pair neither run can draw goes to its run's "Not drawn" line; one only one run can draw
    says, on the other side, why that run cannot."""
    groups = (("Workload", workload_pairs(before, after)),
              ("Prefix cache and timing", timing_pairs(before, after)))
    out: list[str] = []
    missing: tuple[list[str], list[str]] = ([], [])
    for title, pairs in groups:
        rows = []
        for pair in pairs:
            if all(isinstance(f, NotDrawn) for f in pair):
                for side_missing, f in zip(missing, pair, strict=True):
                    side_missing.append(f)
                continue
            rows.append([said(f.caption, f"Not drawn for this run: {f.why}.")
                         if isinstance(f, NotDrawn) else f for f in pair])
        if rows:
            out.append(f"<h3>{title}</h3>" + _pair_rows(rows, sides))
    lines = [not_drawn_line(m, fill=TWO_RUN_SIMULATE_HINT) for m in missing]
    return "".join(out) + _pair_rows([lines], sides)


def _page(title: str, body: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<link rel=\"icon\" href=\"data:,\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + f"<script>{SCRIPT}</script></body></html>\n"
    )
