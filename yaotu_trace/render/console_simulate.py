"""Rich tables for `trace simulate` and `trace compare`."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from yaotu_trace.render import simulate_view as view
from yaotu_trace.render.console import heading, kv_table


def _table(header: list[str], rows: list[list[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for k, name in enumerate(header):
        table.add_column(name, justify="left" if k == 0 else "right",
                         style="dim" if k == 0 else None, no_wrap=k == 0)
    for row in rows:
        table.add_row(*row)
    return table


def simulation_renderables(section: Any) -> list[RenderableType]:
    """Deployment, outcome, latency percentiles, work ledger, calibration, notes."""
    s = view.as_dict(section)
    out: list[RenderableType] = [
        heading("Simulated deployment"), kv_table(view.config_rows(s)),
        heading("Outcome"), kv_table(view.outcome_rows(s)),
        heading("Latency"), _table(view.LATENCY_HEADER, view.latency_rows(s)),
        heading("Work"), kv_table(view.work_rows(s)),
    ]
    inst = view.instance_rows(s)
    if inst:
        out += [heading("Per instance"), _table(view.INSTANCE_HEADER, inst)]
    cal = view.calibration_rows(s)
    if cal:
        out += [heading("Step-time fit (--calibrate)"), kv_table(cal)]
    out += [Text(f"note: {note}", style="yellow") for note in s.get("notes", [])]
    return out


def comparison_renderables(section: Any) -> list[RenderableType]:
    """Scenarios side by side, then per remedy the work saved and added."""
    c = view.as_dict(section)
    header, rows = view.side_by_side(c)
    out: list[RenderableType] = [heading("Scenarios (same requests)"), _table(header, rows)]
    for ledger in c["ledgers"]:
        title = f"{ledger['scenario']} against {ledger['baseline']}"
        for key, what in (("saved", "work saved"), ("added", "work added")):
            rows = view.ledger_rows(ledger[key])
            out.append(heading(f"{title}: {what}"))
            out.append(_table(view.LEDGER_HEADER, rows) if rows else Text("  (none)"))
    notes = {n for s in c["scenarios"] for n in s.get("notes", [])}
    out += [Text(f"note: {note}", style="yellow") for note in sorted(notes)]
    return out
