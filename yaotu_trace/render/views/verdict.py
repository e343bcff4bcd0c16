"""The `verdict` section (`trace diagnose`): the principal bottleneck, why, and the fix order.

The console prints it first, before the input summary: its first line is the answer.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render.blocks import CONSOLE, MARKDOWN, Block, Heading, Line, View


def view(section: Any) -> View:
    """The summary in bold (red when an axis is named), the reason, the fix order."""
    v = to_builtins(section)
    out: list[Block] = [
        Heading(text="Verdict", only=MARKDOWN),
        Line(text=v["summary"], style="bold red" if v["principal_axis"] else "bold",
             only=CONSOLE),
        Line(text=f"**{v['summary']}**", only=MARKDOWN, escape=True),
    ]
    if v.get("outcome"):
        out.append(Line(text=v["outcome"], style="bold", escape=True))
    out += [
        Line(text=v["reason"], style="dim", escape=True),
    ]
    if v["fix_order"]:
        out.append(Line(text="fix order: " + " → ".join(v["fix_order"]), style="dim",
                        markdown="Fix order: " + " → ".join(v["fix_order"])))
    return out
