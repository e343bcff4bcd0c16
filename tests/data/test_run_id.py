"""A step log of another simulated run is refused, where the time and work checks let it by
(yaotu_trace.data.run_id)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from yaotu_trace.data.run_id import RUN_ID_KEY, read_run_id, run_id
from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_another_simulated_runs_step_log_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Both runs start at 0 s, and the burst run's log computes more than the churn trace
    needs (work conservation is one-sided), so only the run id tells them apart."""
    code, out, err = run_cli(["diagnose", str(SAMPLES / "diag-kv-churn.parquet"), "--steps",
                              str(SAMPLES / "diag-burst.steps.parquet")], capsys)
    assert code == ExitCode.INPUT and out == ""
    assert err.count("\n") == 1
    burst = read_run_id(SAMPLES / "diag-burst.steps.parquet")
    churn = read_run_id(SAMPLES / "diag-kv-churn.parquet")
    assert burst and churn and burst != churn
    assert f"diag-burst.steps.parquet: the step log is of simulated run {burst}" in err
    assert f"diag-kv-churn.parquet is of run {churn}" in err
    assert "they are from different runs" in err


def test_a_step_log_without_an_id_is_judged_by_time_and_work_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same log with its metadata dropped (as another tool would rewrite it) is read:
    nothing in it names a run."""
    table = pq.read_table(SAMPLES / "diag-burst.steps.parquet")
    bare = tmp_path / "burst.steps.parquet"
    pq.write_table(table.replace_schema_metadata({}), bare)
    assert read_run_id(bare) is None
    code, out, _ = run_cli(["diagnose", str(SAMPLES / "diag-kv-churn.parquet"), "--steps",
                            str(bare)], capsys)
    assert code == ExitCode.OK and out.startswith("verdict:")


def test_simulate_stamps_both_tables_and_refuses_the_other_runs_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one trace on two pools: each run's tables share an id, and diagnosing one
    run's requests with the other's steps is refused."""
    runs = {}
    for blocks in ("400", "4000"):
        out, steps = tmp_path / f"sim{blocks}.parquet", tmp_path / f"sim{blocks}.steps.parquet"
        code, _, _ = run_cli(["simulate", str(SAMPLES / "diag-healthy.parquet"), "--model",
                              "Llama-3.1-8B", "--gpu", "H100", "--kv-blocks", blocks,
                              "--out", str(out), "--steps-out", str(steps)], capsys)
        assert code == ExitCode.OK
        assert read_run_id(out) == read_run_id(steps) is not None
        runs[blocks] = (out, steps)
    assert read_run_id(runs["400"][0]) != read_run_id(runs["4000"][0])
    code, out_text, _ = run_cli(["diagnose", str(runs["400"][0]), "--steps",
                                 str(runs["400"][1])], capsys)
    assert code == ExitCode.OK and out_text.startswith("verdict:")
    code, _, err = run_cli(["diagnose", str(runs["400"][0]), "--steps", str(runs["4000"][1])],
                           capsys)
    assert code == ExitCode.INPUT and "they are from different runs" in err


def test_another_simulated_runs_metrics_export_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`trace generate --metrics-out` names its run in one `yaotu:run_info` sample; the burst
    run's export beside the churn trace was read before (both clocks start at 0 s) and gave
    the verdict 'kv_memory (spiky_demand): 58.7 %' from the other run's gauges."""
    exports = {}
    for name in ("diag-burst", "diag-kv-churn"):
        exports[name] = tmp_path / f"{name}.metrics.csv"
        code, _, _ = run_cli(["generate", name, "--seed", "1", "--out",
                              str(tmp_path / f"{name}.parquet"), "--metrics-out",
                              str(exports[name])], capsys)
        assert code == ExitCode.OK
    rows = pd.read_csv(exports["diag-burst"])
    info = rows[rows["metric"] == "yaotu:run_info"]
    burst = read_run_id(SAMPLES / "diag-burst.parquet")
    assert len(info) == 1 and info["labels"].iloc[0] == f'{{run_id="{burst}"}}'
    churn = SAMPLES / "diag-kv-churn.parquet"
    code, out, err = run_cli(["diagnose", str(churn), "--metrics", str(exports["diag-burst"])],
                             capsys)
    assert code == ExitCode.INPUT and out == "" and err.count("\n") == 1
    assert f"is of simulated run {burst} (its yaotu:run_info)" in err
    assert f"is of run {read_run_id(churn)}" in err and "different runs" in err
    code, out, _ = run_cli(["diagnose", str(churn), "--metrics", str(exports["diag-kv-churn"]),
                            "-f", "json"], capsys)
    assert code == ExitCode.OK
    report = json.loads(out)
    assert report["principal"] == "kv_memory"
    # A series the reader knows, not one it names as unused.
    assert not any("yaotu:run_info" in note for note in report["input"].get("notes", []))


