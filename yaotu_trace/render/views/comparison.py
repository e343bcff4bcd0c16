"""`trace compare`: scenarios side by side, then per remedy the work saved and added."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import CONSOLE, MARKDOWN, Block, Grid, Heading, Line, Notes, View
from yaotu_trace.render.views.simulation import as_dict, work_value


def _p(d: dict[str, Any], key: str) -> str:
    return fmt.seconds(d.get(key)) if d and d.get("count") else "–"


def side_by_side(c: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per scenario."""
    runs = c["scenarios"]
    header = ["metric", *(r["scenario"] for r in runs)]
    rows: list[list[str]] = []

    def add(label: str, values: list[str]) -> None:
        rows.append([label, *values])

    add("deployment", [f"{r['instances']} × {r['gpu']}" for r in runs])
    add("chunked prefill", ["on" if r["chunked_prefill"] else "off" for r in runs])
    for key in ("p50", "p90", "p99"):
        add(f"TTFT {key}", [_p(r["ttft_s"], key) for r in runs])
    for key in ("p50", "p90", "p99"):
        add(f"inter-token {key}", [_p(r["itl_s"], key) for r in runs])
    add("largest inter-token gap", [fmt.seconds(r["max_itl_s"]) for r in runs])
    add("TPOT p50", [_p(r["tpot_s"], "p50") for r in runs])
    add("throughput (req/s)", [fmt.num(r["throughput_rps"]) for r in runs])
    add("output tok/s", [fmt.num(r["output_tokens_per_s"]) for r in runs])
    add("preemptions", [fmt.count(r["preemptions"]) for r in runs])
    add("prefix hit ratio", [fmt.pct(r["hit_ratio"]) for r in runs])
    add("GPU-seconds busy", [fmt.seconds(r["work"]["gpu_busy_s"]) for r in runs])
    add("GPU-seconds provisioned", [fmt.seconds(r["work"]["gpu_provisioned_s"]) for r in runs])
    add("KV bytes over the link", [fmt.bytes_(r["work"]["kv_transfer_bytes"]) for r in runs])
    add("HBM bytes moved", [fmt.bytes_(r["work"]["hbm_bytes"]) for r in runs])
    return header, rows


LEDGER_HEADER = ["work", "baseline", "this scenario", "change"]


def ledger_rows(entries: list[dict[str, Any]]) -> list[list[str]]:
    """Rows of one ledger side (saved or added)."""
    rows = []
    for e in entries:
        ratio = e.get("change_ratio")
        change = work_value(e["unit"], e["change"])
        if ratio is not None:
            change += f" ({'+' if ratio > 0 else ''}{100 * ratio:.1f} %)"
        rows.append([e["metric"], work_value(e["unit"], e["baseline"]),
                     work_value(e["unit"], e["value"]), change])
    return rows


def view(section: Any) -> View:
    """The side-by-side table, each ledger's saved and added work, then the scenarios' notes."""
    c = as_dict(section)
    header, rows = side_by_side(c)
    out: list[Block] = [Heading(text="Scenarios (same requests)"), Grid(header=header, rows=rows)]
    for ledger in c["ledgers"]:
        title = f"{ledger['scenario']} against {ledger['baseline']}"
        for key, what in (("saved", "work saved"), ("added", "work added")):
            out.append(Heading(text=f"{title}: {what}", level=4))
            entries = ledger_rows(ledger[key])
            if entries:
                out.append(Grid(header=LEDGER_HEADER, rows=entries))
            else:
                out += [Line(text="  (none)", only=CONSOLE),
                        Line(text="(none)", only=MARKDOWN)]
    notes = sorted({n for s in c["scenarios"] for n in s.get("notes", [])})
    out.append(Notes(notes=notes))
    return out
