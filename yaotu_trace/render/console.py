"""Rich tables for people. Width and colour are passed in; the terminal is never inspected here.

This module knows no section: it draws the blocks a section's view returns (`render/views/`)
and, for a section with no view, a generic key/value table so that it is never invisible.
Every string is drawn as text (`_text`): never read as rich markup, its control characters
escaped, because file names, tenants and models come from the input.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel as RichPanel
from rich.table import Table
from rich.text import Text

from yaotu_trace._visible import visible
from yaotu_trace.data.charts import TerminalCharts
from yaotu_trace.data.report import TELEMETRY_ONLY, InputPair, InputSummary, Report, to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import (
    CONSOLE,
    Block,
    Cell,
    Column,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    Panel,
    Styled,
)
from yaotu_trace.render.text_charts import chart_lines
from yaotu_trace.render.views import find_view

# Sections shown before the input summary.
LEAD_SECTIONS: tuple[str, ...] = ("verdict",)


def render_console(report: Report, *, width: int = 100, color: bool = False,
                   unicode: bool = True) -> str:
    """Render every section of the report as rich tables into a string; the report's charts,
    when it has them, after the input summary (ASCII ones unless `unicode`)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
    )
    # A lead section (the diagnose verdict) opens the output, before the input summary.
    for name in LEAD_SECTIONS:
        if report.sections.get(name) is not None:
            for renderable in section_renderables(name, report.sections[name]):
                console.print(renderable)
    for renderable in input_renderables(report.input, report.command):
        console.print(renderable)
    if report.charts is not None:
        for renderable in chart_renderables(report.charts, width, unicode=unicode):
            console.print(renderable)
    for name, section in report.sections.items():
        if section is None or name in LEAD_SECTIONS:
            continue
        for renderable in section_renderables(name, section):
            console.print(renderable)
    # Without colour rich writes no control character of its own: any left came from the
    # input past `_text`, and is escaped too.
    return buffer.getvalue() if color else visible(buffer.getvalue())


def _text(text: str, style: str = "", **kwargs: Any) -> Text:
    """`text` as rich text: no markup read in it, its control characters escaped."""
    return Text(visible(text), style=style, **kwargs)


def chart_renderables(charts: TerminalCharts, width: int, *, unicode: bool = True
                      ) -> list[RenderableType]:
    """The charts under a heading, each line as drawn (never wrapped nor read as markup)."""
    lines = chart_lines(charts, width, unicode=unicode)
    if not lines:
        return []
    return [heading("Charts"),
            *(_text(line, style="bold" if line and not line.startswith(" ") else "",
                    no_wrap=True, overflow="crop") for line in lines), Text("")]


def section_renderables(name: str, section: object) -> list[RenderableType]:
    """The section's view drawn, or the generic table when it has no view."""
    view = find_view(name, section)
    if view is None:
        return [generic_table(name, to_builtins(section))]
    return draw(view(section))


def draw(blocks: Iterable[Block]) -> list[RenderableType]:
    """Rich renderables of the blocks meant for the console, in order."""
    out: list[RenderableType] = []
    for block in blocks:
        if block.only in (None, CONSOLE):
            out += _draw_block(block)
    return out


def _draw_block(block: Block) -> list[RenderableType]:
    match block:
        case Heading():
            return [heading(block.text)]
        case Line():
            return [_text(block.text, style=block.style)]
        case KeyValues():
            return [kv_table(block.rows, title=block.title)]
        case Grid():
            return [_grid(block)]
        case Notes():
            return [_text(f"note: {note}", style="yellow") for note in block.notes]
        case Panel():
            parts = draw(block.blocks)
            body: RenderableType = Group(*parts) if parts else _text(block.empty, style="dim")
            return [RichPanel(body, title=_text(block.title, style=block.style),
                              title_align="left", box=box.ROUNDED)]
    raise TypeError(f"no console drawing for {type(block).__name__}")


def _cell(cell: Cell) -> Text:
    return _text(cell.text, style=cell.style) if isinstance(cell, Styled) else _text(cell)


def _grid(block: Grid) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=None if block.title is None else _text(block.title))
    columns = block.columns or _label_columns(block.header)
    for column in columns:
        # A value column too narrow folds its number onto a second line: cut with an ellipsis,
        # "14,382,7…" reads as a number it is not.
        overflow = column.overflow or ("fold" if column.align == "right" else "ellipsis")
        table.add_column(_text(column.name), justify=column.align,
                         style="dim" if column.dim else None, no_wrap=column.no_wrap,
                         overflow=overflow, ratio=column.ratio)
    for row in block.rows:
        table.add_row(*(_cell(c) for c in row))
    return table


def _label_columns(header: Sequence[str]) -> list[Column]:
    """The default grid: a dim label column on the left, right-aligned values."""
    return [Column(name=name, align="left", dim=True, no_wrap=True) if k == 0
            else Column(name=name) for k, name in enumerate(header)]


def heading(text: str) -> Text:
    """A section heading, bold, with a blank line before it."""
    return _text("\n" + text, style="bold")


def kv_table(rows: Iterable[tuple[str, str]], title: str | None = None) -> Table:
    """A two-column table of labelled values."""
    table = Table(box=box.SIMPLE_HEAD, show_header=False, title_justify="left", pad_edge=False,
                  title=None if title is None else _text(title))
    table.add_column("what", style="dim", no_wrap=True)
    table.add_column("value", justify="right")
    for label, value in rows:
        table.add_row(_text(label), _text(value))
    return table


def generic_table(name: str, data: Any, prefix: str = "") -> RenderableType:
    """Fallback for a section with no view: flattened key/value rows."""
    rows: list[tuple[str, str]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and len(value) > 12:
            rows.append((path, f"[{len(value)} items]"))
        else:
            rows.append((path, "–" if value is None else str(value)))

    walk(data, prefix)
    return Group(heading(name.replace("_", " ").title()), kv_table(rows))


def input_renderables(summary: InputSummary | InputPair, command: str
                      ) -> list[RenderableType]:
    """What was read, and any data-quality notes (of two runs, each under its name)."""
    if isinstance(summary, InputPair):
        return [Text(f"yaotu-trace {command}", style="bold"),
                Text("before", style="bold"), *input_renderables(summary.before, command)[1:],
                Text("after", style="bold"), *input_renderables(summary.after, command)[1:]]
    content = {
        "prompt_tokens": "token ids",
        "prompt_block_ids": f"block ids ({summary.source_block_size} tokens each)",
        None: "lengths only" if summary.requests else "none",
    }[summary.content]
    if not summary.columns:  # telemetry alone, or a benchmark summary: no request rows at all
        content = ("none (telemetry only)" if summary.format == TELEMETRY_ONLY
                   else "none (run-level summary)")
    rows = [
        ("file", summary.path),
        ("format", summary.format),
        ("requests", fmt.count(summary.requests)),
        ("prompt content", content),
    ]
    if summary.step_rows is not None:
        rows.append(("engine steps", fmt.count(summary.step_rows)))
    out: list[RenderableType] = [Text(f"yaotu-trace {command}", style="bold"), kv_table(rows)]
    out.extend(_text(f"note: {note}", style="yellow") for note in summary.notes)
    return out
