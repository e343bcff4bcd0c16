"""Markdown views of the `trace diagnose` sections: axes, verdict, ledger and findings."""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.console_diagnose import AXIS_METRICS, show
from yaotu_trace.render.markdown import table


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict_lines(section: Any) -> list[str]:
    """The principal bottleneck, why, and the fix order."""
    v = to_builtins(section)
    lines = ["### Verdict", "", f"**{_cell(v['summary'])}**", "", _cell(v["reason"])]
    if v["fix_order"]:
        lines += ["", "Fix order: " + " → ".join(v["fix_order"])]
    return lines


def axes_lines(section: Any) -> list[str]:
    """A status table, then each axis' headline metrics and what is missing."""
    axes = to_builtins(section)
    lines = ["### Axes", ""]
    lines += table(["axis", "status", "cause", "score", "sources", "rules"], [
        [a["name"], a["status"], a["cause"] or fmt.MISSING, fmt.pct(a["score"]),
         ", ".join(a["sources"]) or fmt.MISSING,
         ", ".join(f["id"] for f in a["findings"]) or fmt.MISSING]
        for a in axes
    ])
    for a in axes:
        name = a["name"]
        metrics = a.get("metrics") or {}
        rows = [[label, show(metrics.get(key), how)]
                for key, label, how in AXIS_METRICS.get(name, ())
                if metrics.get(key) is not None]
        lines += ["", f"#### {name}: {a['status']}", ""]
        if rows:
            lines += table(["metric", "value"], rows)
        windows = metrics.get("peak_windows") or []
        if windows:
            lines += ["", f"Busiest {fmt.num(metrics.get('window_s'))} s windows:", ""]
            lines += table(["start", "offered tok/s", "served tok/s", "rho", "queue start → end"], [
                [fmt.seconds(w["start_s"]), fmt.num(w["offered_tokens_per_s"]),
                 fmt.num(w["achieved_tokens_per_s"]), fmt.num(w["rho"]),
                 f"{fmt.count(w['waiting_at_start'])} → {fmt.count(w['waiting_at_end'])}"]
                for w in windows])
        hot = metrics.get("hot_prefixes") or []
        if hot:
            lines += ["", "Hot prefixes (reuse lost the most):", ""]
            lines += table(["prefix tokens", "recomputed", "requests", "why", "example"], [
                [fmt.count(h.get("prefix_tokens")), fmt.tokens(h.get("recomputed_tokens")),
                 fmt.count(h.get("times")),
                 _cell(", ".join(f"{k} {fmt.tokens(v)}"
                                 for k, v in (h.get("by_reason_tokens") or {}).items() if v))
                 or fmt.MISSING, _cell(h.get("example_request_id"))]
                for h in hot])
        extra = ([f"- missing: {_cell(m)}" for m in a.get("missing", ())]
                 + [f"- next: {_cell(n)}" for n in a.get("next_steps", ())]
                 + [f"- note: {_cell(n)}" for n in a.get("notes", ())])
        if extra:
            lines += ["", *extra]
    return lines


def findings_lines(section: Any) -> list[str]:
    """Every fired rule with its evidence and fix."""
    findings = to_builtins(section)
    lines = ["### Findings", ""]
    if not findings:
        return [*lines, "No rule fired."]
    lines += table(["id", "severity", "axis", "finding", "fix"], [
        [f["id"], f["severity"], f["axis"], _cell(f["message"]), _cell(f["fix"])]
        for f in findings
    ])
    return lines


def principal_lines(section: Any) -> list[str]:
    """Nothing: the verdict names the principal axis."""
    return []


def ledger_lines(section: Any) -> list[str]:
    """Each candidate remedy: the work it saves and the work it adds."""
    entries = to_builtins(section)
    lines = ["### Remedy ledger", ""]
    if not entries:
        return [*lines, "No remedy is indicated by the findings."]
    rows = []
    for e in entries:
        for kind in ("saves", "adds"):
            for q in e[kind]:
                value = show(q["value"], q["unit"]) if q["value"] is not None else fmt.MISSING
                rows.append([e["remedy"], kind, q["name"], value, _cell(q["basis"])])
    lines += table(["remedy", "", "work", "estimate", "basis"], rows)
    return lines
