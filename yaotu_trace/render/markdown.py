"""Markdown for pull-request comments and CI step summaries.

Like the console renderer it knows no section: it draws the blocks of each section's view
(`render/views/`), one blank line between blocks, and a generic table for a section with none.
Every table cell is escaped (`|`, newlines): a tenant, model or file name from the input can
hold either, and would break the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from yaotu_trace._visible import visible
from yaotu_trace.data.report import InputPair, Report, to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import (
    MARKDOWN,
    Block,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    Styled,
)
from yaotu_trace.render.views import find_view


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    lines = [f"## yaotu-trace {report.command}: `{report.input.path}`", ""]
    sides = ([("before ", report.input.before), ("after ", report.input.after)]
             if isinstance(report.input, InputPair) else [("", report.input)])
    for side, s in sides:
        lines += [f"{side}{fmt.count(s.requests)} requests, format `{s.format}`.", ""]
        lines += [f"> note: {side}{note}" for note in s.notes]
    for name, section in report.sections.items():
        if section is not None:
            lines += ["", *section_lines(name, section)]
    # Control characters from the input are escaped: the Markdown is often read in a terminal.
    return visible("\n".join(lines).rstrip() + "\n")


def section_lines(name: str, section: object) -> list[str]:
    """The section's view drawn, or the generic table when it has no view."""
    view = find_view(name, section)
    if view is None:
        return generic_lines(name, to_builtins(section))
    return draw(view(section))


def draw(blocks: Iterable[Block]) -> list[str]:
    """Markdown lines of the blocks meant for Markdown: a blank line before each but the first
    and the tight ones."""
    lines: list[str] = []
    first = True
    for block in blocks:
        if block.only not in (None, MARKDOWN):
            continue
        if not first and not block.tight:
            lines.append("")
        lines += _draw_block(block)
        first = False
    return lines


def _draw_block(block: Block) -> list[str]:
    match block:
        case Heading():
            return ["#" * block.level + " " + (block.markdown or block.text)]
        case Line():
            if block.markdown is not None:
                return [block.markdown]
            return [escape(block.text) if block.escape else block.text]
        case KeyValues():
            return table(list(block.header), [list(row) for row in block.rows])
        case Grid():
            cells = [[c.text if isinstance(c, Styled) else c for c in row] for row in block.rows]
            return table(list(block.header), cells, block.markdown_align)
        case Notes():
            return [f"> note: {note}" for note in block.notes]
    raise TypeError(f"no Markdown drawing for {type(block).__name__}")


def escape(text: Any) -> str:
    """A table cell or line that cannot break the table: `|` escaped, newlines joined."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def generic_lines(name: str, data: Any) -> list[str]:
    """Fallback: a two-column table of flattened keys."""
    rows: list[list[str]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and len(value) > 12:
            rows.append([path, f"[{len(value)} items]"])
        else:
            rows.append([path, "–" if value is None else str(value)])

    walk(data, "")
    return [f"### {name.replace('_', ' ').title()}", "", *table(["metric", "value"], rows)]


def table(header: Sequence[str], rows: Sequence[Sequence[str]],
          align: str | None = None) -> list[str]:
    """A Markdown table, every cell escaped; by default the first column left-aligned, the rest
    right-aligned (`align` gives "l" or "r" per column instead)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "".join("---|" if a == "l" else "---:|" for a in align)
    out = ["| " + " | ".join(escape(h) for h in header) + " |", rule]
    out += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
    return out
