"""The `axes` section (`trace diagnose`): each axis' status, headline metrics and evidence.

The console frames each axis in a panel (metrics, evidence, findings, what is missing, what to
do next); Markdown opens with one status table and then lists each axis' metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import (
    CONSOLE,
    MARKDOWN,
    Block,
    Column,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    Panel,
    View,
)

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
        # The same where requests wait, each instance weighed by the queue it held: in a
        # cluster the P75s above are every instance's steps (a P/D cluster's: mostly decode's).
        ("step_fill_queued", "step tokens / budget where queued", "pct"),
        ("running_fill_queued", "running / seq cap where queued", "pct"),
        ("kv_usage_queued", "KV usage where queued", "pct"),
    ),
    "kv_memory": (
        ("preemptions_total", "preemptions", "count"),
        ("preempted_request_share", "preempted requests", "pct"),
        ("recomputed_tokens", "recomputed tokens", "tokens"),
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
        ("affinity_hit_rate", "hit rate, cache-aware routing", "pct"),
        ("affinity_gain_share", "gain over this routing", "pct"),
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
# The pd_interference panel's placement rows, for a disaggregated deployment.
PLACEMENT_METRICS = (
    ("disaggregated_requests", "handed-off requests", "count"),
    ("transfer_ttft_share", "KV transfer share of TTFT", "pct"),
    ("prefill_wait_share", "prefill-pool wait share of TTFT", "pct"),
    ("decode_wait_share", "decode-pool wait share of TTFT", "pct"),
    ("prefill_busy_share", "prefill pool busy", "pct"),
    ("decode_busy_share", "decode pool load", "pct"),
    ("failure_share", "failed or fallen back", "pct"),
)

MISSING = fmt.MISSING
_UNIT_FORMAT: dict[str, Callable[[float | None], str]] = {
    "tokens": fmt.tokens,
    "s": fmt.seconds,
    "bytes": fmt.bytes_,
    "bytes/s": fmt.bytes_rate,
    "ratio": fmt.pct,
    "FLOP": fmt.flops,
}
STATUS_STYLE = {"bottleneck": "bold red", "warning": "yellow", "ok": "green",
                "insufficient_data": "dim"}


def show(value: Any, how: str) -> str:
    """Format one metric value by a formatter name or unit."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
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
    formatter = _UNIT_FORMAT.get(how)
    if formatter is not None:
        return formatter(value)
    if isinstance(value, float):
        return f"{fmt.num(value)} {how}".strip()
    return f"{value} {how}".strip()


def _evidence_text(e: dict[str, Any]) -> str:
    how = e["unit"] or "num"
    if how == "ratio" and isinstance(e["value"], int | float) and abs(e["value"]) > 1.5:
        how = "num"  # a load ratio such as rho, not a share
    text = f"{e['name']} = {show(e['value'], how)}"
    if e.get("comparison") and e.get("threshold") is not None:
        mark = "not met" if e.get("passed") is False else "met"
        text += f"  ({e['comparison']} {e['threshold_name']} {fmt.num(e['threshold'])}: {mark})"
    return text


WINDOW_HEADER = ["start", "offered tok/s", "served tok/s", "rho", "queue start → end"]
INSTANCE_HEADER = ["instance", "requests", "work", "queue s", "of queue", "waiting",
                   "busy", "seat fill", "preempted"]
POOL_HEADER = ["pool", "instances", "wait of TTFT", "busy or load"]
HOT_HEADER = ["prefix tokens", "recomputed", "requests", "why", "example"]


def view(section: Any) -> View:
    """One panel per axis in the console; a status table, then per axis its tables, in
    Markdown."""
    axes = to_builtins(section)
    out: list[Block] = [_panel(a) for a in axes]
    out += [Heading(text="Axes", only=MARKDOWN), Grid(only=MARKDOWN, header=[
        "axis", "status", "cause", "score", "sources", "rules"], rows=[
        [a["name"], a["status"], a["cause"] or fmt.MISSING, fmt.pct(a["score"]),
         ", ".join(a["sources"]) or fmt.MISSING,
         ", ".join(f["id"] for f in a["findings"]) or fmt.MISSING] for a in axes])]
    for a in axes:
        out += _markdown_axis(a)
    return out


