"""Markdown view of the `trace check` section, for a CI step summary or a PR comment."""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render.console_check import expected, show_value, summary_line

ICON = {"passed": "✅ pass", "failed": "❌ fail", "skipped": "⚪ skip"}


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def checks_lines(section: Any) -> list[str]:
    """The summary in bold, then one table row per check (failures first stay in order)."""
    data = to_builtins(section)
    lines = ["### Checks", "", f"**{summary_line(data)}**"]
    if data.get("baseline_path"):
        lines += ["", f"Baseline: `{data['baseline_path']}`"]
    if data["results"]:
        lines += ["", "|  | check | value | expected | detail |", "|---|---|---:|---|---|"]
        lines += [f"| {ICON[r['status']]} | {_cell(r['name'])} | {_cell(show_value(r['value']))} "
                  f"| {_cell(expected(r))} | {_cell(r['message'])} |" for r in data["results"]]
    return lines
