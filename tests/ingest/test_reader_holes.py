"""Inputs that readers meet in the wild: byte-order marks, CRLF, JSON arrays, ragged or
non-UTF-8 CSV, empty files, odd block sizes and times. Each reads correctly or is a one-line
error naming the file, the line and the fix."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from yaotu_trace.errors import TraceReadError, TraceSchemaError, YaotuError
from yaotu_trace.ingest import read_trace

ROWS = [{"arrival_s": 0.0, "prompt_len": 3, "output_len": 1},
        {"arrival_s": 1.5, "prompt_len": 4, "output_len": 2}]
CSV = "arrival_s,prompt_len,output_len\n0.0,3,1\n1.5,4,2\n"


def _text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def _jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _error(path: Path, kind: type[YaotuError] = YaotuError) -> str:
    with pytest.raises(kind) as exc:
        read_trace(path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(str(path)) + 2:]


@pytest.mark.parametrize(("name", "text"), [
    ("bom.jsonl", "\ufeff" + _jsonl_text(ROWS)),
    ("crlf.jsonl", _jsonl_text(ROWS).replace("\n", "\r\n")),
    ("bom.csv", "\ufeff" + CSV),
    ("crlf.csv", CSV.replace("\n", "\r\n")),
])
def test_bom_and_crlf_read_like_plain_files(tmp_path: Path, name: str, text: str) -> None:
    plain = _text(tmp_path / f"plain{Path(name).suffix}",
                  _jsonl_text(ROWS) if name.endswith("jsonl") else CSV)
    got = read_trace(_text(tmp_path / name, text))
    pd.testing.assert_frame_equal(got.requests, read_trace(plain).requests)


def test_tsv_is_tab_separated(tmp_path: Path) -> None:
    for name in ("t.tsv", "t.tsv.gz"):
        text = CSV.replace(",", "\t")
        path = tmp_path / name
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
        pd.testing.assert_frame_equal(read_trace(path).requests,
                                      read_trace(_text(tmp_path / "t.csv", CSV)).requests)


def test_json_array_gets_the_json_lines_fix(tmp_path: Path) -> None:
    fix = "write it as JSON Lines (e.g. jq -c '.[]' in.json > out.jsonl)"
    assert _error(_text(tmp_path / "t.jsonl", json.dumps(ROWS, indent=1))) == (
        "line 1 is a JSON array, not one request object per line; " + fix)
    assert _error(_text(tmp_path / "t.json", json.dumps(ROWS))).startswith(
        "a JSON array of records; write one request object per line as JSON Lines")


def test_ragged_csv_row_names_its_line(tmp_path: Path) -> None:
    path = _text(tmp_path / "t.csv", CSV + "2.0,5,1,9\n")
    assert _error(path, TraceReadError) == (
        "line 4: 4 fields where the header has 3; quote values that contain commas, or fix "
        "the row")


def test_non_utf8_inputs(tmp_path: Path) -> None:
    assert _error(_text(tmp_path / "t.csv", "arrival_s,prompt_len,output_len,model\n"
                        "0,3,1,caf\u00e9\n", "latin-1"), TraceReadError).startswith(
        "not UTF-8 text (")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(_jsonl_text(ROWS).encode() + b'{"arrival_s": 2, "model": "\xe9"}\n')
    assert _error(jsonl, TraceReadError).startswith("line 3: invalid JSON (")


@pytest.mark.parametrize(("name", "expected"), [
    ("t.jsonl", "no JSON records found; check the file is not empty"),
    ("t.csv", "the CSV is empty; it needs a header line and one line per row"),
    ("t.parquet", "the file is empty (0 bytes)"),
    ("t.json", "cannot tell the trace format of this JSON document"),
])
def test_empty_files(tmp_path: Path, name: str, expected: str) -> None:
    assert _error(_text(tmp_path / name, ""), TraceReadError).startswith(expected)


def test_header_only_csv_has_no_requests(tmp_path: Path) -> None:
    assert _error(_text(tmp_path / "t.csv", "arrival_s,prompt_len,output_len\n"),
                  TraceSchemaError).startswith("the trace has no requests")


@pytest.mark.parametrize(("value", "expected"), [
    ("0", "line 2, column 'source_block_size': 0 is not a whole number of tokens per id"),
    ('"16"', "line 2, column 'source_block_size': '16' is not a whole number of tokens per"),
    ("[16]", "line 2, column 'source_block_size': [16] is not a whole number of tokens per"),
    ("32", "line 2, column 'source_block_size': 32 differs from 16 on line 1; one trace has"),
])
def test_bad_source_block_size(tmp_path: Path, value: str, expected: str) -> None:
    first = {**ROWS[0], "prompt_block_ids": [1], "source_block_size": 16}
    second = json.dumps({**ROWS[1], "prompt_block_ids": [1]})[:-1] + (
        f', "source_block_size": {value}}}')
    path = _text(tmp_path / "t.jsonl", json.dumps(first) + "\n" + second + "\n")
    assert _error(path, TraceSchemaError).startswith(expected)


@pytest.mark.parametrize(("arrival", "expected"), [
    ("Infinity", "line 2, column 'arrival_s': inf is not finite; give a finite number"),
    ("1.7e15", "line 2, column 'arrival_s': 1.7e+15 s is beyond 1e12 s; times are seconds: "
               "convert ms, us or ns to s"),
    ('"soon"', "line 2, column 'arrival_s': 'soon' is not a number; give a number of seconds"),
])
def test_bad_arrival_times(tmp_path: Path, arrival: str, expected: str) -> None:
    text = json.dumps(ROWS[0]) + f'\n{{"arrival_s": {arrival}, "prompt_len": 1, ' \
                                 '"output_len": 1}\n'
    assert _error(_text(tmp_path / "t.jsonl", text), TraceSchemaError) == expected


def test_token_times_must_be_finite_and_in_seconds(tmp_path: Path) -> None:
    rows = [{**ROWS[0], "token_times_s": [0.1, 2e13]}]
    assert _error(_text(tmp_path / "t.jsonl", _jsonl_text(rows)), TraceSchemaError) == (
        "line 1, column 'token_times_s': 2e+13 s is beyond 1e12 s; times are seconds: "
        "convert ms, us or ns to s")


def test_deeply_nested_json_is_invalid_json(tmp_path: Path) -> None:
    path = _text(tmp_path / "t.jsonl", json.dumps(ROWS[0]) + "\n" + "[" * 100_000 + "\n")
    assert _error(path, TraceReadError) == (
        "line 2: invalid JSON (nested too deeply); fix or remove the line")


def test_folder_given_for_a_file_format(tmp_path: Path) -> None:
    from yaotu_trace.ingest.formats import TraceFormat

    with pytest.raises(TraceReadError, match=r"is a folder, and a jsonl trace is one file"):
        read_trace(tmp_path, fmt=TraceFormat.CANONICAL_JSONL)
