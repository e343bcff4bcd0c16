"""Text from the input (file names, tenants, notes) cannot act on a terminal nor break a table.

A file name may hold "\\x1b[31m" and a tenant "x|y": the console and Markdown show them
escaped, the errors too, and no table gains a column.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from yaotu_trace._visible import visible
from yaotu_trace.cli import main
from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.blocks import Grid, KeyValues, Styled
from yaotu_trace.render.console import draw, render_console
from yaotu_trace.render.markdown import draw as draw_markdown
from yaotu_trace.render.markdown import render_markdown, table

ESC = "\x1b"
EVIL = f"e{ESC}[31mvil[bold]\x9b2J.jsonl"
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _report(path: str = EVIL, notes: tuple[str, ...] = (f"from {EVIL}",)) -> Report:
    summary = InputSummary(path=path, format="jsonl", rows_read=1, requests=1,
                           source_block_size=None, content=None, columns=("tenant",),
                           notes=notes)
    return Report(command="analyze", input=summary,
                  sections={"mystery": {"tenant": f"t{ESC}]0;owned{chr(7)}"}})


def _sgr_removed(text: str) -> str:
    """The output without rich's own colour codes (SGR: ESC [ digits and ; m)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_visible_escapes_controls_and_keeps_lines() -> None:
    assert visible(f"a{ESC}[31mb\x00c\x7fd\x9be") == r"a\x1b[31mb\x00c\x7fd\x9be"
    assert visible("two\nlines\tand tabs") == "two\nlines\tand tabs"
    assert visible("two\nlines\r", one_line=True) == r"two\x0alines\x0d"
    assert visible("naïve 漢字 → ✓") == "naïve 漢字 → ✓"
    assert visible(visible(EVIL)) == visible(EVIL)


@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
def test_console_shows_input_text_escaped_and_never_as_markup(color: bool) -> None:
    out = render_console(_report(), color=color)
    # Colour codes are rich's own; no other control character is left.
    assert not CONTROLS.search(_sgr_removed(out)), repr(out)
    assert r"e\x1b[31mvil[bold]\x9b2J.jsonl" in _sgr_removed(out)
    assert r"note: from e\x1b[31mvil" in _sgr_removed(out)
    assert r"t\x1b]0;owned\x07" in _sgr_removed(out)


def test_console_grid_cells_and_titles_are_text() -> None:
    grid = Grid(title=f"by {ESC}[2J", header=["tenant", "n"],
                rows=[["[bold]x|y[/bold]", Styled(f"{ESC}[5m", style="red")]])
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    console = Console(file=buffer, width=80, color_system=None, no_color=True)
    for renderable in draw([grid]):
        console.print(renderable)
    out = buffer.getvalue()
    assert ESC not in out
    assert r"by \x1b[2J" in out and "[bold]x|y[/bold]" in out and r"\x1b[5m" in out


def test_markdown_escapes_pipes_in_every_table_cell() -> None:
    lines = table(["tenant", "a|b"], [["x|y", "1"], ["plain", "2"]])
    assert lines[0] == r"| tenant | a\|b |"
    assert lines[2] == r"| x\|y | 1 |"
    kv = draw_markdown([KeyValues(rows=[("model", "m|n"), ("two\nlines", "v")])])
    assert r"| model | m\|n |" in kv and "| two lines | v |" in kv
    grid = draw_markdown([Grid(header=["tenant", "n"], rows=[[Styled("x|y"), "3"]])])
    assert grid[-1] == r"| x\|y | 3 |"


def test_markdown_generic_table_escapes_pipes() -> None:
    out = render_markdown(_report())
    row = next(line for line in out.splitlines() if line.startswith("| tenant |"))
    assert row == r"| tenant | t\x1b]0;owned\x07 |"
    assert ESC not in out and "\x9b" not in out


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


def test_cli_error_and_report_escape_a_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / f"n{ESC}[31mope\n.jsonl"
    assert main(["analyze", str(missing)]) == ExitCode.INPUT
    _, err = capsys.readouterr()
    assert ESC not in err and err.count("\n") == 1
    assert r"n\x1b[31mope\x0a.jsonl: no such file" in err

    # named relative to its folder: the table shortens a long path, such as a deep temporary one
    monkeypatch.chdir(tmp_path)
    trace = Path(f"e{ESC}[31mvil.jsonl")
    trace.write_text('{"request_id": "r0", "arrival_s": 0, "prompt_len": 4, "output_len": 1}\n',
                     encoding="utf-8")
    for fmt in ("table", "markdown"):
        assert main(["analyze", str(trace), "--format", fmt]) == ExitCode.OK
        out, _ = capsys.readouterr()
        assert ESC not in out and r"e\x1b[31mvil.jsonl" in out, fmt
    assert main(["analyze", str(trace), "--format", "json"]) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["input"]["path"] == str(trace)


def test_usage_error_escapes_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "t.jsonl", "--preset", f"{ESC}[2J"]) == ExitCode.USAGE
    _, err = capsys.readouterr()
    assert ESC not in err and r"'\x1b[2J' is not one of" in err
