"""Mooncake (FAST'25) reader: the two public files and small files built in each test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace

from yaotu_trace.data.schema import list_arrays
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

# name → (rows, Σ input_length, Σ len(hash_ids), last timestamp s, sha256 prefix)
PUBLIC = {
    "conversation_trace.jsonl": (12_031, 144_793_823, 288_500, 3_536.999, "b8cbb061a85206d7"),
    "synthetic_trace.jsonl": (3_993, 61_194_628, 121_877, 1_022.025, "bd070915a98fc0ed"),
}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(ts: object, n: int, ids: list[int]) -> dict:
    return {"timestamp": ts, "input_length": n, "output_length": 3, "hash_ids": ids}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_mooncake_public_counts_and_sums(name: str) -> None:
    rows, prompt_sum, ids_sum, last_s, _ = PUBLIC[name]
    trace = read_trace(shared_trace(f"mooncake/{name}"))
    req = trace.requests
    assert trace.format_name == "mooncake"
    assert trace.source_block_size == 512
    assert len(req) == rows and trace.rows_read == rows
    assert int(req["prompt_len"].sum()) == prompt_sum
    offsets, _ = list_arrays(req["prompt_block_ids"])
    assert int(offsets[-1]) == ids_sum
    assert req["arrival_s"].iloc[0] == 0.0
    assert req["arrival_s"].iloc[-1] == pytest.approx(last_s)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_mooncake_public_ceil_rule(name: str) -> None:
    # The trailing partial block has an id: len(hash_ids) == ceil(input_length / 512).
    trace = read_trace(shared_trace(f"mooncake/{name}"))
    offsets, _ = list_arrays(trace.requests["prompt_block_ids"])
    prompt = trace.requests["prompt_len"].to_numpy(dtype=np.int64)
    assert np.array_equal(np.diff(offsets), -(-prompt // 512))


def test_mooncake_public_conversation_details() -> None:
    trace = read_trace(shared_trace("mooncake/conversation_trace.jsonl"))
    req = trace.requests
    offsets, values = list_arrays(req["prompt_block_ids"])
    # Every request starts with the shared block 0; file order is already arrival order.
    assert np.all(values[offsets[:-1]] == 0)
    assert req["request_id"].tolist()[:2] == ["r0", "r1"]
    assert req["arrival_s"].nunique() == 1180
    assert not any("out of order" in n for n in trace.notes)
    # The first row: 6,758 tokens in 14 ids (13 full blocks and a 102-token tail).
    assert int(req["prompt_len"].iloc[0]) == 6758 and int(offsets[1]) == 14
    assert round(float(req["prompt_len"].mean()), 1) == 12_035.1
    assert round(float(req["output_len"].mean()), 1) == 342.6


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_mooncake_public_detected_and_unchanged(name: str) -> None:
    path = shared_trace(f"mooncake/{name}")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert before.startswith(PUBLIC[name][4])
    assert detect_format(path) is TraceFormat.MOONCAKE
    read_trace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_mooncake_ms_timestamps_become_seconds(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(0, 600, [0, 1]), _row(1500, 512, [0])])
    trace = read_trace(path)
    assert trace.requests["arrival_s"].tolist() == [0.0, 1.5]


def test_mooncake_floor_count_is_also_accepted(tmp_path: Path) -> None:
    # 600 tokens: 1 id (floor) or 2 ids (ceil) are both consistent with 512-token blocks.
    path = _write(tmp_path / "t.jsonl", [_row(0, 600, [0]), _row(1, 600, [0, 1])])
    assert len(read_trace(path).requests) == 2


def test_mooncake_wrong_id_count_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(0, 600, [0, 1]), _row(5, 600, [0, 1, 2])])
    with pytest.raises(
        TraceSchemaError,
        match=r"line 2, column 'hash_ids' \(read as prompt_block_ids\): 3 ids cannot cover "
        r"prompt_len 600 at 512 tokens per id \(expected 1 or 2\)",
    ):
        read_trace(path)


def test_mooncake_non_numeric_timestamp_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(0, 512, [0]), _row("later", 512, [0])])
    with pytest.raises(TraceSchemaError,
                       match=r"line 2, column 'timestamp' \(read as arrival_s\): 'later'"):
        read_trace(path)


@pytest.mark.parametrize("bom", [False, True])  # read whole by pyarrow, or line by line
def test_mooncake_absurd_timestamp_says_the_column_is_milliseconds(tmp_path: Path,
                                                                   bom: bool) -> None:
    """5e15 ms is 5e12 s, beyond the clock: the fix is not "convert ms to s" (the reader did),
    but that the value is in another unit or corrupt."""
    lines = 3
    rows = [_row(t, 512, [t]) for t in range(lines)] + [_row(5 * 10**15, 512, [0])]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path = tmp_path / "t.jsonl"
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    with pytest.raises(TraceSchemaError) as err:
        read_trace(path)
    assert f"line {lines + 1}, column 'timestamp' (read as arrival_s): 5e+12 s is beyond" in str(
        err.value)
    assert "in milliseconds" in str(err.value) and "convert ms" not in str(err.value)


def test_mooncake_unsorted_timestamps_sorted_with_note(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(2000, 512, [0]), _row(1000, 512, [1])])
    trace = read_trace(path)
    assert trace.requests["request_id"].tolist() == ["r1", "r0"]
    assert any("out of order at 1 place(s)" in n for n in trace.notes)


def test_mooncake_corrupt_line_names_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_row(0, 512, [0])) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"t\.jsonl: line 2: invalid JSON"):
        read_trace(path, fmt=TraceFormat.MOONCAKE)


def _both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """The trace read whole by pyarrow when it can be, and read line by line."""
    from yaotu_trace.ingest.traces import mooncake

    fast = read_trace(path)
    monkeypatch.setattr(mooncake, "_columnar", lambda path: None)
    return fast, read_trace(path)


def _same(a: object, b: object) -> None:
    import pandas as pd

    pd.testing.assert_frame_equal(a.requests, b.requests)  # type: ignore[attr-defined]
    assert (a.notes, a.rows_read) == (b.notes, b.rows_read)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_mooncake_read_whole_by_pyarrow_equals_line_by_line(name: str, monkeypatch) -> None:
    from yaotu_trace.ingest.traces import mooncake

    path = shared_trace(f"mooncake/{name}")
    assert mooncake._columnar(path) is not None
    _same(*_both_ways(path, monkeypatch))


@pytest.mark.parametrize("text", [
    # a repeated key, a blank line, a null, a float time, a `":` inside a string time, a
    # null block id
    '{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2], '
    '"timestamp": 7}\n',
    '\n',
    '{"timestamp": 5, "input_length": null, "output_length": 3, "hash_ids": [1, 2]}\n',
    '{"timestamp": 5.5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n',
    '{"timestamp": "x\\":", "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n',
    '{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, null]}\n',
])
def test_mooncake_unusual_files_are_read_line_by_line(text: str, tmp_path: Path,
                                                      monkeypatch) -> None:
    from yaotu_trace.ingest.traces import mooncake

    # GIVEN a valid first line and one unusual line (refused or read as the lines say)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_row(0, 600, [0, 1])) + "\n" + text, encoding="utf-8")
    # THEN pyarrow's table is not taken, and the result is the line-by-line reader's
    assert mooncake._columnar(path) is None
    try:
        fast = read_trace(path)
    except (TraceReadError, TraceSchemaError) as exc:
        with pytest.raises(type(exc)) as slow:
            _both_ways(path, monkeypatch)
        assert str(slow.value) == str(exc)
    else:
        _same(fast, _both_ways(path, monkeypatch)[1])


def test_keys_the_reader_does_not_use_are_named(tmp_path: Path) -> None:
    """A record's other keys are counted and named in a note, never dropped silently."""
    rows = [{**_row(0, 10, [1]), "priority": 1}, {**_row(3, 10, [1]), "priority": 2,
                                                  "user": "a"}]
    trace = read_trace(_write(tmp_path / "t.jsonl", rows))
    assert trace.notes == ("fields in the file that the trace does not use, with the number "
                           "of 2 records holding each: priority (2), user (1)",)
    assert list(trace.requests["prompt_len"]) == [10, 10]
    assert read_trace(_write(tmp_path / "u.jsonl", [_row(0, 10, [1])])).notes == ()
