"""Values the schema refuses rather than truncates, and missing token lists.

Counts and ids must fit int64 (2**70 is an error naming its row and column, in every format);
token ids are whole numbers (1.0 is 1, 1.5 an error, never truncated to 1); a `null` token
list is a lengths-only row, and a column of them is the same as no column.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_cli
from yaotu_trace.errors import ExitCode, TraceSchemaError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels.stream import ParquetPrompts
from yaotu_trace.prefix.prepare import prepare

BIG = 2**70


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(arrival_s: float = 0.0, **extra: object) -> dict:
    return {"arrival_s": arrival_s, "prompt_len": 3, "output_len": 1, **extra}


def _error(path: Path, **kwargs: object) -> str:
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path, **kwargs)  # type: ignore[arg-type]
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(str(path)) + 2:]


def _streamed(path: Path) -> None:
    """Load lazily and stream the prompt column, as the replay does."""
    trace = read_trace(path, lazy_content=True)
    assert trace.lazy is not None
    prompts = ParquetPrompts(path=str(path), column="prompt_tokens",
                             prompt_len=trace.requests["prompt_len"].to_numpy(np.int64),
                             source_block_size=None,
                             num_values=trace.lazy.values_in("prompt_tokens"))
    for _ in prompts.batches():
        pass


# --- beyond int64 ------------------------------------------------------------------------------


def test_length_beyond_int64_in_jsonl_and_csv(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_row(), _row(1.0, prompt_len=BIG)])
    assert _error(path) == (f"line 2, column 'prompt_len': {BIG} is beyond int64; token counts "
                            "must be below 2**63")
    csv = tmp_path / "t.csv"
    csv.write_text(f"arrival_s,prompt_len,output_len\n0,3,1\n1,3,{BIG}\n", encoding="utf-8")
    assert _error(csv).startswith(f"line 3, column 'output_len': {BIG} is beyond int64")


def test_length_beyond_int64_as_parquet_uint64(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0, 1.0], "output_len": [1, 1],
                             "prompt_len": pa.array([3, 2**64 - 1], pa.uint64())}), path)
    assert _error(path, lazy_content=True).startswith(
        f"row 2, column 'prompt_len': {2**64 - 1} is beyond int64")


def test_token_id_beyond_int64_in_jsonl(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_row(prompt_tokens=[1, 2, 3]),
                                         _row(1.0, prompt_tokens=[1, BIG, 3])])
    assert _error(path) == (f"line 2, column 'prompt_tokens': {BIG} is beyond int64; ids must be "
                            "below 2**63")


@pytest.mark.parametrize("lazy", [False, True])
def test_token_id_beyond_int64_as_parquet_uint64(tmp_path: Path, lazy: bool) -> None:
    path = tmp_path / "t.parquet"
    tokens = pa.array([[1, 2, 3], [4, 2**64 - 1, 6]], pa.list_(pa.uint64()))
    pq.write_table(pa.table({"arrival_s": [0.0, 1.0], "prompt_len": [3, 3], "output_len": [1, 1],
                             "prompt_tokens": tokens}), path)
    with pytest.raises(TraceSchemaError) as exc:
        _streamed(path) if lazy else read_trace(path)
    assert str(exc.value) == (f"{path}: row 2, column 'prompt_tokens': {2**64 - 1} is beyond "
                              "int64; ids must be below 2**63")


def test_mooncake_hash_id_beyond_int64(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [1, BIG]}]
    path = _jsonl(tmp_path / "m.jsonl", rows)
    assert _error(path).startswith(f"line 2, column 'hash_ids' (read as prompt_block_ids): {BIG} "
                                   "is beyond int64")


def test_otel_values_beyond_int64(tmp_path: Path) -> None:
    def export(start: object, prompt: object) -> dict:
        attrs = [{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": prompt}},
                 {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "2"}}]
        span = {"spanId": "a", "startTimeUnixNano": start, "attributes": attrs}
        return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}

    path = tmp_path / "spans.json"
    path.write_text(json.dumps(export("1000", str(BIG))), encoding="utf-8")
    assert _error(path).endswith(f"column 'prompt_len': {BIG} is beyond int64; token counts "
                                 "must be below 2**63")
    path.write_text(json.dumps(export(str(BIG), "5")), encoding="utf-8")
    assert "field 'startTimeUnixNano' is " in _error(path)


# --- token ids are whole numbers ---------------------------------------------------------------


def test_whole_float_token_ids_are_ids(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_row(prompt_tokens=[1.0, 2.0, 3.0])])
    values = read_trace(path).requests["prompt_tokens"].iloc[0]
    assert np.asarray(values).tolist() == [1, 2, 3]


@pytest.mark.parametrize(("value", "why"), [
    (1.5, "1.5 is not a whole number; ids are integers"),
    ("abc", "'abc' is not a number; list values must be whole numbers"),
    (True, "True is not a number; list values must be whole numbers"),
    ([1], "a nested list is not a number; list values must be whole numbers"),
    (None, "a value inside the list is missing; ids cannot be missing"),
])
def test_token_ids_that_are_not_whole_numbers_name_the_row(tmp_path: Path, value: object,
                                                           why: str) -> None:
    # 1.5 used to be truncated to 1 and count as a prefix hit of a token 1.
    rows = [_row(prompt_tokens=[1, 2, 3]), _row(1.0, prompt_tokens=[1, value, 3])]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    assert _error(path) == f"line 2, column 'prompt_tokens': {why}"


def test_fractional_token_id_in_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('arrival_s,prompt_len,output_len,prompt_tokens\n0,2,1,"[1, 2]"\n'
                    '1,2,1,"[1, 2.5]"\n', encoding="utf-8")
    assert _error(path) == "line 3, column 'prompt_tokens': 2.5 is not a whole number; ids are " \
                           "integers"


@pytest.mark.parametrize("lazy", [False, True])
def test_parquet_double_token_ids(tmp_path: Path, lazy: bool) -> None:
    # GIVEN token ids stored as doubles: whole ones are read as ids, 7.25 is refused
    path = tmp_path / "t.parquet"
    tokens = pa.array([[1.0, 2.0, 3.0], [4.0, 7.25, 6.0]], pa.list_(pa.float64()))
    pq.write_table(pa.table({"arrival_s": [0.0, 1.0], "prompt_len": [3, 3],
                             "output_len": [1, 1], "prompt_tokens": tokens}), path)
    with pytest.raises(TraceSchemaError) as exc:
        _streamed(path) if lazy else read_trace(path)
    assert str(exc.value) == (f"{path}: row 2, column 'prompt_tokens': 7.25 is not a whole "
                              "number; ids are integers")
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0], "prompt_len": [3], "output_len": [1],
                             "prompt_tokens": pa.array([[1.0, 2.0, 3.0]],
                                                       pa.list_(pa.float64()))}), whole)
    if lazy:
        _streamed(whole)
    else:
        assert np.asarray(read_trace(whole).requests["prompt_tokens"].iloc[0]).tolist() == [
            1, 2, 3]


def test_token_times_must_be_numbers(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_row(token_times_s=[0.1, "soon"])])
    assert _error(path) == ("line 1, column 'token_times_s': 'soon' is not a number; list "
                            "values must be numbers of seconds")


def test_a_list_column_holding_a_number_names_the_row(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_row(prompt_tokens=[1, 2, 3]), _row(prompt_tokens=7)])
    assert _error(path) == ("line 2, column 'prompt_tokens': 7 is not a list; write a list of "
                            "integers, e.g. [1, 2]")


# --- missing token lists -----------------------------------------------------------------------


def _lengths_only(folder: Path) -> dict[str, Path]:
    """The same 6 requests without prompt tokens, spelled four ways."""
    rows = [_row(i * 0.5, prompt_len=3 + i, output_len=1 + i) for i in range(6)]
    files = {
        "no key": _jsonl(folder / "nokey.jsonl", rows),
        "jsonl null": _jsonl(folder / "null.jsonl", [{**r, "prompt_tokens": None} for r in rows]),
    }
    csv = folder / "null.csv"
    csv.write_text("arrival_s,prompt_len,output_len,prompt_tokens\n" + "".join(
        f"{r['arrival_s']},{r['prompt_len']},{r['output_len']},\n" for r in rows))
    files["csv empty"] = csv
    parquet = folder / "null.parquet"
    table = pa.Table.from_pylist(rows).append_column(
        "prompt_tokens", pa.nulls(len(rows), pa.large_list(pa.int64())))
    pq.write_table(table, parquet)
    files["parquet null"] = parquet
    return files


@pytest.mark.parametrize("lazy", [False, True])
def test_null_token_lists_are_the_same_as_no_column(tmp_path: Path, lazy: bool) -> None:
    files = _lengths_only(tmp_path)
    expected = read_trace(files["no key"]).requests
    for name, path in files.items():
        trace = read_trace(path, lazy_content=lazy)
        assert trace.content_column is None, name
        assert "prompt_tokens" not in trace.column_names, name
        pd.testing.assert_frame_equal(trace.requests, expected, obj=name)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_cli_null_token_lists_give_the_report_of_no_column(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The JSONL with "prompt_tokens": null in every row used to fail analyze and report.
    files = _lengths_only(tmp_path)
    docs = {}
    for name, path in files.items():
        code, out, err = run_cli([command, str(path), "--format", "json"], capsys)
        assert code == ExitCode.OK, (name, err)
        doc = json.loads(out)
        for key in ("path", "format"):
            doc["input"].pop(key)
        docs[name] = doc
    assert all(doc == docs["no key"] for doc in docs.values())


def test_mixed_null_token_lists_are_lengths_only_rows(tmp_path: Path) -> None:
    # GIVEN one request with tokens and one without (null): the same in JSONL and Parquet
    rows = [_row(prompt_tokens=[1, 2, 3]), _row(1.0, prompt_tokens=None)]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for source in (path, parquet):
        trace = read_trace(source)
        assert trace.content_column == "prompt_tokens"
        assert trace.requests["prompt_tokens"].isna().tolist() == [False, True]
        # THEN the row without tokens is replayed with no content (it can never hit)
        assert np.diff(prepare(trace).unit_offsets()).tolist() == [3, 0]
