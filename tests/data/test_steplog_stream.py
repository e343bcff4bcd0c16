"""A step log streamed from a Parquet file in start order gives the reports of one read whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_json

from yaotu_trace import ingest
from yaotu_trace.cli import main
from yaotu_trace.data import steplog
from yaotu_trace.data.order_stats import BlockSum, KeyedBlockSum, summarize
from yaotu_trace.data.report import PERCENTILES, Distribution, to_builtins
from yaotu_trace.errors import ExitCode, TraceSchemaError
from yaotu_trace.ingest import load as ingest_load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
COMMANDS = [
    ["analyze"],
    ["diagnose", "--model", "Llama-3.1-8B"],
    ["report", "--format", "json"],
]


def _args(command: list[str], trace: Path, steps: Path) -> list[str]:
    args = [command[0], str(trace), *command[1:], "--steps", str(steps)]
    return args if "--format" in args else [*args, "--format", "json"]


def _simulate(out: Path, trace: Path, instances: int) -> tuple[Path, Path]:
    path, steps = out / "sim.parquet", out / "sim.steps.parquet"
    assert main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100-SXM",
                 "--instances", str(instances), "--out", str(path), "--steps-out", str(steps),
                 "-f", "json"]) == ExitCode.OK
    return path, steps


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A `trace simulate` output on three instances: timed requests and their step log."""
    return _simulate(tmp_path_factory.mktemp("sim"), SAMPLES / "chat.parquet", 3)


