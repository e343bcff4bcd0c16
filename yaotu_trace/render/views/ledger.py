"""The `ledger` section (`trace diagnose`): per candidate remedy, what it saves and adds."""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import CONSOLE, MARKDOWN, Block, Column, Grid, Heading, Line, View
from yaotu_trace.render.views.axes import show


def estimate(q: dict[str, Any]) -> str:
    """A quantity's value in its unit, or a dash when it was not estimated."""
    return show(q["value"], q["unit"]) if q["value"] is not None else fmt.MISSING


def view(section: Any) -> View:
    """A table per remedy in the console; one table of every estimate in Markdown."""
    entries = to_builtins(section)
    head = Heading(text="Remedy ledger")
    if not entries:
        return [head, Line(text="no remedy is indicated by the findings", style="dim",
                           markdown="No remedy is indicated by the findings.")]
    out: list[Block] = [head]
    columns = [Column(name="", align="left", no_wrap=True),
               Column(name="work", align="left", no_wrap=True),
               Column(name="estimate", align="left")]
    for e in entries:
        rows = []
        for kind in ("saves", "adds"):
            for q in e[kind]:
                text = estimate(q)
                rows.append([kind, q["name"], f"{text}  ({q['basis']})" if q["basis"] else text])
        out.append(Grid(header=["", "work", "estimate"], rows=rows, columns=columns,
                        title=f"{e['remedy']}  (axis {e['axis']}; "
                              f"from {', '.join(e['triggered_by'])})", only=CONSOLE))
        out += [Line(text=f"  caveat: {c}", style="dim", only=CONSOLE)
                for c in e.get("caveats", ())]
    out.append(Grid(only=MARKDOWN, header=["remedy", "", "work", "estimate", "basis"],
                    rows=[[e["remedy"], kind, q["name"], estimate(q), q["basis"]]
        for e in entries for kind in ("saves", "adds") for q in e[kind]]))
    return out
