"""Every validation path of `schema.normalize` and the read errors of `read_trace`.

Each error must be one line naming the file, the row and the column, and saying how to fix it;
oddities that do not stop the analysis become notes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import ConfigError, TraceReadError, TraceSchemaError
from yaotu_trace.ingest import parse_column_map, read_trace
from yaotu_trace.ingest.formats import TraceFormat


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _ok(arrival_s: float = 0.0, **extra: object) -> dict:
    return {"arrival_s": arrival_s, "prompt_len": 4, "output_len": 2, **extra}


def _raw(**columns: list[object]) -> RawTrace:
    base: dict[str, list[object]] = {"arrival_s": [0.0, 1.0], "prompt_len": [4, 4],
                                     "output_len": [2, 2]}
    return RawTrace(requests=pd.DataFrame({**base, **columns}), format_name="test")


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# --- required columns and values ---------------------------------------------------------------


def test_validation_missing_required_column_names_it_and_the_fix(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [{"arrival_s": 0, "prompt_len": 3}])
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path)
    message = _one_line(exc)
    assert "missing required column 'output_len'" in message
    assert "--map output_len=<source column>" in message
    assert str(path) in message


def test_validation_non_numeric_value_names_line_and_column(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), _ok(1.0, prompt_len="many")])
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path)
    assert _one_line(exc) == (
        f"{path}: line 2, column 'prompt_len': 'many' is not a number; give a number of tokens"
    )


def test_validation_non_numeric_csv_cell_names_its_file_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,4,2\nsoon,4,2\n", encoding="utf-8")
    with pytest.raises(
        TraceSchemaError,
        match=r"line 3, column 'arrival_s': 'soon' is not a number; give a number of seconds",
    ):
        read_trace(path)


def test_validation_blank_lines_do_not_shift_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_ok()) + "\n\n" + json.dumps(_ok(1.0, output_len=-1)) + "\n")
    with pytest.raises(TraceSchemaError, match=r"line 3, column 'output_len'"):
        read_trace(path)


def test_validation_negative_length_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), _ok(1.0, output_len=-3)])
    with pytest.raises(
        TraceSchemaError, match=r"line 2, column 'output_len': -3 is negative; token counts"
    ):
        read_trace(path)


def test_validation_non_integer_length_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(prompt_len=2.5)])
    with pytest.raises(
        TraceSchemaError, match=r"line 1, column 'prompt_len': 2\.5 is not a whole number"
    ):
        read_trace(path)


def test_validation_boolean_length_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), _ok(1.0, output_len=True)])
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'output_len': True is not a"):
        read_trace(path)


def test_validation_infinite_time_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\ninf,4,2\n", encoding="utf-8")
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'arrival_s': inf is not finite"):
        read_trace(path)


def test_validation_missing_required_value_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), {"arrival_s": 1.0, "prompt_len": 4}])
    with pytest.raises(
        TraceSchemaError, match=r"line 2, column 'output_len': value is missing"
    ):
        read_trace(path)


def test_validation_whole_float_lengths_are_accepted(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(prompt_len=4.0)])
    assert read_trace(path).requests["prompt_len"].tolist() == [4]


def test_validation_empty_table_is_an_error() -> None:
    empty = RawTrace(requests=pd.DataFrame({"arrival_s": []}), format_name="test")
    with pytest.raises(TraceSchemaError, match=r"f\.jsonl: the trace has no requests"):
        normalize(empty, "f.jsonl")


# --- request ids -----------------------------------------------------------------------------


def test_validation_duplicate_request_ids_name_both_rows(tmp_path: Path) -> None:
    rows = [_ok(request_id="a"), _ok(1.0, request_id="b"), _ok(2.0, request_id="a")]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path)
    assert _one_line(exc) == (
        f"{path}: line 3, column 'request_id': duplicate id 'a' (also at line 1); "
        "request ids must be unique"
    )


def test_validation_missing_request_id_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(request_id="a"), _ok(1.0)])
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'request_id': value is missing"):
        read_trace(path)


def test_validation_request_ids_are_made_when_absent(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), _ok(1.0)])
    assert read_trace(path).requests["request_id"].tolist() == ["r0", "r1"]


# --- prompt content ---------------------------------------------------------------------------


def test_validation_prompt_len_disagreeing_with_tokens(tmp_path: Path) -> None:
    rows = [_ok(prompt_tokens=[1, 2, 3, 4]), _ok(1.0, prompt_tokens=[1, 2, 3])]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path)
    assert _one_line(exc) == (
        f"{path}: line 2, column 'prompt_len': 4 disagrees with the 3 ids in 'prompt_tokens'; "
        "fix the length or the token list"
    )


def test_validation_prompt_len_derived_from_tokens(tmp_path: Path) -> None:
    rows = [{"arrival_s": 0, "output_len": 1, "prompt_tokens": [5, 6, 7]}]
    trace = read_trace(_jsonl(tmp_path / "t.jsonl", rows))
    assert trace.requests["prompt_len"].tolist() == [3]


def test_validation_block_id_count_inconsistent_with_prompt_len(tmp_path: Path) -> None:
    rows = [_ok(prompt_len=40, prompt_block_ids=[1, 2, 3]),
            _ok(1.0, prompt_len=40, prompt_block_ids=[1, 2, 3, 4, 5, 6])]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceSchemaError) as exc:
        read_trace(path, source_block_size=16)
    assert _one_line(exc) == (
        f"{path}: line 2, column 'prompt_block_ids': 6 ids cannot cover prompt_len 40 at 16 "
        "tokens per id (expected 2 or 3); check --source-block-size"
    )


def test_validation_block_ids_need_a_source_block_size(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(prompt_block_ids=[1])])
    with pytest.raises(TraceSchemaError, match=r"pass --source-block-size N"):
        read_trace(path)


def test_validation_list_of_non_integers_names_the_row(tmp_path: Path) -> None:
    rows = [_ok(prompt_tokens=[1, 2, 3, 4]), _ok(1.0, prompt_tokens=["a", "b", "c", "d"])]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(
        TraceSchemaError,
        match=r"line 2, column 'prompt_tokens': 'a' is not a number; list values must be whole",
    ):
        read_trace(path)


def test_validation_negative_token_id_is_an_error(tmp_path: Path) -> None:
    rows = [_ok(prompt_tokens=[1, 2, 3, 4]), _ok(1.0, prompt_tokens=[1, -2, 3, 4])]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'prompt_tokens': token ids"):
        read_trace(path)


def test_validation_negative_block_ids_are_allowed(tmp_path: Path) -> None:
    # Block ids are hashes: any int64, including negative ones.
    path = _jsonl(tmp_path / "t.jsonl", [_ok(prompt_len=32, prompt_block_ids=[-5, 7])])
    assert len(read_trace(path, source_block_size=16).requests) == 1


def test_validation_source_where_names_the_location() -> None:
    raw = RawTrace(
        requests=pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": [1, -1],
                               "output_len": [1, 1],
                               SOURCE_WHERE: ["a.json, request 1", "a.json, request 2"]}),
        format_name="test",
    )
    with pytest.raises(TraceSchemaError, match=r"^dir: a\.json, request 2, column 'prompt_len'"):
        normalize(raw, "dir")


# --- order and timing notes ------------------------------------------------------------------


def test_validation_unsorted_arrivals_sorted_stably_with_note(tmp_path: Path) -> None:
    rows = [_ok(5.0, request_id="late"), _ok(1.0, request_id="tie1"),
            _ok(1.0, request_id="tie2"), _ok(0.5, request_id="first")]
    trace = read_trace(_jsonl(tmp_path / "t.jsonl", rows))
    assert trace.requests["request_id"].tolist() == ["first", "tie1", "tie2", "late"]
    assert trace.requests["arrival_s"].tolist() == [0.5, 1.0, 1.0, 5.0]
    assert trace.notes == (
        "arrivals were out of order at 2 place(s); requests were sorted stably by arrival_s "
        "(ties keep file order)",
    )


def test_validation_sorted_arrivals_give_no_note(tmp_path: Path) -> None:
    rows = [_ok(1.0), _ok(1.0), _ok(2.0)]
    assert read_trace(_jsonl(tmp_path / "t.jsonl", rows)).notes == ()


def test_validation_first_token_before_arrival_is_a_note(tmp_path: Path) -> None:
    rows = [_ok(1.0, first_token_s=0.5, finish_s=2.0), _ok(2.0, first_token_s=2.5, finish_s=3.0)]
    trace = read_trace(_jsonl(tmp_path / "t.jsonl", rows))
    assert len(trace.requests) == 2
    assert trace.notes == (
        "1 request(s) have 'first_token_s' first token before arrival; their derived times are "
        "skipped",
    )


def test_validation_other_timing_inconsistencies_are_notes() -> None:
    raw = _raw(scheduled_s=[-1.0, 1.5], first_token_s=[0.5, 2.0], finish_s=[0.4, 3.0])
    notes = normalize(raw, "f").notes
    assert any("'scheduled_s' scheduled before arrival" in n for n in notes)
    assert any("1 request(s) have 'finish_s' finished before first token" in n for n in notes)


def test_validation_reader_notes_come_first() -> None:
    raw = RawTrace(requests=_raw().requests.iloc[::-1], format_name="test", notes=("from reader",))
    assert normalize(raw, "f").notes[0] == "from reader"


def test_validation_extra_columns_are_dropped(tmp_path: Path) -> None:
    rows = [_ok(comment="x", request_id="a")]
    trace = read_trace(_jsonl(tmp_path / "t.jsonl", rows))
    assert list(trace.requests.columns) == ["request_id", "arrival_s", "prompt_len", "output_len"]


# --- files ----------------------------------------------------------------------------------


def test_validation_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError) as exc:
        read_trace(tmp_path / "nope.jsonl")
    assert _one_line(exc) == f"{tmp_path / 'nope.jsonl'}: no such file; check the path"


def test_validation_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_trace(pd.DataFrame([_ok()]), path)
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    assert _one_line(exc) == (f"{path}: the Parquet file is cut short (its footer is missing); "
                              "copy it again or re-export the trace")


def test_validation_text_named_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_text("arrival_s,prompt_len\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"not a Parquet file \(it does not start with"):
        read_trace(path)


def test_validation_corrupt_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_ok()) + '\n{"arrival_s": 1, "prompt_len": \n', encoding="utf-8")
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    message = _one_line(exc)
    assert message.startswith(f"{path}: line 2: invalid JSON (")
    assert message.endswith("fix or remove the line")


def test_validation_jsonl_line_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_ok()) + "\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"line 2: expected a JSON object, got list"):
        read_trace(path, fmt=TraceFormat.CANONICAL_JSONL)


def test_validation_empty_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"no JSON records found"):
        read_trace(path)
    with pytest.raises(TraceReadError, match=r"no JSON records found"):
        read_trace(path, fmt=TraceFormat.CANONICAL_JSONL)


def test_validation_unknown_extension_names_the_formats(tmp_path: Path) -> None:
    path = tmp_path / "t.xlsx"
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    message = _one_line(exc)
    assert "unknown trace format '.xlsx'" in message
    for fmt in TraceFormat:
        assert fmt.value in message


def test_validation_unrecognised_jsonl_keys_name_the_formats(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [{"when": 1, "tokens": 3}])
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    message = _one_line(exc)
    assert "cannot tell the trace format from the keys of line 1 (tokens, when)" in message
    assert "--map arrival_s=<key>" in message and "mooncake" in message


def test_validation_column_map_renames(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [{"arrival_s": 0, "in": 3, "out": 1}])
    mapping = parse_column_map(["prompt_len=in", "output_len=out"])
    trace = read_trace(path, column_map=mapping)
    assert trace.requests["prompt_len"].tolist() == [3]


def test_validation_column_map_of_absent_column(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok()])
    with pytest.raises(TraceSchemaError, match=r"--map names column\(s\) 'tokens' that the file"):
        read_trace(path, column_map={"tokens": "prompt_len"})


@pytest.mark.parametrize(
    ("pair", "expected"),
    [("prompt_len", r"write it as canonical=source"), ("size=x", r"'size' is not a canonical")],
)
def test_validation_bad_column_map_option(pair: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_column_map([pair])


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv"])
def test_validation_input_file_byte_identical_after_reading(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"t.{ext}"
    write_trace(pd.DataFrame([_ok(3.0), _ok(1.0)]), path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    stat = path.stat()
    read_trace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_validation_input_file_unchanged_when_reading_fails(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_ok(), _ok(1.0, prompt_len=-1)])
    before = path.read_bytes()
    with pytest.raises(TraceSchemaError):
        read_trace(path)
    assert path.read_bytes() == before


# --- step logs -------------------------------------------------------------------------------


def test_validation_step_log_attached_and_checked(tmp_path: Path) -> None:
    trace_path = _jsonl(tmp_path / "t.jsonl", [_ok()])
    steps = tmp_path / "steps.csv"
    steps.write_text("start_s,end_s,num_running\n0.2,0.3,1\n0.0,0.1,1\n", encoding="utf-8")
    trace = read_trace(trace_path, steps_path=steps)
    assert trace.steps is not None and trace.steps.frame()["start_s"].tolist() == [0.0, 0.2]
    steps.write_text("start_s,end_s\n0.0,0.1\n0.5,0.2\n", encoding="utf-8")
    with pytest.raises(TraceSchemaError, match=r"row 2, column 'end_s': step ends before it"):
        read_trace(trace_path, steps_path=steps)
    steps.write_text("start_s\n0.0\n", encoding="utf-8")
    with pytest.raises(TraceSchemaError, match=r"missing column\(s\) 'end_s'"):
        read_trace(trace_path, steps_path=steps)
    with pytest.raises(TraceReadError, match=r"no such step log"):
        read_trace(trace_path, steps_path=tmp_path / "none.csv")
