"""Markdown tables keep text from the input in its cell: a tenant named "x|y" adds no column."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.blocks import Grid, KeyValues, Styled
from yaotu_trace.render.markdown import draw as draw_markdown
from yaotu_trace.render.markdown import table


def test_markdown_escapes_pipes_in_every_table_cell() -> None:
    lines = table(["tenant", "a|b"], [["x|y", "1"], ["plain", "2"]])
    assert lines[0] == r"| tenant | a\|b |"
    assert lines[2] == r"| x\|y | 1 |"
    kv = draw_markdown([KeyValues(rows=[("model", "m|n"), ("two\nlines", "v")])])
    assert r"| model | m\|n |" in kv and "| two lines | v |" in kv
    grid = draw_markdown([Grid(header=["tenant", "n"], rows=[[Styled("x|y"), "3"]])])
    assert grid[-1] == r"| x\|y | 3 |"


def _cells(row: str) -> int:
    """Table cells of a Markdown row: its unescaped pipes, less one."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def test_replay_markdown_keeps_a_piped_tenant_in_its_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a trace whose tenants are "x|y" and "plain"
    rows = [{"request_id": f"r{i}", "arrival_s": float(i), "prompt_len": 40, "output_len": 5,
             "tenant": ["x|y", "plain"][i % 2], "prompt_tokens": list(range(40))}
            for i in range(8)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # WHEN the replay is written as Markdown
    assert main(["replay", str(trace), "--format", "markdown"]) == ExitCode.OK
    out = capsys.readouterr().out
    # THEN both tenants' rows have the header's cells
    header = next(line for line in out.splitlines() if line.startswith("| tenant |"))
    x_y = next(line for line in out.splitlines() if line.startswith(r"| x\|y |"))
    plain = next(line for line in out.splitlines() if line.startswith("| plain |"))
    assert _cells(x_y) == _cells(plain) == _cells(header)
