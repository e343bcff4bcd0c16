"""Qwen/Bailian reader: 16-token block ids, chat-tree sessions, detection before Mooncake."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, schema_error

from yaotu_trace.data.schema import list_arrays
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.detect import sniff_keys
from yaotu_trace.ingest.formats import TraceFormat


def _line(**fields: object) -> str:
    record = {
        "timestamp": 0.0,
        "input_length": 16,
        "output_length": 1,
        "type": "text",
        "turn": 1,
        "hash_ids": [0],
    }
    record.update(fields)
    return json.dumps(record) + "\n"


def test_bailian_fixture_maps_ids_times_lengths_and_blocks() -> None:
    trace = read_trace(FIXTURES / "bailian_small.jsonl")
    req = trace.requests
    assert trace.format_name == "bailian"
    assert trace.source_block_size == 16
    # Sorted by timestamp: chat 4 (90.0) sits before chat 3 (61.2) in the file.
    assert req["request_id"].tolist() == ["0", "1", "2", "3", "4", "5"]
    assert req["arrival_s"].tolist() == [0.0, 0.512, 61.114, 61.2, 90.0, 120.25]
    assert req["prompt_len"].tolist() == [40, 16, 70, 33, 48, 95]
    assert req["output_len"].tolist() == [12, 5, 9, 3, 7, 20]
    offsets, values = list_arrays(req["prompt_block_ids"])
    blocks = [values[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    assert blocks[2] == [0, 1, 4, 5, 6]
    assert blocks[5] == [0, 1, 4, 5, 11, 12]
    assert "tenant" not in req.columns


def test_bailian_sessions_follow_the_parent_chain_to_its_root() -> None:
    trace = read_trace(FIXTURES / "bailian_small.jsonl")
    sessions = dict(zip(trace.requests["request_id"], trace.requests["session_id"], strict=True))
    # 5 → 2 → 0; 4 → 3, whose parent 77 is outside the file; 1 is a root of its own.
    assert sessions == {"0": "0", "1": "1", "2": "0", "3": "3", "4": "3", "5": "0"}
    assert any(note.startswith("1 request(s) name a parent_chat_id") for note in trace.notes)


def test_bailian_types_become_a_note_not_tenants() -> None:
    trace = read_trace(FIXTURES / "bailian_small.jsonl")
    assert any(note.endswith("text 3, file 2, search 1") for note in trace.notes)


def test_bailian_is_detected_and_not_taken_for_mooncake() -> None:
    assert detect_format(FIXTURES / "bailian_small.jsonl") is TraceFormat.BAILIAN
    keys = {"chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "hash_ids"}
    assert sniff_keys(keys) is TraceFormat.BAILIAN
    assert sniff_keys(keys - {"chat_id", "parent_chat_id"}) is TraceFormat.MOONCAKE


def test_bailian_bad_block_count_is_a_one_line_error_naming_the_line() -> None:
    path = FIXTURES / "bailian_bad_hash_ids.jsonl"
    message = schema_error(path)
    assert "line 2, column 'hash_ids' (read as prompt_block_ids)" in message
    assert "16 tokens per id" in message


def test_bailian_parent_cycle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        _line(chat_id=1, parent_chat_id=2) + _line(chat_id=2, parent_chat_id=3)
        + _line(chat_id=3, parent_chat_id=1)
    )
    with pytest.raises(TraceSchemaError, match=r"line 1, column 'parent_chat_id'.*loops") as info:
        read_trace(path)
    assert "\n" not in str(info.value)


def test_bailian_duplicate_chat_id_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(_line(chat_id=7, parent_chat_id=-1) + _line(chat_id=7, parent_chat_id=-1))
    with pytest.raises(TraceSchemaError, match=r"line 2, column 'request_id': duplicate id '7'"):
        read_trace(path)


def test_bailian_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(_line(chat_id=1, parent_chat_id=-1) + '{"chat_id": 2, "parent_chat_id": \n')
    with pytest.raises(TraceReadError, match=r"q.jsonl: line 2: invalid JSON"):
        read_trace(path, fmt=TraceFormat.BAILIAN)
