"""The `checks` section (`trace check`): one row per check and the tally.

`show_value`, `expected` and `summary_line` are shared with the JUnit renderer and the CLI's
one-line summary, so a check reads the same everywhere.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render.blocks import (
    CONSOLE,
    MARKDOWN,
    Block,
    Column,
    Grid,
    Heading,
    Line,
    Styled,
    View,
)
from yaotu_trace.render.fmt import MISSING

MARK = {"passed": ("PASS", "green"), "failed": ("FAIL", "bold red"), "skipped": ("SKIP", "yellow"),
        "warned": ("WARN", "yellow")}
ICON = {"passed": "✅ pass", "failed": "❌ fail", "skipped": "⚪ skip", "warned": "⚠️ warn"}
HEADER = ["", "check", "value", "expected", "detail"]
COLUMNS = [
    Column(name="", align="left", no_wrap=True),
    Column(name="check", align="left", overflow="fold", ratio=3),
    Column(name="value", overflow="fold"),
    Column(name="expected", align="left", overflow="fold"),
    Column(name="detail", align="left", overflow="fold", ratio=3),
]


def show_value(value: Any) -> str:
    """A check's value as it is compared: numbers to six significant digits."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def expected(result: dict[str, Any]) -> str:
    """The condition a check asserts, in words a reviewer reads at a glance."""
    kind = result["kind"]
    if kind == "threshold":
        return f"{result['op']} {show_value(result['threshold'])}"
    if kind == "baseline":
        word = {"higher": "≥", "lower": "≤", "either": "≈"}.get(result["op"] or "", "≈")
        base = show_value(result["baseline"])
        tol = result.get("tolerance")
        return f"{word} {base}" + (f" ± {tol:.3g}" if tol is not None else "")
    return f"{result['op']} {show_value(result['threshold'])}"


def summary_line(section: dict[str, Any]) -> str:
    """`3 passed, 1 failed, 0 skipped`: the one line CI logs show."""
    word = "FAILED" if section["status"] == "failed" else "PASSED"
    warned = f", {section['warned']} warned" if section.get("warned") else ""
    return (f"{word}: {section['passed']} passed, {section['failed']} failed, "
            f"{section['skipped']} skipped{warned}")


def view(section: Any) -> View:
    """The console: the table, then the tally; Markdown: the tally in bold, then the table."""
    data = to_builtins(section)
    results = data["results"]
    tally = summary_line(data)
    out: list[Block] = [Heading(text="Checks"), Line(text=f"**{tally}**", only=MARKDOWN)]
    if data.get("baseline_path"):
        out.append(Line(text=f"baseline: {data['baseline_path']}", style="dim",
                        markdown=f"Baseline: `{data['baseline_path']}`"))
    if data.get("before_path"):
        out.append(Line(text=f"before: {data['before_path']}", style="dim",
                        markdown=f"Before: `{data['before_path']}`"))
    if results:
        # Styled, not markup: paths such as axes[name=kv_memory] must show as written.
        cells = [[show_value(r["value"]), expected(r), r["message"]] for r in results]
        out.append(Grid(header=HEADER, columns=COLUMNS, only=CONSOLE, rows=[
            [Styled(*MARK[r["status"]]), Styled(r["name"]), *map(Styled, c)]
            for r, c in zip(results, cells, strict=True)]))
        out.append(Grid(header=HEADER, markdown_align="llrll", only=MARKDOWN,
                        rows=[[ICON[r["status"]], r["name"], *c]
                              for r, c in zip(results, cells, strict=True)]))
    else:
        out.append(Line(text="no checks configured (give --config, --baseline or --fail-on)",
                        only=CONSOLE))
    out.append(Line(text=tally, style="bold red" if data["status"] == "failed" else "bold green",
                    only=CONSOLE))
    return out
