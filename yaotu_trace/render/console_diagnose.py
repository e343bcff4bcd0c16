"""Rich views of the `trace diagnose` sections: axes, verdict, ledger and findings."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.console import heading, kv_table

# Headline metrics shown per axis: (key, label, formatter name).
AXIS_METRICS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "queueing": (
        ("queue_share_of_ttft", "queue share of TTFT", "pct"),
        ("queue_share_of_latency", "queue share of latency", "pct"),
        ("peak_rho", "peak offered / service rate", "num"),
        ("mean_rho", "mean offered / service rate", "num"),
        ("interarrival_cv", "inter-arrival CV", "num"),
        ("gpu_busy_fraction", "GPU busy", "pct"),
        ("idle_while_waiting_fraction", "idle while requests wait", "pct"),
        ("step_fill_p75", "P75 step tokens / budget", "pct"),
        ("running_fill_p75", "P75 running / seq cap", "pct"),
        ("kv_usage_p75", "P75 KV usage", "pct"),
    ),
    "kv_memory": (
        ("preemptions_total", "preemptions", "count"),
        ("preempted_request_share", "preempted requests", "pct"),
        ("recomputed_tokens", "recomputed tokens (est.)", "tokens"),
        ("recompute_token_fraction", "recomputed share of all tokens", "pct"),
        ("kv_usage_mean", "mean KV usage", "pct"),
        ("kv_usage_at_preemption", "KV usage at preemption", "pct"),
        ("peak_demand_tokens", "peak KV demand", "tokens"),
        ("kv_capacity_tokens", "KV capacity", "tokens"),
        ("block_waste_fraction", "internal block waste", "pct"),
        ("shared_block_fraction", "prefix-shared blocks", "pct"),
    ),
    "prefix_reuse": (
        ("ideal_hit_rate", "ideal hit rate", "pct"),
        ("achievable_hit_rate", "achievable hit rate (replay)", "pct"),
        ("observed_hit_rate", "observed hit rate", "pct"),
        ("recomputed_reusable_tokens", "recomputed reusable tokens", "tokens"),
        ("recomputed_share_of_prefill", "share of prefill work", "pct"),
        ("recomputed_basis", "recomputed counted as", "text"),
        ("key_loss_share", "lost to cache keys", "pct"),
        ("routing_loss_share", "lost to routing", "pct"),
        ("capacity_loss_share", "lost to capacity", "pct"),
    ),
    "pd_interference": (
        ("median_decode_step_s", "median decode step", "seconds"),
        ("stall_threshold_s", "stall threshold", "seconds"),
        ("stalls", "stalls", "count"),
        ("prefill_coincidence", "stalls during prefill", "pct"),
        ("decode_seconds_lost", "decode-seconds lost", "seconds"),
        ("interference_share", "share of decode time", "pct"),
    ),
}

MISSING = fmt.MISSING
_UNIT_FORMAT = {
    "tokens": fmt.tokens,
    "s": fmt.seconds,
    "bytes": fmt.bytes_,
    "bytes/s": lambda v: MISSING if v is None else f"{fmt.bytes_(v)}/s",
    "ratio": fmt.pct,
    "FLOP": fmt.flops,
}
STATUS_STYLE = {"bottleneck": "bold red", "warning": "yellow", "ok": "green",
                "insufficient_data": "dim"}


def show(value: Any, how: str) -> str:
    """Format one metric value by a formatter name or unit."""
    if value is None:
        return MISSING
    if how == "pct":
        return fmt.pct(value)
    if how == "count":
        return fmt.count(value)
    if how in ("steps", "requests", "preemptions") and isinstance(value, int | float):
        return f"{fmt.count(value)} {how}"
    if how == "num":
        return fmt.num(value)
    if how == "tokens":
        return fmt.tokens(value)
    if how == "seconds":
        return fmt.seconds(value)
    if isinstance(value, str):
        return value
    formatter = _UNIT_FORMAT.get(how)
    if formatter is not None:
        return formatter(value)
    if isinstance(value, float):
        return f"{fmt.num(value)} {how}".strip()
    return f"{value} {how}".strip()


def verdict_renderables(section: Any) -> list[RenderableType]:
    """The verdict in one line (the table output's first line), then why and the fix order."""
    v = to_builtins(section)
    principal = v["principal_axis"]
    out: list[RenderableType] = [Text(v["summary"], style="bold red" if principal else "bold")]
    out.append(Text(v["reason"], style="dim"))
    if v["fix_order"]:
        out.append(Text("fix order: " + " → ".join(v["fix_order"]), style="dim"))
    return out


def principal_renderables(section: Any) -> list[RenderableType]:
    """Nothing: the principal axis is named by the verdict line."""
    return []


def _evidence_text(e: dict[str, Any]) -> str:
    how = e["unit"] or "num"
    if how == "ratio" and isinstance(e["value"], int | float) and abs(e["value"]) > 1.5:
        how = "num"  # a load ratio such as rho, not a share
    text = f"{e['name']} = {show(e['value'], how)}"
    if e.get("comparison") and e.get("threshold") is not None:
        mark = "not met" if e.get("passed") is False else "met"
        text += f"  ({e['comparison']} {e['threshold_name']} {fmt.num(e['threshold'])}: {mark})"
    return text


def axis_panel(a: dict[str, Any]) -> Panel:
    """One axis: headline metrics, evidence, findings, what is missing and what to do next."""
    metrics = a.get("metrics") or {}
    parts: list[RenderableType] = []
    rows = [(label, show(metrics.get(key), how))
            for key, label, how in AXIS_METRICS.get(a["name"], ())
            if metrics.get(key) is not None]
    if rows:
        parts.append(kv_table(rows))
    if a["evidence"]:
        parts.append(Text("evidence", style="bold"))
        parts += [Text(f"  {_evidence_text(e)}") for e in a["evidence"]]
    for f in a["findings"]:
        parts.append(Text(f"{f['id']} {f['severity']}: {f['title']}",
                          style=STATUS_STYLE.get(f["severity"], "")))
        parts.append(Text(f"  fix: {f['fix']}", style="dim"))
    parts += [Text(f"missing: {m}", style="dim") for m in a.get("missing", ())]
    parts += [Text(f"next: {n}") for n in a.get("next_steps", ())]
    parts += [Text(f"note: {n}", style="yellow") for n in a.get("notes", ())]
    windows = metrics.get("peak_windows") or []
    if windows:
        win_table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                          title=f"busiest {fmt.num(metrics.get('window_s'))} s windows")
        for column in ("start", "offered tok/s", "served tok/s", "rho", "queue start → end"):
            win_table.add_column(column, justify="right")
        for w in windows:
            win_table.add_row(fmt.seconds(w["start_s"]), fmt.num(w["offered_tokens_per_s"]),
                              fmt.num(w["achieved_tokens_per_s"]), fmt.num(w["rho"]),
                              f"{fmt.count(w['waiting_at_start'])} → "
                              f"{fmt.count(w['waiting_at_end'])}")
        parts.append(win_table)
    hot = metrics.get("hot_prefixes") or []
    if hot:
        hot_table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="hot prefixes",
                          title_justify="left")
        for column in ("prefix tokens", "recomputed", "requests", "why", "example"):
            hot_table.add_column(column, justify="left" if column in ("why", "example")
                                 else "right")
        for h in hot:
            reasons = ", ".join(f"{k} {fmt.tokens(v)}"
                                for k, v in (h.get("by_reason_tokens") or {}).items() if v)
            hot_table.add_row(fmt.count(h.get("prefix_tokens")),
                              fmt.tokens(h.get("recomputed_tokens")), fmt.count(h.get("times")),
                              reasons or MISSING, str(h.get("example_request_id")))
        parts.append(hot_table)
    title = f"{a['name']}: {a['status']}" + (f" ({a['cause']})" if a["cause"] else "")
    if a["score"] is not None:
        title += f" — score {fmt.pct(a['score'])}"
    return Panel(Group(*parts) if parts else Text("no measurement", style="dim"),
                 title=Text(title, style=STATUS_STYLE.get(a["status"], "")),
                 title_align="left", box=box.ROUNDED)


