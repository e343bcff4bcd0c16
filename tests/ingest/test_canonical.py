"""Canonical Parquet, JSONL and CSV: `write_trace` → `read_trace` round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.schema import LIST_COLUMNS, Trace
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

EXTENSIONS = ("parquet", "jsonl", "csv")


def _full_table() -> pd.DataFrame:
    """Every canonical column except block ids, with missing values in several of them."""
    return pd.DataFrame(
        {
            "request_id": ["a", "b", "c"],
            "arrival_s": [0.0, 0.5, 1.25],
            "tenant": ["t1", None, "t2"],
            "model": ["m", "m", "m2"],
            "adapter": [None, "lora-1", None],
            "session_id": ["s1", "s1", "s2"],
            "instance": ["i0", "i1", "i0"],
            "prompt_len": [3, 2, 0],
            "output_len": [2, 1, 4],
            "prompt_tokens": [[1, 2, 3], [1, 2], []],
            "output_tokens": [[7, 8], None, [1, 2, 3, 4]],
            "scheduled_s": [0.01, 0.6, 1.3],
            "first_token_s": [0.1, np.nan, 1.5],
            "finish_s": [0.2, 0.9, 2.0],
            "token_times_s": [[0.1, 0.2], [0.9], [1.5, 1.6, 1.7, 2.0]],
            "num_preemptions": [0, 1, 0],
            "cached_tokens": [0, 2, 0],
            "prefill_instance": ["p0", "p0", None],
            "decode_instance": ["d0", "d1", None],
        }
    )


def _block_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": [0.0, 1.0],
            "prompt_len": [1000, 512],
            "output_len": [3, 4],
            "prompt_block_ids": [[0, 1], [0]],
        }
    )


def _plain(trace: Trace) -> dict[str, list[object]]:
    """Column values as plain Python objects, lists as lists, missing as None."""
    out: dict[str, list[object]] = {}
    for column in trace.requests.columns:
        values = []
        for value in trace.requests[column].tolist():
            if column in LIST_COLUMNS:
                missing = value is None or value is pd.NA
                values.append(None if missing else [*np.asarray(value).tolist()])
            elif value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
                values.append(None)
            else:
                values.append(value)
        out[column] = values
    return out


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_canonical_round_trip_keeps_every_column(tmp_path: Path, ext: str) -> None:
    # GIVEN a table with every canonical column, written in one format
    table = _full_table()
    path = tmp_path / f"t.{ext}"
    write_trace(table, path)
    # WHEN it is read back
    trace = read_trace(path)
    # THEN names, order, values and missing values survive
    assert trace.format_name == ext
    assert list(trace.requests.columns) == list(table.columns)
    expected = {
        c: [None if (v is None or (isinstance(v, float) and np.isnan(v))) else v for v in values]
        for c, values in table.to_dict("list").items()
    }
    assert _plain(trace) == expected
    assert trace.notes == ()


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_canonical_round_trip_of_a_loaded_trace_is_stable(tmp_path: Path, ext: str) -> None:
    # Writing what the tool read (Arrow lists, nullable ints) and reading again changes nothing.
    first = read_trace(_written(tmp_path / f"a.{ext}", _full_table()))
    second = read_trace(_written(tmp_path / f"b.{ext}", first.requests))
    assert _plain(second) == _plain(first)
    pd.testing.assert_frame_equal(second.requests, first.requests)


def _written(path: Path, table: pd.DataFrame, **kwargs: object) -> Path:
    write_trace(table, path, **kwargs)  # type: ignore[arg-type]
    return path


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv"])
def test_canonical_block_ids_keep_source_block_size(tmp_path: Path, ext: str) -> None:
    path = _written(tmp_path / f"t.{ext}", _block_table(), source_block_size=512)
    trace = read_trace(path)
    assert trace.source_block_size == 512
    assert _plain(trace)["prompt_block_ids"] == [[0, 1], [0]]


def test_canonical_csv_block_ids_without_the_column_need_the_block_size(tmp_path: Path) -> None:
    path = _written(tmp_path / "t.csv", _block_table(), source_block_size=512)
    frame = pd.read_csv(path).drop(columns=["source_block_size"])
    frame.to_csv(path, index=False)
    with pytest.raises(TraceSchemaError, match=r"--source-block-size N"):
        read_trace(path)
    assert read_trace(path, source_block_size=512).source_block_size == 512


def test_canonical_weka_fixture_survives_parquet(tmp_path: Path) -> None:
    # GIVEN a trace read from another format, written as canonical Parquet
    weka = read_trace(FIXTURES / "weka_mini")
    path = _written(tmp_path / "w.parquet", weka.requests, source_block_size=64)
    # THEN the canonical file reads back to the same table and block size
    again = read_trace(path)
    assert again.source_block_size == 64
    pd.testing.assert_frame_equal(again.requests, weka.requests)


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_canonical_written_files_are_detected(tmp_path: Path, ext: str) -> None:
    path = _written(tmp_path / f"t.{ext}", _full_table())
    expected = {
        "parquet": TraceFormat.CANONICAL_PARQUET,
        "jsonl": TraceFormat.CANONICAL_JSONL,
        "csv": TraceFormat.CANONICAL_CSV,
    }[ext]
    assert detect_format(path) is expected


def test_canonical_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    write_trace(_full_table(), tmp_path / "t.parquet")
    write_trace(_full_table(), tmp_path / "t.parquet")  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_canonical_write_unknown_extension_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match=r"cannot write '\.xlsx' files; use \.parquet"):
        write_trace(_full_table(), tmp_path / "t.xlsx")
    assert list(tmp_path.iterdir()) == []


def test_canonical_csv_list_cell_must_be_json(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('arrival_s,prompt_len,output_len,prompt_tokens\n0,2,1,"[1, 2]"\n1,2,1,1;2\n')
    with pytest.raises(TraceReadError, match=r"line 3, column 'prompt_tokens': '1;2'"):
        read_trace(path)


def test_canonical_csv_without_lists_reads_lengths(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0.5,10,3\n1.5,20,4\n")
    trace = read_trace(path)
    assert trace.requests["request_id"].tolist() == ["r0", "r1"]
    assert trace.content_column is None
    assert trace.requests["prompt_len"].tolist() == [10, 20]