@pytest.fixture(scope="module")
def small_simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same on two instances for the first 40 requests: small enough for 7-row batches."""
    out = tmp_path_factory.mktemp("small")
    pq.write_table(pq.read_table(SAMPLES / "chat.parquet").slice(0, 40), out / "chat40.parquet")
    return _simulate(out, out / "chat40.parquet", 2)


def _pair(sample: str, simulated: tuple[Path, Path],
          small_simulated: tuple[Path, Path]) -> tuple[Path, Path]:
    if sample == "simulated":
        return simulated
    if sample == "small-simulated":
        return small_simulated
    return SAMPLES / f"{sample}.parquet", SAMPLES / f"{sample}.steps.parquet"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(("sample", "batch_rows"), [
    ("diag-dispatch", None), ("diag-kv-churn", None), ("diag-long-prefill", None),
    ("simulated", None), ("simulated", 1000), ("diag-dispatch", 7), ("small-simulated", 7),
])
def test_streamed_step_log_equals_whole(
    command: list[str], sample: str, batch_rows: int | None, simulated: tuple[Path, Path],
    small_simulated: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a trace and its step log in Parquet, rows in start order
    trace, steps = _pair(sample, simulated, small_simulated)
    args = _args(command, trace, steps)
    loaded = ingest.read_steps(steps, "--steps")
    assert loaded.streamed
    # WHEN the log streams in record batches (some of 7 rows) and when it is read whole
    if batch_rows is not None:
        monkeypatch.setattr(steplog, "BATCH_ROWS", batch_rows)
    streamed = run_json(args, capsys)
    monkeypatch.setattr(steplog, "BATCH_ROWS", 1 << 18)
    monkeypatch.setattr(ingest_load, "open_parquet", lambda path: None)
    assert not ingest.read_steps(steps, "--steps").streamed
    whole = run_json(args, capsys)
    # THEN the documents are identical, number for number
    assert streamed == whole


def test_unsorted_parquet_step_log_is_read_whole_with_the_same_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a step log whose last step (the latest start) is written first
    sorted_steps = SAMPLES / "diag-burst.steps.parquet"
    table = pq.read_table(sorted_steps)
    n = table.num_rows
    unsorted = tmp_path / "unsorted.steps.parquet"
    pq.write_table(pa.concat_tables([table.slice(n - 1), table.slice(0, n - 1)]), unsorted,
                   row_group_size=1000)
    # WHEN both are loaded and diagnosed
    assert ingest.read_steps(sorted_steps, "--steps").streamed
    log = ingest.read_steps(unsorted, "--steps")
    # THEN the unsorted one is read whole, sorted by start, and the reports are the same
    assert not log.streamed
    assert log.frame()["start_s"].is_monotonic_increasing
    trace = SAMPLES / "diag-burst.parquet"
    command = ["diagnose", "--model", "Llama-3.1-8B"]
    assert run_json(_args(command, trace, unsorted), capsys) == run_json(
        _args(command, trace, sorted_steps), capsys)


def test_missing_start_is_read_whole_and_refused(tmp_path: Path) -> None:
    """A step without a start is not streamed; the whole read names its row (file order)."""
    frame = pd.DataFrame({"start_s": [0.0, None, 2.0], "end_s": [0.5, 1.5, 2.5]})
    path = tmp_path / "steps.parquet"
    frame.to_parquet(path)
    assert steplog.open_parquet(path) is None
    with pytest.raises(TraceSchemaError, match=r"steps\.parquet: row 2, column 'start_s': "
                       "missing; every step needs"):
        ingest.read_steps(path, "--steps")


@pytest.mark.parametrize("batch_rows", [7, 1 << 18])
def test_error_in_a_late_batch_names_the_row_of_the_file(
        tmp_path: Path, batch_rows: int, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a sorted step log with a negative num_running at row 5000 of the file
    table = pq.read_table(SAMPLES / "diag-burst.steps.parquet").to_pandas()
    table.loc[4999, "num_running"] = -3
    steps = tmp_path / "bad.steps.parquet"
    table.to_parquet(steps, row_group_size=1024)
    args = _args(["diagnose"], SAMPLES / "diag-burst.parquet", steps)
    monkeypatch.setattr(steplog, "BATCH_ROWS", batch_rows)
    # WHEN it streams (in 7-row batches: batch 715 holds the bad row), and when read whole
    assert ingest.read_steps(steps, "--steps").streamed
    assert main(args) == ExitCode.INPUT
    streamed = capsys.readouterr().err
    monkeypatch.setattr(ingest_load, "open_parquet", lambda path: None)
    assert main(args) == ExitCode.INPUT
    whole = capsys.readouterr().err
    # THEN both say, on one line, the file, the row of the whole file and the column
    message = f"{steps}: row 5000, column 'num_running': -3 is negative"
    assert message in streamed and message in whole
    assert len(streamed.strip().splitlines()) == 1


def test_step_ending_before_it_starts_in_a_late_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = pd.DataFrame({"start_s": np.arange(100.0), "end_s": np.arange(100.0) + 0.5})
    frame.loc[93, "end_s"] = 92.0
    path = tmp_path / "steps.parquet"
    frame.to_parquet(path)
    monkeypatch.setattr(steplog, "BATCH_ROWS", 7)
    log = ingest.read_steps(path, "--steps")
    assert log.streamed
    with pytest.raises(TraceSchemaError, match=r"row 94, column 'end_s': step ends before"):
        for _ in log.batches():
            pass


def _mixed_log() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests and steps on three named instances, one instance never reporting num_waiting,
    steps without an instance, equal start times and requests on an instance with no step."""
    rng = np.random.default_rng(7)
    n = 400
    start = np.sort(np.round(rng.uniform(0, 40, n), 2))  # rounded: equal starts occur
    instance = rng.choice(["a", "b", "c", None], n, p=[0.35, 0.35, 0.25, 0.05])
    waiting = rng.integers(0, 3, n).astype(float)
    waiting[instance == "c"] = np.nan
    steps = pd.DataFrame({
        "instance": instance, "start_s": start, "end_s": start + rng.uniform(0.01, 0.2, n),
        "prefill_tokens": np.where(rng.random(n) < 0.3, rng.integers(1, 500, n), 0),
        "decode_tokens": rng.integers(0, 32, n), "num_running": rng.integers(1, 16, n),
        "num_waiting": pd.array(waiting, dtype="Int64"),
        "kv_blocks_used": rng.integers(0, 100, n), "kv_blocks_total": np.full(n, 100),
        "num_preempted": (rng.random(n) < 0.05).astype(int),
    })
    m = 120
    arrival = np.sort(rng.uniform(0, 40, m))
    scheduled = arrival + rng.exponential(0.3, m)
    first = scheduled + rng.exponential(0.1, m)
    requests = {
        "arrival_s": arrival, "scheduled_s": scheduled, "first_token_s": first,
        "finish_s": first + rng.exponential(2.0, m),
        "prompt_len": rng.integers(10, 2000, m), "output_len": rng.integers(1, 300, m),
        "instance": rng.choice(["a", "b", "c", "d"], m),
    }
    return pd.DataFrame(requests), steps


