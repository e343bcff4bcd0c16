"""Out of core: every report of a Parquet trace streamed from disk equals the in-memory one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_json

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
COMMANDS = [
    ["analyze"],
    ["diagnose", "--model", "Llama-3.1-8B"],
    ["report", "--format", "json"],
    ["replay", "--capacity", "2000"],
]


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
    streamed = run_json(args, capsys)
    from yaotu_trace.data import canonical

    monkeypatch.setattr(canonical, "lazy_content", lambda path: None)
    in_memory = run_json(args, capsys)
    # THEN the documents are identical
    assert streamed == in_memory


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A `trace simulate` output: timed (token_times_s per request) with its step log."""
    out = tmp_path_factory.mktemp("sim")
    trace, steps = out / "sim.parquet", out / "sim.steps.parquet"
    assert main(["simulate", str(SAMPLES / "chat.parquet"), "--model", "Llama-3.1-8B",
                 "--gpu", "H100-SXM", "--out", str(trace), "--steps-out", str(steps),
                 "-f", "json"]) == ExitCode.OK
    return trace, steps


@pytest.mark.parametrize("command", COMMANDS[:3], ids=lambda c: c[0])
@pytest.mark.parametrize("sample", ["diag-burst.parquet", "diag-kv-churn.parquet", "simulated"])
@pytest.mark.parametrize("batch_rows", [65_536, 7])
def test_streamed_token_times_equal_in_memory(
    command: list[str], sample: str, batch_rows: int, simulated: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a timed canonical Parquet trace (token_times_s per request) and its step log
    from yaotu_trace.data import canonical, token_times
    from yaotu_trace.ingest import read_trace

    path, steps = (simulated if sample == "simulated"
                   else (SAMPLES / sample, SAMPLES / sample.replace(".parquet", ".steps.parquet")))
    lazy = read_trace(path, lazy_content=True).lazy
    assert lazy is not None and lazy.values_in("token_times_s") > 0
    args = [command[0], str(path), *command[1:], "--steps", str(steps)]
    if "--format" not in args:
        args += ["--format", "json"]
    # WHEN the token times stream in record batches (some as small as 7 rows) and when the
    # whole column is read up front
    monkeypatch.setattr(token_times, "BATCH_ROWS", batch_rows)
    streamed = run_json(args, capsys)
    monkeypatch.setattr(canonical, "lazy_content", lambda path: None)
    in_memory = run_json(args, capsys)
    # THEN the profile's gaps, the interference axis and the report's gap plot are identical
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
    one = run_json(args, capsys)
    two = run_json([*args, "--jobs", "2"], capsys)
    assert two["config"]["settings"].pop("replay_jobs") == 2
    assert one["config"]["settings"].pop("replay_jobs") == 1
    # The only other difference is the prefix-reuse axis's note on where its replay ran.
    where = [n for axis in two["axes"] for n in axis.get("notes", []) if "process" in n]
    assert len(where) == 1
    for axis in two["axes"]:
        axis["notes"] = [n for n in axis.get("notes", []) if n not in where]
    assert one == two
