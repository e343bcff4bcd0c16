"""The `before` and `diff` sections of `trace report AFTER --before BEFORE` in a terminal or in
Markdown: the diff drawn as `trace diff` draws it, and the run before by its verdict.

The HTML page draws both its own way (the two runs side by side, `render/html.py`); here the
run after's sections come first as in a one-run report, then these two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from yaotu_trace.render.blocks import Block, Heading, Line, View
from yaotu_trace.render.views import load_view

# The sections of `trace diff`, in the order it shows them.
DIFF_SECTIONS = ("comparable", "conditions", "fairness", "matched", "axes", "ledger")


def view(section: Mapping[str, Any]) -> View:
    """The diff (a mapping with `conditions`) or the run before (one with `input`)."""
    if "conditions" in section:
        return _diff(section)
    return _before(section)


def _diff(diff: Mapping[str, Any]) -> View:
    draw = load_view("diff")
    out: list[Block] = [Heading(text="Change since the run before")]
    for key in DIFF_SECTIONS:
        if diff.get(key) is not None:
            out += draw(diff[key])
    return out


def _before(before: Mapping[str, Any]) -> View:
    path = before["input"].path
    out: list[Block] = [Heading(text=f"The run before: {path}",
                                markdown=f"The run before: `{path}`")]
    if before.get("verdict") is not None:
        out += [b for b in load_view("verdict")(before["verdict"]) if not isinstance(b, Heading)]
    else:
        out.append(Line(text="not diagnosed", style="dim"))
    return out
