"""Out of core: every report of a Parquet trace streamed from disk equals the in-memory one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
COMMANDS = [
    ["analyze"],
    ["diagnose", "--model", "Llama-3.1-8B"],
    ["report", "--format", "json"],
    ["replay", "--capacity", "2000"],
]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(args) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("sample", ["chat.parquet", "diag-prefix-recompute.parquet"])
def test_streamed_report_equals_in_memory_report(
    command: list[str], sample: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a canonical Parquet trace with token ids
    args = [command[0], str(SAMPLES / sample), *command[1:]]
    if "--format" not in args:
        args += ["--format", "json"]
    steps = SAMPLES / sample.replace(".parquet", ".steps.parquet")
    if steps.exists() and command[0] in ("analyze", "diagnose", "report"):
        args += ["--steps", str(steps)]
    # WHEN the token columns stay on disk (the default) and when they are read up front
    streamed = _run(args, capsys)
    from yaotu_trace.ingest import canonical

    monkeypatch.setattr(canonical, "lazy_content", lambda path: None)
    in_memory = _run(args, capsys)
    # THEN the documents are identical
    assert streamed == in_memory


def test_stats_reports_time_and_peak_memory_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SAMPLES / "chat.parquet"), "--stats", "-f", "json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout is still only the report
    assert "s elapsed, peak RSS" in captured.err and "GiB" in captured.err


@pytest.mark.parametrize("sample", ["chat.parquet", "diag-prefix-recompute.parquet"])
def test_diagnose_with_worker_processes_equals_one_process(
        sample: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diagnose", str(SAMPLES / sample), "--kv-capacity", "2000", "-f", "json"]
    one = _run(args, capsys)
    two = _run([*args, "--jobs", "2"], capsys)
    assert two["config"]["settings"].pop("replay_jobs") == 2
    assert one["config"]["settings"].pop("replay_jobs") == 1
    # The only other difference is the prefix-reuse axis's note on where its replay ran.
    where = [n for axis in two["axes"] for n in axis.get("notes", []) if "process" in n]
    assert len(where) == 1
    for axis in two["axes"]:
        axis["notes"] = [n for n in axis.get("notes", []) if n not in where]
    assert one == two