def test_a_step_log_and_an_export_of_two_runs_are_refused_together(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a trace (telemetry alone), and beside a trace that names no run (a CSV), the
    step log's run and the export's must be one: before, the churn run's export with the burst
    run's step log was judged as one engine ('kv_memory ok')."""
    export = tmp_path / "churn.metrics.csv"
    code, _, _ = run_cli(["generate", "diag-kv-churn", "--seed", "1", "--out",
                          str(tmp_path / "churn.parquet"), "--metrics-out", str(export)], capsys)
    assert code == ExitCode.OK
    burst_steps = str(SAMPLES / "diag-burst.steps.parquet")
    code, out, err = run_cli(["diagnose", "--steps", burst_steps, "--metrics", str(export)],
                             capsys)
    assert code == ExitCode.INPUT and out == "" and err.count("\n") == 1
    assert f"the step log {burst_steps} is of run" in err and "different runs" in err
    churn_steps = str(SAMPLES / "diag-kv-churn.steps.parquet")
    code, out, _ = run_cli(["diagnose", "--steps", churn_steps, "--metrics", str(export)],
                           capsys)
    assert code == ExitCode.OK and out.startswith("verdict:")
    as_csv = tmp_path / "churn.csv"
    code, _, _ = run_cli(["convert", str(SAMPLES / "diag-kv-churn.parquet"), "--out",
                          str(as_csv)], capsys)
    assert code == ExitCode.OK and read_run_id(as_csv) is None
    code, _, err = run_cli(["diagnose", str(as_csv), "--steps", burst_steps, "--metrics",
                            str(export)], capsys)
    assert code == ExitCode.INPUT and "different runs" in err


def test_the_id_is_the_runs_timing() -> None:
    """The same timing and steps give the same id (same trace and options, same bytes); one
    finish moved by a microsecond, or one step's free blocks, gives another."""
    frame = pd.DataFrame({"arrival_s": [0.0, 1.0], "scheduled_s": [0.1, 1.1],
                          "first_token_s": [0.2, 1.2], "finish_s": [3.0, 4.0]})
    moved = frame.copy()
    moved.loc[1, "finish_s"] = 4.000001
    steps = pd.DataFrame({"start_s": [0.1, 1.1], "end_s": [0.2, 1.2],
                          "kv_blocks_free": [390, 380]})
    roomier = steps.assign(kv_blocks_free=[3990, 3980])
    assert run_id(frame, steps) == run_id(frame.copy(), steps.copy())
    assert run_id(frame, steps) != run_id(moved, steps)
    assert run_id(frame, steps) != run_id(frame, roomier)
    assert len(run_id(frame, None)) == 16


def test_a_csv_table_has_no_id(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s\n0\n", encoding="utf-8")
    assert read_run_id(path) is None
    assert RUN_ID_KEY == b"yaotu.run_id"


def test_docs_show_the_refusal_as_it_is_printed(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """docs/diagnose.md quotes the line for the samples' pair; the ids are the samples'."""
    root = SAMPLES.parent
    monkeypatch.chdir(root)
    code, _, err = run_cli(["diagnose", "sample_traces/diag-kv-churn.parquet", "--steps",
                            "sample_traces/diag-burst.steps.parquet"], capsys)
    assert code == ExitCode.INPUT
    docs = (root / "docs" / "diagnose.md").read_text(encoding="utf-8")
    assert err.strip() in [line.strip() for line in docs.splitlines()]


@pytest.mark.parametrize("value", [b"", b"zz", b"\xff" * 3 + b"x" * 100_000])
def test_a_damaged_run_id_is_refused_in_one_short_line(
        value: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Metadata under the key that trace simulate did not write (empty, not hex, 100 kB of
    junk) is refused naming file and key, the value cut to 40 characters."""
    table = pq.read_table(SAMPLES / "diag-burst.steps.parquet")
    damaged = tmp_path / "burst.steps.parquet"
    meta = dict(table.schema.metadata or {})
    meta[RUN_ID_KEY] = value
    pq.write_table(table.replace_schema_metadata(meta), damaged)
    code, out, err = run_cli(["diagnose", str(SAMPLES / "diag-kv-churn.parquet"), "--steps",
                              str(damaged)], capsys)
    assert code == ExitCode.INPUT and out == "" and err.count("\n") == 1
    assert f"{damaged}: metadata 'yaotu.run_id' is " in err
    assert "not a run id (16 hex digits" in err and len(err) < 400
