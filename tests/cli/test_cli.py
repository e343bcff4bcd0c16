"""The command line: exit codes, stdout carries only the report, errors are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import ExitCode


@pytest.fixture()
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    write_trace(
        pd.DataFrame(
            {
                "request_id": ["a", "b", "c"],
                "arrival_s": [0.0, 0.5, 2.0],
                "prompt_len": [4, 4, 4],
                "output_len": [2, 3, 1],
                "prompt_tokens": [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]],
            }
        ),
        path,
    )
    return path


def test_analyze_json_stdout_is_only_the_report(small_trace: Path, capsys) -> None:
    code, out, err = run_cli(["analyze", str(small_trace), "--format", "json"], capsys)
    assert code == ExitCode.OK
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    assert doc["input"]["requests"] == 3
    assert doc["profile"]["lengths"]["prompt_tokens_total"] == 12
    assert doc["profile"]["arrivals"]["span_s"] == 2.0
    assert err == ""


def test_analyze_output_file_written_atomically(small_trace: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "report.md"
    code, out, _ = run_cli(["analyze", str(small_trace), "-f", "markdown", "-o", str(target)],
                           capsys)
    assert code == ExitCode.OK
    assert out == ""
    assert target.read_text().startswith("## yaotu-trace analyze")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("content", "name", "expected"),
    [
        (None, "missing.jsonl", "no such file"),
        ('{"arrival_s": 0, "prompt_len": 3, "output_len": 1}\n{"arrival_s": 1,', "corrupt.jsonl",
         "line 2: invalid JSON"),
        ('{"arrival_s": 0, "prompt_len": 3}\n', "nocol.jsonl",
         "missing required column 'output_len'"),
        ("a,b\n1,2\n", "weird.xyz", "unknown trace format '.xyz'"),
        ('{"arrival_s": 0, "prompt_len": -3, "output_len": 1}\n', "neg.jsonl",
         "line 1, column 'prompt_len'"),
    ],
)
def test_input_errors_are_one_line_with_exit_3(
    tmp_path: Path, capsys, content: str | None, name: str, expected: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    code, out, err = run_cli(["analyze", str(path)], capsys)
    assert code == ExitCode.INPUT
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert expected in err
    assert str(path) in err


def test_usage_error_exits_2(capsys) -> None:
    code, out, err = run_cli(["analyze", "--no-such-option"], capsys)
    assert code == ExitCode.USAGE
    assert out == ""
    assert "No such option" in err


def test_unexpected_exception_is_internal_error_without_traceback(
    small_trace: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaotu_trace.commands.analyze as pipeline

    def boom(_trace: object, **_options: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(pipeline, "analyze", boom)
    code, _out, err = run_cli(["analyze", str(small_trace)], capsys)
    assert code == ExitCode.INTERNAL
    assert "internal error: RuntimeError: kaboom" in err
    assert "Traceback" not in err


def test_python_dash_m_help_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "yaotu_trace", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "analyze" in done.stdout