def axes_renderables(section: Any) -> list[RenderableType]:
    """One rich panel per axis, in the fixed order."""
    return [axis_panel(a) for a in to_builtins(section)]


def findings_renderables(section: Any) -> list[RenderableType]:
    """Nothing: each finding is shown, with its evidence, inside its axis' panel."""
    return []


def _quantity(q: dict[str, Any]) -> tuple[str, str]:
    value = q["value"]
    text = show(value, q["unit"]) if value is not None else MISSING
    return q["name"], f"{text}  ({q['basis']})" if q["basis"] else text


def ledger_renderables(section: Any) -> list[RenderableType]:
    """Each candidate remedy: what it saves and what it adds."""
    entries = to_builtins(section)
    out: list[RenderableType] = [heading("Remedy ledger")]
    if not entries:
        out.append(Text("no remedy is indicated by the findings", style="dim"))
        return out
    for e in entries:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                      title=f"{e['remedy']}  (axis {e['axis']}; "
                      f"from {', '.join(e['triggered_by'])})",
                      title_justify="left")
        table.add_column("", no_wrap=True)
        table.add_column("work", no_wrap=True)
        table.add_column("estimate")
        for kind in ("saves", "adds"):
            for q in e[kind]:
                name, text = _quantity(q)
                table.add_row(kind, name, text)
        out.append(table)
        out += [Text(f"  caveat: {c}", style="dim") for c in e.get("caveats", ())]
    return out