def metric_rows(a: dict[str, Any]) -> list[tuple[str, str]]:
    """The axis' headline metrics that were measured, labelled and formatted."""
    metrics = a.get("metrics") or {}
    rows = [(label, show(metrics.get(key), how))
            for key, label, how in AXIS_METRICS.get(a["name"], ())
            if metrics.get(key) is not None]
    placement = metrics.get("placement") or {}
    rows += [(label, show(placement.get(key), how)) for key, label, how in PLACEMENT_METRICS
             if placement.get(key) is not None]
    return rows


def window_rows(metrics: dict[str, Any]) -> list[list[str]]:
    """The busiest windows of offered against served load (queueing)."""
    return [[fmt.clock(w["start_s"]), fmt.num(w["offered_tokens_per_s"]),
             fmt.num(w["achieved_tokens_per_s"]), fmt.num(w["rho"]),
             f"{fmt.count(w['waiting_at_start'])} → {fmt.count(w['waiting_at_end'])}"]
            for w in metrics.get("peak_windows") or []]


def instance_rows(metrics: dict[str, Any]) -> tuple[list[list[str]], str]:
    """Each instance's share of the work, the queue and the seats (queueing, several
    instances), and where the rows come from."""
    lb = metrics.get("load_balance") or {}
    rows = [[str(r["instance"]), fmt.count(r.get("requests")), fmt.pct(r.get("work_share")),
             fmt.num(r.get("queue_seconds")), fmt.pct(r.get("queue_share")),
             fmt.pct(r.get("waiting_share")), fmt.pct(r.get("busy_share")),
             fmt.pct(r.get("seat_fill")), fmt.count(r.get("preemptions"))]
            for r in lb.get("instances") or []]
    cap = lb.get("seat_cap")
    source = (f"instances from the {lb.get('source')}; each measure from the first of the "
              "request table, the step log and the metrics that has it; seat fill of "
              + ("an inferred " if lb.get("seat_cap_inferred") else "")
              + f"cap of {fmt.count(cap)}" if rows else "")
    return rows, source


def pool_rows(metrics: dict[str, Any]) -> tuple[list[list[str]], str]:
    """The two pools of a disaggregated run side by side (pd_interference), and where their
    numbers come from."""
    pm = metrics.get("placement") or {}
    if not pm:
        return [], ""
    rows = [["prefill", fmt.count(pm.get("prefill_instances")),
             fmt.pct(pm.get("prefill_wait_share")), fmt.pct(pm.get("prefill_busy_share"))],
            ["decode", fmt.count(pm.get("decode_instances")),
             fmt.pct(pm.get("decode_wait_share")), fmt.pct(pm.get("decode_busy_share"))]]
    source = ("waits from the request table (prefill: scheduled_s − arrival_s; decode: "
              "decode_start_s − first_token_s − kv_transfer_s) over the client's TTFT; busy or "
              f"load from the {pm.get('busy_source') or 'nothing that measures it'}")
    return rows, source


def hot_rows(metrics: dict[str, Any]) -> list[list[str]]:
    """The prefixes whose reuse is lost the most (prefix_reuse)."""
    rows = []
    for h in metrics.get("hot_prefixes") or []:
        reasons = ", ".join(f"{k} {fmt.tokens(v)}"
                            for k, v in (h.get("by_reason_tokens") or {}).items() if v)
        rows.append([fmt.count(h.get("prefix_tokens")), fmt.tokens(h.get("recomputed_tokens")),
                     fmt.count(h.get("times")), reasons or MISSING,
                     str(h.get("example_request_id"))])
    return rows


