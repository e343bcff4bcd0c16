"""Markdown for `trace simulate` and `trace compare`."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import simulate_view as view
from yaotu_trace.render.markdown import table


def simulation_lines(section: Any) -> list[str]:
    """Deployment, outcome, latency percentiles, work ledger, calibration, notes."""
    s = view.as_dict(section)
    lines = ["### Simulated deployment", ""]
    lines += table(["setting", "value"], [list(r) for r in view.config_rows(s)])
    lines += ["", "#### Outcome", ""]
    lines += table(["metric", "value"], [list(r) for r in view.outcome_rows(s)])
    lines += ["", "#### Latency", ""]
    lines += table(view.LATENCY_HEADER, view.latency_rows(s))
    lines += ["", "#### Work", ""]
    lines += table(["work", "amount"], [list(r) for r in view.work_rows(s)])
    inst = view.instance_rows(s)
    if inst:
        lines += ["", "#### Per instance", ""]
        lines += table(view.INSTANCE_HEADER, inst)
    cal = view.calibration_rows(s)
    if cal:
        lines += ["", "#### Step-time fit (--calibrate)", ""]
        lines += table(["term", "value"], [list(r) for r in cal])
    lines += [""] + [f"> note: {note}" for note in s.get("notes", [])]
    return lines


def comparison_lines(section: Any) -> list[str]:
    """Scenarios side by side, then per remedy the work saved and added."""
    c = view.as_dict(section)
    header, rows = view.side_by_side(c)
    lines = ["### Scenarios (same requests)", ""]
    lines += table(header, rows)
    for ledger in c["ledgers"]:
        title = f"{ledger['scenario']} against {ledger['baseline']}"
        for key, what in (("saved", "work saved"), ("added", "work added")):
            lines += ["", f"#### {title}: {what}", ""]
            rows = view.ledger_rows(ledger[key])
            lines += table(view.LEDGER_HEADER, rows) if rows else ["(none)"]
    notes = sorted({n for s in c["scenarios"] for n in s.get("notes", [])})
    lines += [""] + [f"> note: {note}" for note in notes]
    return lines
