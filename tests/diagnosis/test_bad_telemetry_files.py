"""Corrupt or wrong step logs (`--steps`) and metrics exports (`--metrics`): exit 3 with one line
naming the file, the row or field and the fix — never an internal error (exit 4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yaotu_trace import ingest
from yaotu_trace.errors import ExitCode, TraceReadError, YaotuError
from yaotu_trace.ingest.load import read_metrics

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRACE = SAMPLES / "diag-burst.parquet"
STEPS = SAMPLES / "diag-burst.steps.parquet"


def _steps() -> pd.DataFrame:
    return pq.read_table(STEPS).to_pandas()


def _parquet(frame: pd.DataFrame | pa.Table, row_group_size: int = 1024) -> Callable[[Path],
                                                                                      None]:
    def write(path: Path) -> None:
        table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame,
                                                                               preserve_index=False)
        pq.write_table(table, path, row_group_size=row_group_size)
    return write


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


def _truncated(path: Path) -> None:
    raw = STEPS.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _with(column: str, row: int, value: object, dtype: str | None = None) -> pd.DataFrame:
    """The sample step log (6,960 rows) with one value replaced."""
    frame = _steps()
    assert row < len(frame)
    if dtype is not None:
        frame[column] = frame[column].astype(dtype)
    frame.loc[row, column] = value
    return frame


TWO = {"start_s": [0.0, 1.0], "end_s": [0.5, 1.5]}

# (case id, file name, how to write it, what the one-line error must contain)
STEP_CASES = [
    ("truncated-parquet", "s.parquet", _truncated, "cut short"),
    ("empty-parquet", "s.parquet", _bytes(b""), "the file is empty"),
    ("no-rows", "s.parquet", _parquet(_steps().iloc[:0]), "the step log has no steps"),
    ("no-start-column", "s.parquet", _parquet(_steps().drop(columns=["start_s"])),
     "step log is missing column(s) 'start_s'"),
    ("negative-count-late-batch", "s.parquet", _parquet(_with("num_running", 4999, -3)),
     "row 5000, column 'num_running'"),
    ("fraction-of-a-count", "s.parquet", _parquet(_with("num_waiting", 6500, 1.5, "float64")),
     "row 6501, column 'num_waiting': 1.5 is not a whole number"),
    ("count-beyond-int64", "s.parquet", _parquet(_with("kv_blocks_used", 6000, 2.0**70,
                                                       "float64")),
     "row 6001, column 'kv_blocks_used': 1.1805916207174113e+21 is beyond the 64-bit integer"),
    ("uint64-beyond-int64", "s.parquet", _parquet(pa.table({
        **TWO, "num_running": pa.array([2**64 - 1, 1], type=pa.uint64())})),
     "row 1, column 'num_running': 18446744073709551615 is beyond the 64-bit integer range"),
    ("missing-end", "s.parquet", _parquet(_with("end_s", 3000, np.nan)),
     "row 3001, column 'end_s': missing; every step needs its start_s and end_s"),
    ("infinite-end", "s.parquet", _parquet(_with("end_s", 3000, np.inf)),
     "row 3001, column 'end_s': inf is not finite"),
    ("list-start", "s.parquet", _parquet(pa.table({"start_s": [[0.0], [1.0]],
                                                   "end_s": [0.5, 1.5]})),
     "row 1, column 'start_s': [0.0], not a number"),
    ("struct-count", "s.parquet", _parquet(pa.table({**TWO, "num_running": [{"a": 1},
                                                                           {"a": 2}]})),
     "row 1, column 'num_running'"),
    ("ends-before-start", "s.csv", _text("start_s,end_s\n0,1\n5,4\n"),
     "row 2, column 'end_s': step ends before it starts"),
    ("text-start", "s.csv", _text("start_s,end_s\n0,1\nx,2\n"),
     "row 2, column 'start_s': 'x' is not a number"),
    ("huge-csv-count", "s.csv", _text("start_s,end_s,num_running\n0,1,1180591620717411303424\n"),
     "row 1, column 'num_running': 1180591620717411303424 is beyond the 64-bit integer"),
    ("header-only-csv", "s.csv", _text("start_s,end_s\n"), "the step log has no steps"),
    ("empty-csv", "s.csv", _text(""), "the CSV is empty"),
    ("binary-csv", "s.csv", _bytes(bytes(range(256)) * 3), "s.csv"),
    ("empty-jsonl", "s.jsonl", _text(""), "no JSON records found"),
    ("broken-jsonl", "s.jsonl", _text('{"start_s": 0, "end_s": 1}\n{"start_s": \n'),
     "line 2: invalid JSON"),
    ("unknown-extension", "s.txt", _text("start_s,end_s\n0,1\n"), "step logs are .parquet"),
]


@pytest.mark.parametrize(("name", "write", "expected"), [c[1:] for c in STEP_CASES],
                         ids=[c[0] for c in STEP_CASES])
def test_bad_step_log_is_exit_3_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         name: str, write: Callable[[Path], None],
                                         expected: str) -> None:
    path = tmp_path / name
    write(path)
    code, out, err = run_cli(["diagnose", str(TRACE), "--steps", str(path)], capsys)
    assert code == ExitCode.INPUT, err
    assert out == ""
    assert err.startswith(f"error: {path}") and err.count("\n") == 1
    assert expected in err


def test_missing_and_folder_step_logs_are_exit_3(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for path in (tmp_path / "absent.parquet", tmp_path):
        code, _, err = run_cli(["diagnose", str(TRACE), "--steps", str(path)], capsys)
        assert code == ExitCode.INPUT and err.count("\n") == 1 and str(path) in err


@pytest.mark.parametrize("batch_rows", [7, 1 << 18])
def test_a_value_beyond_int64_in_a_late_batch_names_its_row(
        tmp_path: Path, batch_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a sorted step log, streamed, with a count of 2**70 at row 5000 of the file
    from yaotu_trace.data import steplog

    monkeypatch.setattr(steplog, "BATCH_ROWS", batch_rows)
    path = tmp_path / "steps.parquet"
    _parquet(_with("num_preempted", 4999, 2.0**70, "float64"))(path)
    log = ingest.read_steps(path, "--steps")
    assert log.streamed
    with pytest.raises(YaotuError, match=r"row 5000, column 'num_preempted': .* beyond"):
        for _ in log.batches(("num_preempted",)):
            pass


# -- metrics exports ----------------------------------------------------------------------------

RESULT = {"metric": {"__name__": "vllm:num_requests_waiting"}, "values": [[1.0, "1"],
                                                                          [16.0, "2"]]}

METRIC_CASES = [
    ("empty-json", "m.json", "", "line 1, column 1: not valid JSON"),
    ("not-a-query", "m.json", '{"foo": 1}', "field 'data.result': missing or not a list"),
    ("a-string", "m.json", '"text"', "expected a JSON object with 'data.result'"),
    ("an-empty-list", "m.json", "[]", "holds no samples"),
    ("no-series", "m.json", '{"status": "success", "data": {"result": []}}', "holds no samples"),
    ("scalar-result", "m.json", '{"data": {"resultType": "scalar", "result": [1, "2"]}}',
     "field 'data.resultType': 'scalar' holds no time series"),
    ("failed-query", "m.json", '{"status": "error", "error": "bad_data"}',
     "field 'status': 'error' (bad_data)"),
    ("series-not-object", "m.json", '{"data": {"result": [5]}}', "field 'metric.__name__'"),
    ("values-not-list", "m.json",
     '{"data": {"result": [{"metric": {"__name__": "x"}, "values": 5}]}}', "field 'values'"),
    ("not-a-pair", "m.json",
     '{"data": {"result": [{"metric": {"__name__": "x"}, "values": [[1, 2, 3]]}]}}',
     "values[0]: expected a [timestamp, \"value\"] pair"),
    ("infinite-timestamp", "m.json",
     '{"data": {"result": [{"metric": {"__name__": "x"}, "values": [[1e400, "1"]]}]}}',
     "field 'timestamp': inf is not a finite time"),
    ("text-value", "m.json",
     '{"data": {"result": [{"metric": {"__name__": "x"}, "values": [[1, "two"]]}]}}',
     "field 'value': 'two' is not a number"),
    ("bool-timestamp", "m.json",
     '{"data": {"result": [{"metric": {"__name__": "x"}, "values": [[true, "1"]]}]}}',
     "field 'timestamp': True is not a number"),
    ("empty-csv", "m.csv", "", "header lacks column(s)"),
    ("header-only-csv", "m.csv", "timestamp,metric,labels,value\n", "holds no samples"),
    ("nan-timestamp-csv", "m.csv", "timestamp,metric,value\nnan,x,1\n",
     "line 2, field 'timestamp': nan is not a finite time"),
    ("bad-date-csv", "m.csv", "timestamp,metric,value\n2026-13-45,x,1\n",
     "line 2, field 'timestamp': '2026-13-45' is neither Unix seconds nor an ISO 8601 time"),
    ("short-row-csv", "m.csv", "timestamp,metric,value\n1,x\n", "line 2, field 'value'"),
    ("bad-labels-csv", "m.csv", "timestamp,metric,labels,value\n1,x,{=b},1\n",
     "line 2, field 'labels'"),
    ("wrong-extension", "m.yaml", "x", "metrics are read from .json"),
    ("not-text-exposition", "m.prom", "\x00\x01 garbage", "is neither /metrics text"),
]


@pytest.mark.parametrize(("name", "text", "expected"), [c[1:] for c in METRIC_CASES],
                         ids=[c[0] for c in METRIC_CASES])
def test_bad_metrics_export_is_exit_3_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, out, err = run_cli(["diagnose", str(TRACE), "--metrics", str(path)], capsys)
    assert code == ExitCode.INPUT, err
    assert out == ""
    assert err.startswith(f"error: {path}: ") and err.count("\n") == 1
    assert expected in err


def test_binary_and_folder_metrics_are_exit_3(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("m.json", "m.csv"):
        (tmp_path / name).write_bytes(bytes(range(128, 256)) * 4)
    folder = tmp_path / "export.json"
    folder.mkdir()
    for path in (tmp_path / "m.json", tmp_path / "m.csv", folder):
        code, _, err = run_cli(["diagnose", str(TRACE), "--metrics", str(path)], capsys)
        assert code == ExitCode.INPUT and err.count("\n") == 1 and str(path) in err


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400), st.sampled_from(["m.json", "m.csv"]))
def test_random_bytes_never_escape_as_another_exception(tmp_path_factory: pytest.TempPathFactory,
                                                        data: bytes, name: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(data)
    try:
        read_metrics(path)
    except TraceReadError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


def _mutations() -> st.SearchStrategy[str]:
    """The small vLLM export with one value replaced by an arbitrary JSON value."""
    doc = json.loads((FIXTURES / "prom_vllm_small.json").read_text())
    leaf = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(
        max_size=5), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=5), inner, max_size=3), max_leaves=5)

    def mutate(choice: tuple[int, int, object]) -> str:
        series, where, value = choice
        copy = json.loads(json.dumps(doc))
        target = copy["data"]["result"][series % len(copy["data"]["result"])]
        if where == 0:
            target["metric"] = value
        elif where == 1:
            target["values"] = value
        elif where == 2 and target["values"]:
            target["values"][0] = value
        else:
            copy["data"] = value
        return json.dumps(copy)

    return st.tuples(st.integers(0, 7), st.integers(0, 3), leaf).map(mutate)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_mutations())
def test_mutated_json_exports_read_or_fail_in_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                       text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "m.json"
    path.write_text(text)
    try:
        metrics = read_metrics(path)
    except TraceReadError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert np.isfinite(metrics.frame["time_s"].to_numpy()).all()
