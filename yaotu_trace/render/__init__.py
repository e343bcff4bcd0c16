"""Renderers: a finished `Report` in, a string out. Numbers are formatted only here.

`views/` says what each section shows (once, as blocks); `console`, `markdown` and `html` draw
blocks; `fmt` turns numbers into text; `json_report` and `junit` write the machine formats.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, assert_never

if TYPE_CHECKING:
    from yaotu_trace.data.report import Report


class OutputFormat(StrEnum):
    """Report formats for `--format`."""

    TABLE = "table"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


def render(report: Report, fmt: OutputFormat, *, width: int = 100, color: bool = False,
           unicode: bool = True) -> str:
    """Render a report in the chosen format; width, colour and whether the output can encode
    the charts' block characters (`unicode`) are decided by the caller."""
    # NOTE: each renderer is imported when its format is asked for: the CLI imports this
    # package for `OutputFormat` at start-up, and every renderer brings numpy (through the
    # report's values), which `trace --help` and `trace models` must not load
    # (tests/cli/test_startup.py).
    match fmt:
        case OutputFormat.TABLE:
            from yaotu_trace.render.console import render_console

            return render_console(report, width=width, color=color, unicode=unicode)
        case OutputFormat.JSON:
            from yaotu_trace.render.json_report import render_json

            return render_json(report)
        case OutputFormat.MARKDOWN:
            from yaotu_trace.render.markdown import render_markdown

            return render_markdown(report)
        case OutputFormat.HTML:
            from yaotu_trace.render.html import render_html

            return render_html(report)
        case _:
            assert_never(fmt)