@pytest.mark.parametrize("batch_rows", [3, 7, 64])
def test_axes_on_a_mixed_multi_instance_log_do_not_depend_on_batches(
        tmp_path: Path, batch_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from diag_factories import make_trace, thresholds

    from yaotu_trace.axes.base import AxisInput, EngineSettings
    from yaotu_trace.axes.kv_memory import analyze_kv_memory
    from yaotu_trace.axes.queueing import analyze_queueing

    requests, steps = _mixed_log()
    path = tmp_path / "mixed.steps.parquet"
    steps.to_parquet(path, row_group_size=50)
    trace = make_trace({c: requests[c].tolist() for c in requests.columns})

    def results(log: steplog.StepLog) -> list[object]:
        inp = AxisInput.of(replace(trace, steps=log), None, EngineSettings())
        return [to_builtins(f(inp, thresholds()))
                for f in (analyze_queueing, analyze_kv_memory)]

    whole = results(steplog.StepLog.from_frame(steps, str(path)))
    monkeypatch.setattr(steplog, "BATCH_ROWS", batch_rows)
    log = ingest.read_steps(path, "--steps")
    assert log.streamed and not log.complete("num_waiting")
    assert results(log) == whole
    queueing = whole[0]
    assert isinstance(queueing, dict)
    metrics = queueing["metrics"]
    assert metrics["idle_while_waiting_s"] is not None
    assert metrics["little_expected_sampled"] is not None


def test_statistics_say_which_columns_hold_values(tmp_path: Path) -> None:
    frame = pd.DataFrame({
        "start_s": [0.0, 1.0, 2.0], "end_s": [0.5, 1.5, 2.5],
        "num_running": pd.array([None, None, None], dtype="Int64"),
        "num_waiting": [1, 0, 2],
        "kv_blocks_used": [np.nan, 3.0, np.nan],
    })
    for statistics in (True, False):
        path = tmp_path / f"steps-{statistics}.parquet"
        pq.write_table(pa.Table.from_pandas(frame), path, write_statistics=statistics)
        log = steplog.open_parquet(path)
        assert log is not None and log.streamed
        assert log.has("num_waiting") and log.has("kv_blocks_used")
        assert not log.has("num_running") and not log.has("decode_tokens")
        assert log.complete("num_waiting") and not log.complete("kv_blocks_used")
        memory = steplog.StepLog.from_frame(frame, "mem")
        assert memory.present == log.present


def test_distribution_of_an_array_equals_its_streamed_summary() -> None:
    rng = np.random.default_rng(3)
    data = rng.lognormal(size=200_000)
    data[::1000] = np.nan
    batches = [data[i:i + 7777] for i in range(0, data.size, 7777)]
    streamed = Distribution.from_summary(summarize(lambda: iter(batches), PERCENTILES))
    assert streamed == Distribution.of(data)


@pytest.mark.parametrize("size", [1, 7, 100, 5_000])
def test_block_sums_do_not_depend_on_batches(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from yaotu_trace.data import order_stats

    monkeypatch.setattr(order_stats, "SUM_BLOCK", 64)
    rng = np.random.default_rng(11)
    values = rng.normal(1e3, 1e3, 5_003)
    keys = rng.integers(0, 9, values.size)
    plain, keyed = BlockSum(), KeyedBlockSum(9)
    for i in range(0, values.size, size):
        plain.add(values[i:i + size])
        keyed.add(keys[i:i + size], values[i:i + size])
    whole_plain, whole_keyed = BlockSum(), KeyedBlockSum(9)
    whole_plain.add(values)
    whole_keyed.add(keys, values)
    assert plain.total() == whole_plain.total()
    assert (keyed.totals() == whole_keyed.totals()).all()
    np.testing.assert_allclose(keyed.totals(), np.bincount(keys, weights=values), rtol=1e-12)
