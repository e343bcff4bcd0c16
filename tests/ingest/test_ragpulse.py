"""RAGPulse reader: the public trace and small traces built in each test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, shared_trace

from yaotu_trace.data.schema import list_arrays, normalize
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.traces.ragpulse import read_ragpulse

WEEK_S = 604_800
TABLES = {
    "1_sys_prompt.jsonl": "sys_prompt_id",
    "2_passages.jsonl": "passage_id",
    "3_history.jsonl": "history_id",
    "4_user_input.jsonl": "user_input_id",
    "5_web_search.jsonl": "web_search_id",
}
# Chunk id → token length, one global id space as in the public trace.
CHUNKS = {
    "passage_id": {0: 5, 1: 3, 2: 4},
    "sys_prompt_id": {3: 8, 4: 2},
    "history_id": {5: 1},
    "web_search_id": {6: 2},
    "user_input_id": {7: 1, 8: 2},
}


def _row(ts: str, session: str, *, passages: list[int], user: int = 7, extra: int = 3) -> dict:
    chunks = {"sys_prompt": [3, 4], "passages_ids": passages, "history": [5],
              "web_search": [], "user_input": [user]}
    lengths = {**CHUNKS["passage_id"], **CHUNKS["sys_prompt_id"], **CHUNKS["history_id"],
               **CHUNKS["user_input_id"], **CHUNKS["web_search_id"]}
    n = sum(lengths.get(c, 1) for ids in chunks.values() for c in ids) + extra
    return {"timestamp": ts, "input_length": n, "output_length": 5, "hash_ids": chunks,
            "session_id": session}


def _write(folder: Path, rows: list[dict], *, tables: bool = True, blank_tail: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "0_trace.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    trace.write_text(text + ("\n" if blank_tail else ""), encoding="utf-8")
    if tables:
        for name, key in TABLES.items():
            lines = [json.dumps({key: i, "token_length": n}) for i, n in CHUNKS[key].items()]
            (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return trace


def _session(epoch_ms: int, k: int) -> str:
    return f"{epoch_ms}-{k:012d}"


# --- the public trace ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def public() -> object:
    return read_trace(shared_trace("ragpulse/0_trace.jsonl"))


def test_ragpulse_public_counts_and_lengths(public) -> None:
    # GIVEN the public trace (7,106 requests, section 3.4 of the format reference)
    req = public.requests
    # THEN every row is read, lengths and sessions map directly
    assert public.format_name == "ragpulse"
    assert public.rows_read == 7106 and len(req) == 7106
    assert int(req["prompt_len"].sum()) == 20_917_099
    assert int(req["output_len"].sum()) == 2_012_676
    assert int(req["prompt_len"].min()) == 1052 and int(req["prompt_len"].max()) == 7712
    assert req["session_id"].nunique() == 3990
    assert public.source_block_size is None


def test_ragpulse_public_tokens_cover_each_prompt(public) -> None:
    offsets, values = list_arrays(public.requests["prompt_tokens"])
    assert np.array_equal(np.diff(offsets), public.requests["prompt_len"].to_numpy(dtype=np.int64))
    assert values.min() >= 0


def test_ragpulse_public_runs_stitched_one_week_apart(public) -> None:
    arrival = public.requests["arrival_s"].to_numpy()
    # Run 2 (lines 3801-7106) moves +7 days: span 1,209,321 s and no reordering needed.
    assert np.all(np.diff(arrival) >= 0)
    assert arrival[0] == 82.0
    assert arrival[-1] - arrival[0] == 1_209_321.0
    # File order survives: the first line of run 2 follows the last line of run 1.
    assert public.requests["request_id"].iloc[3799] == "line3800"
    assert public.requests["request_id"].iloc[3800] == "line3801"
    assert arrival[3800] == WEEK_S + 0.0
    notes = " ".join(public.notes)
    assert "2 sorted runs: lines 1-3800, lines 3801-7106" in notes
    assert "lines 3801-7106 by +604,800 s" in notes
    assert "pseudo-tokens" in notes
    assert "9 session id(s)" in notes and "20 request(s)" in notes


def test_ragpulse_public_unstitched_sorts_stably_with_note() -> None:
    path = shared_trace("ragpulse/0_trace.jsonl")
    trace = normalize(read_ragpulse(path, stitch_runs=False), str(path))
    arrival = trace.requests["arrival_s"].to_numpy()
    assert np.all(np.diff(arrival) >= 0)
    assert arrival[0] == 0.0 and arrival[-1] == 604_603.0
    notes = " ".join(trace.notes)
    assert "out of order at 1 place(s)" in notes
    assert "left on their own clocks" in notes
    # Ties keep file order: repeated timestamps stay in line order.
    ids = trace.requests["request_id"].str.removeprefix("line").astype(int).to_numpy()
    same = np.diff(arrival) == 0
    assert same.sum() > 0
    # Equal timestamps from the same run keep line order.
    same_run = (ids[:-1] <= 3800) == (ids[1:] <= 3800)
    assert np.all(ids[1:][same & same_run] > ids[:-1][same & same_run])


def test_ragpulse_public_shared_chunks_give_shared_tokens(public) -> None:
    # Rows 1 and 2 share sys_prompt chunks 8302 and 14332 (1,024 tokens), then differ.
    offsets, values = list_arrays(public.requests["prompt_tokens"])
    first = values[offsets[0] : offsets[1]]
    second = values[offsets[1] : offsets[2]]
    assert np.array_equal(first[:1024], second[:1024])
    assert not np.array_equal(first[1024:1100], second[1024:1100])


def test_ragpulse_public_chunk_reuse_at_other_positions_is_visible(public) -> None:
    # GIVEN a passage that two requests retrieve at different positions in their prompts
    path = shared_trace("ragpulse/0_trace.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lengths = {}
    for table, key in TABLES.items():
        for line in (path.parent / table).read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            lengths[record[key]] = record["token_length"]

    def start_of(row: dict, passage: int) -> int:
        ids = row["hash_ids"]
        before = ids["passages_ids"][: ids["passages_ids"].index(passage)]
        return sum(lengths[c] for c in ids["sys_prompt"] + before)

    first = rows[0]["hash_ids"]["passages_ids"][0]
    later = next(
        i for i, r in enumerate(rows[1:], start=1)
        if first in r["hash_ids"]["passages_ids"] and start_of(r, first) != start_of(rows[0], first)
    )
    # THEN its tokens are the same run in both prompts, at different offsets
    offsets, values = list_arrays(public.requests["prompt_tokens"])
    n = lengths[first]
    a = values[offsets[0] + start_of(rows[0], first) :][:n]
    b = values[offsets[later] + start_of(rows[later], first) :][:n]
    assert n > 0 and np.array_equal(a, b)
    assert np.array_equal(a, np.arange(a[0], a[0] + n))


def test_ragpulse_detected_from_file_and_folder() -> None:
    path = shared_trace("ragpulse/0_trace.jsonl")
    assert detect_format(path) is TraceFormat.RAGPULSE
    assert detect_format(path.parent) is TraceFormat.RAGPULSE
    assert len(read_trace(path.parent).requests) == 7106


def test_ragpulse_public_files_unchanged_by_reading() -> None:
    path = shared_trace("ragpulse/0_trace.jsonl")
    files = sorted(path.parent.glob("*.jsonl"))
    before = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert before[0].startswith("cd371571bef33209")
    read_trace(path)
    assert [hashlib.sha256(f.read_bytes()).hexdigest() for f in files] == before


# --- small traces built in the test ---------------------------------------------------------


def test_ragpulse_expands_chunks_in_component_order(tmp_path: Path) -> None:
    # GIVEN two requests over the same chunks, passages in a different order
    path = _write(tmp_path, [_row("5", "a", passages=[0, 1]), _row("6", "b", passages=[1, 0])])
    # WHEN read
    trace = read_trace(path)
    offsets, values = list_arrays(trace.requests["prompt_tokens"])
    first, second = values[offsets[0] : offsets[1]], values[offsets[1] : offsets[2]]
    # THEN tokens are dense per chunk in id order: passages 0..2 own 0-4, 5-7, 8-11;
    # sys_prompt 3 → 12-19, 4 → 20-21; history 5 → 22; web 6 → 23-24; user 7 → 25, 8 → 26-27;
    # template tokens start at 28.
    sys_hist = [*range(12, 22)]
    assert first.tolist() == [*sys_hist, 0, 1, 2, 3, 4, 5, 6, 7, 22, 25, 28, 29, 30]
    assert second.tolist() == [*sys_hist, 5, 6, 7, 0, 1, 2, 3, 4, 22, 25, 28, 29, 30]
    assert trace.requests["prompt_len"].tolist() == [23, 23]
    assert "up to 3 template tokens" in " ".join(trace.notes)


def test_ragpulse_string_timestamps_parse_as_numbers(tmp_path: Path) -> None:
    # "100" sorts before "82" as text; arrival must be numeric and in file order.
    path = _write(tmp_path, [_row("82", "a", passages=[0]), _row("100", "b", passages=[0])])
    trace = read_trace(path)
    assert trace.requests["arrival_s"].tolist() == [82.0, 100.0]
    assert not any("out of order" in n for n in trace.notes)


def test_ragpulse_blank_lines_are_not_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0])])
    path.write_text("\n" + path.read_text() + "\n\n", encoding="utf-8")
    trace = read_trace(path)
    assert trace.rows_read == 1


def test_ragpulse_runs_placed_by_session_epochs(tmp_path: Path) -> None:
    # GIVEN two runs, each 12 requests whose session epochs put run 2 one day after run 1
    day_ms = 86_400_000
    run1 = [_row(str(10 * k), _session(1_700_000_000_000 + 10_000 * k, k), passages=[0])
            for k in range(12)]
    run2 = [_row(str(10 * k + 3), _session(1_700_000_000_000 + day_ms + 10_000 * k + 3000, k),
                 passages=[1]) for k in range(12)]
    path = _write(tmp_path, run1 + run2)
    # WHEN read
    trace = read_trace(path)
    arrival = trace.requests["arrival_s"].to_numpy()
    # THEN run 2 moves by +86,400 s and stays after run 1, in file order
    assert arrival.tolist() == [10.0 * k for k in range(12)] + [
        86_400.0 + 10 * k + 3 for k in range(12)
    ]
    assert "lines 13-24 by +86,400 s" in " ".join(trace.notes)


def test_ragpulse_runs_without_epochs_are_interleaved_with_notes(tmp_path: Path) -> None:
    rows = [_row("5", "x", passages=[0]), _row("9", "y", passages=[0]),
            _row("2", "z", passages=[1]), _row("7", "w", passages=[1])]
    path = _write(tmp_path, rows)
    trace = read_trace(path)
    assert trace.requests["arrival_s"].tolist() == [2.0, 5.0, 7.0, 9.0]
    assert trace.requests["request_id"].tolist() == ["line3", "line1", "line4", "line2"]
    notes = " ".join(trace.notes)
    assert "no run origin could be estimated for lines 3-4" in notes
    assert "out of order at 1 place(s)" in notes


def test_ragpulse_without_tables_reads_lengths_only(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0])], tables=False)
    trace = read_trace(path)
    assert "prompt_tokens" not in trace.requests.columns
    assert trace.requests["prompt_len"].tolist() == [20]
    assert any("prefix reuse is not available" in n for n in trace.notes)


def test_ragpulse_some_tables_missing_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0])])
    (tmp_path / "3_history.jsonl").unlink()
    with pytest.raises(TraceReadError, match=r"3_history\.jsonl missing"):
        read_trace(path)


def test_ragpulse_unknown_chunk_id_names_line_and_component(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0]), _row("2", "b", passages=[99])])
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'hash_ids\.passages_ids'.*99"):
        read_trace(path)


def test_ragpulse_chunk_of_wrong_component_is_an_error(tmp_path: Path) -> None:
    # Id 3 exists, but in the sys_prompt table, not the passages table.
    path = _write(tmp_path, [_row("1", "a", passages=[3])])
    with pytest.raises(TraceSchemaError, match=r"chunk id 3 is not in 2_passages\.jsonl"):
        read_trace(path)


def test_ragpulse_chunks_longer_than_input_is_an_error(tmp_path: Path) -> None:
    row = _row("1", "a", passages=[0])
    row["input_length"] = 10
    path = _write(tmp_path, [row])
    with pytest.raises(TraceSchemaError, match=r"line 1, column 'prompt_len'.*less than the 17"):
        read_trace(path)


def test_ragpulse_non_numeric_timestamp_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0]), _row("noon", "b", passages=[0])])
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'arrival_s': 'noon'"):
        read_trace(path)


def test_ragpulse_hash_ids_not_an_object_is_an_error(tmp_path: Path) -> None:
    row = _row("1", "a", passages=[0])
    row["hash_ids"] = [1, 2]
    path = _write(tmp_path, [row])
    with pytest.raises(TraceSchemaError, match=r"line 1, column 'hash_ids': expected an object"):
        read_trace(path)


def test_ragpulse_bad_table_line_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0])])
    (tmp_path / "2_passages.jsonl").write_text('{"passage_id": 0, "token_length": "five"}\n')
    with pytest.raises(TraceSchemaError, match=r"2_passages\.jsonl: line 1, column 'token_length'"):
        read_trace(path)


def test_ragpulse_rows_are_not_mistaken_for_mooncake(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row("1", "a", passages=[0])])
    assert detect_format(path) is TraceFormat.RAGPULSE


def test_ragpulse_fixture_folder_reads() -> None:
    trace = read_trace(FIXTURES / "ragpulse_mini")
    assert trace.format_name == "ragpulse"
    assert len(trace.requests) == 4
    offsets, _ = list_arrays(trace.requests["prompt_tokens"])
    assert np.array_equal(np.diff(offsets), trace.requests["prompt_len"].to_numpy(dtype=np.int64))
