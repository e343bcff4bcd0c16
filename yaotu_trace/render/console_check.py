"""Rich view of the `trace check` section: one row per check and the tally."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render.console import heading
from yaotu_trace.render.fmt import MISSING

MARK = {"passed": ("PASS", "green"), "failed": ("FAIL", "bold red"), "skipped": ("SKIP", "yellow")}


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
    return (f"{word}: {section['passed']} passed, {section['failed']} failed, "
            f"{section['skipped']} skipped")


def checks_renderables(section: Any) -> list[RenderableType]:
    """A table of every check (status, name, value, expected, why) and the summary line."""
    data = to_builtins(section)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", overflow="fold", ratio=3)
    table.add_column("value", justify="right", overflow="fold")
    table.add_column("expected", overflow="fold")
    table.add_column("detail", overflow="fold", ratio=3)
    for r in data["results"]:
        label, style = MARK[r["status"]]
        # Text, not markup: paths such as axes[name=kv_memory] must show as written.
        table.add_row(Text(label, style=style), Text(r["name"]), Text(show_value(r["value"])),
                      Text(expected(r)), Text(r["message"]))
    out: list[RenderableType] = [heading("Checks")]
    if data.get("baseline_path"):
        out.append(Text(f"baseline: {data['baseline_path']}", style="dim"))
    if data["results"]:
        out.append(table)
    else:
        out.append(Text("no checks configured (give --config, --baseline or --fail-on)"))
    style = "bold red" if data["status"] == "failed" else "bold green"
    out.append(Text(summary_line(data), style=style))
    return out
