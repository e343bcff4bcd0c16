"""Renderers: a finished `Report` in, a string out. Numbers are formatted only here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, assert_never

if TYPE_CHECKING:
    from yaotu_trace.data.report import Report


class OutputFormat(StrEnum):
    """Report formats for `--format`."""

    TABLE = "table"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


def render(report: Report, fmt: OutputFormat, *, width: int = 100, color: bool = False) -> str:
    """Render a report in the chosen format; width and colour are decided by the caller."""
    match fmt:
        case OutputFormat.TABLE:
            from yaotu_trace.render.console import render_console

            return render_console(report, width=width, color=color)
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


def find_renderer(
    by_name: Mapping[str, str], by_type: Mapping[str, str], name: str, section: object,
) -> Callable[[Any], Any] | None:
    """The "module:function" named for the section's value type, else for its name, imported.

    None when there is no entry or it does not import, so the caller shows its generic table and
    a section is never invisible.
    """
    target = by_type.get(type(section).__name__) or by_name.get(name)
    if target is None:
        return None
    module_name, func = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    renderer: Callable[[Any], Any] | None = getattr(module, func, None)
    return renderer