def _panel(a: dict[str, Any]) -> Panel:
    """The console panel of one axis: metrics, evidence, findings, missing, next, notes."""
    metrics = a.get("metrics") or {}
    parts: list[Block] = []
    rows = metric_rows(a)
    if rows:
        parts.append(KeyValues(rows=rows))
    if a["evidence"]:
        parts.append(Line(text="evidence", style="bold"))
        parts += [Line(text=f"  {_evidence_text(e)}") for e in a["evidence"]]
    for f in a["findings"]:
        parts.append(Line(text=f"{f['id']} {f['severity']}: {f['title']}",
                          style=STATUS_STYLE.get(f["severity"], "")))
        parts.append(Line(text=f"  fix: {f['fix']}", style="dim"))
    parts += [Line(text=f"missing: {m}", style="dim") for m in a.get("missing", ())]
    parts += [Line(text=f"next: {n}") for n in a.get("next_steps", ())]
    parts.append(Notes(notes=a.get("notes", ())))
    windows = window_rows(metrics)
    if windows:
        parts.append(Grid(header=WINDOW_HEADER, rows=windows,
                          columns=[Column(name=c) for c in WINDOW_HEADER],
                          title=f"busiest {fmt.num(metrics.get('window_s'))} s windows"))
    for rows_of, header, title in ((instance_rows, INSTANCE_HEADER, "instances"),
                                   (pool_rows, POOL_HEADER, "pools")):
        table, source = rows_of(metrics)
        if table:
            parts.append(Grid(header=header, rows=table, title=title, columns=[
                Column(name=c, align="left" if c in ("instance", "pool") else "right")
                for c in header]))
            parts.append(Line(text=f"  source: {source}", style="dim"))
    hot = hot_rows(metrics)
    if hot:
        parts.append(Grid(header=HOT_HEADER, rows=hot, title="hot prefixes", columns=[
            Column(name=c, align="left" if c in ("why", "example") else "right")
            for c in HOT_HEADER]))
    title = f"{a['name']}: {a['status']}" + (f" ({a['cause']})" if a["cause"] else "")
    if a["score"] is not None:
        title += f" — score {fmt.pct(a['score'])}"
    return Panel(title=title, style=STATUS_STYLE.get(a["status"], ""), blocks=parts, only=CONSOLE)


def _markdown_axis(a: dict[str, Any]) -> list[Block]:
    """One axis in Markdown: its metrics, busiest windows, hot prefixes and what is missing."""
    metrics = a.get("metrics") or {}
    rows = metric_rows(a)
    out: list[Block] = [Heading(text=f"{a['name']}: {a['status']}", level=4, only=MARKDOWN)]
    # Without metrics the heading keeps the blank line a table would have followed.
    out.append(KeyValues(rows=rows, only=MARKDOWN) if rows
               else Line(text="", only=MARKDOWN, tight=True))
    windows = window_rows(metrics)
    if windows:
        out += [Line(text=f"Busiest {fmt.num(metrics.get('window_s'))} s windows:",
                     only=MARKDOWN),
                Grid(header=WINDOW_HEADER, rows=windows, only=MARKDOWN)]
    for rows_of, header, title in ((instance_rows, INSTANCE_HEADER, "Instances"),
                                   (pool_rows, POOL_HEADER, "Pools")):
        table, source = rows_of(metrics)
        if table:
            out += [Line(text=f"{title} ({source}):", escape=True, only=MARKDOWN),
                    Grid(header=header, rows=table, only=MARKDOWN)]
    hot = hot_rows(metrics)
    if hot:
        out += [Line(text="Hot prefixes (reuse lost the most):", only=MARKDOWN),
                Grid(header=HOT_HEADER, rows=hot, only=MARKDOWN)]
    extra = ([f"- missing: {m}" for m in a.get("missing", ())]
             + [f"- next: {n}" for n in a.get("next_steps", ())]
             + [f"- note: {n}" for n in a.get("notes", ())])
    out += [Line(text=item, escape=True, only=MARKDOWN, tight=k > 0)
            for k, item in enumerate(extra)]
    return out
