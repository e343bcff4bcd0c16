"""The `findings` section (`trace diagnose`): every rule that fired, with its fix.

The console shows each finding inside its axis' panel (`views/axes.py`); Markdown lists them
in one table.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render.blocks import MARKDOWN, Grid, Heading, Line, View


def view(section: Any) -> View:
    """Markdown only: a table of id, severity, axis, message and fix."""
    findings = to_builtins(section)
    head = Heading(text="Findings", only=MARKDOWN)
    if not findings:
        return [head, Line(text="No rule fired.", only=MARKDOWN)]
    return [head, Grid(only=MARKDOWN,
                       header=["id", "severity", "axis", "finding", "fix"],
                       rows=[[f["id"], f["severity"], f["axis"], f["message"], f["fix"]]
                             for f in findings])]
