"""Rich tables for `trace simulate` and `trace compare`."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from yaotu_trace.render import simulate_view as view
from yaotu_trace.render.console import grid_table, heading, kv_table


def simulation_renderables(section: Any) -> list[RenderableType]:
    """Deployment, outcome, latency percentiles, work ledger, calibration, notes."""
    s = view.as_dict(section)
    out: list[RenderableType] = [
        heading("Simulated deployment"), kv_table(view.config_rows(s)),
        heading("Outcome"), kv_table(view.outcome_rows(s)),
        heading("Latency"), grid_table(view.LATENCY_HEADER, view.latency_rows(s)),
        heading("Work"), kv_table(view.work_rows(s)),
    ]
    inst = view.instance_rows(s)
    if inst:
        out += [heading("Per instance"), grid_table(view.INSTANCE_HEADER, inst)]
    cal = view.calibration_rows(s)
    if cal:
        out += [heading("Step-time fit (--calibrate)"), kv_table(cal)]
    out += [Text(f"note: {note}", style="yellow") for note in s.get("notes", [])]
    return out


def comparison_renderables(section: Any) -> list[RenderableType]:
    """Scenarios side by side, then per remedy the work saved and added."""
    c = view.as_dict(section)
    header, rows = view.side_by_side(c)
    out: list[RenderableType] = [heading("Scenarios (same requests)"), grid_table(header, rows)]
    for ledger in c["ledgers"]:
        title = f"{ledger['scenario']} against {ledger['baseline']}"
        for key, what in (("saved", "work saved"), ("added", "work added")):
            rows = view.ledger_rows(ledger[key])
            out.append(heading(f"{title}: {what}"))
            out.append(grid_table(view.LEDGER_HEADER, rows) if rows else Text("  (none)"))
    notes = {n for s in c["scenarios"] for n in s.get("notes", [])}
    out += [Text(f"note: {note}", style="yellow") for note in sorted(notes)]
    return out
