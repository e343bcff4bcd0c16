"""WEKA / Claude Code reader: the public 36-file sample, the weka_mini fixture and built files."""

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
from yaotu_trace.ingest.traces.weka import read_weka

MINI = FIXTURES / "weka_mini"


def _request(t: float, n_in: int, ids: list[int], **extra: object) -> dict:
    return {"t": t, "type": "n", "model": "m", "in": n_in, "out": 5, "hash_ids": ids, **extra}


def _file(folder: Path, name: str, requests: list, **top: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    document = {"id": name, "block_size": 64, "hash_id_scope": "local", **top,
                "requests": requests}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _ids_by_session(trace) -> dict[str, set[int]]:
    offsets, values = list_arrays(trace.requests["prompt_block_ids"])
    out: dict[str, set[int]] = {}
    for i, session in enumerate(trace.requests["session_id"]):
        out.setdefault(session, set()).update(values[offsets[i] : offsets[i + 1]].tolist())
    return out


# --- the public sample -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def public() -> object:
    return read_trace(shared_trace("weka_claude_code"))


def test_weka_public_folder_counts(public) -> None:
    req = public.requests
    assert public.format_name == "weka"
    assert len(req) == 1682 and public.rows_read == 1682
    assert req["session_id"].nunique() == 36
    assert int(req["prompt_len"].sum()) == 245_306_083
    assert int(req["output_len"].sum()) == 754_869
    assert public.source_block_size == 64
    assert req["model"].value_counts()["claude-opus-4-5-20251101"] == 859


def test_weka_public_floor_rule_holds(public) -> None:
    offsets, values = list_arrays(public.requests["prompt_block_ids"])
    assert values.size == 3_832_086
    counts = np.diff(offsets)
    assert np.array_equal(counts, public.requests["prompt_len"].to_numpy(dtype=np.int64) // 64)


def test_weka_public_ids_namespaced_per_file(public) -> None:
    # Every file numbers its ids from 1; after namespacing no id is shared between files.
    by_session = _ids_by_session(public)
    files = sorted(by_session)
    assert files[0] == "trace_0001" and files[-1] == "trace_0730"
    for number, session in enumerate(files):
        ids = np.fromiter(by_session[session], dtype=np.int64)
        assert set((ids >> 40).tolist()) == {number + 1}
        assert (ids & ((1 << 40) - 1)).min() == 1
    assert sum(len(s) for s in by_session.values()) == len(set().union(*by_session.values()))


def test_weka_public_clocks_all_start_at_zero(public) -> None:
    req = public.requests
    arrival = req["arrival_s"].to_numpy()
    assert np.all(np.diff(arrival) >= 0)
    starts = req.groupby("session_id")["arrival_s"].min()
    assert (starts == 0.0).all()
    # The 36 ties at 0 s keep file order.
    assert req["request_id"].iloc[:3].tolist() == ["trace_0001#1", "trace_0022#1", "trace_0044#1"]
    notes = " ".join(public.notes)
    assert "36 WEKA conversations" in notes and "all start at 0 s" in notes
    assert "namespaced per file" in notes
    assert not any("out of order" in n for n in public.notes)


def test_weka_public_observed_times(public) -> None:
    req = public.requests
    assert int(req["first_token_s"].notna().sum()) == 98
    assert int(req["finish_s"].notna().sum()) == 1682 - 88
    assert (req["finish_s"].dropna() >= 0).all()


def test_weka_public_single_file_detected_and_read() -> None:
    path = shared_trace("weka_claude_code/trace_0001.json")
    assert detect_format(path) is TraceFormat.WEKA
    trace = read_trace(path)
    assert len(trace.requests) == 41
    assert set(trace.requests["session_id"]) == {"trace_0001"}
    assert int(trace.requests["prompt_len"].sum()) == 4_873_373  # totals.parent_tokens.input


def test_weka_public_stagger_offsets_conversations() -> None:
    path = shared_trace("weka_claude_code")
    trace = normalize(read_weka(path, stagger_s=3600.0), str(path))
    starts = trace.requests.groupby("session_id")["arrival_s"].min().sort_index()
    assert starts.tolist() == [3600.0 * k for k in range(36)]
    assert any("k x 3600 s" in n for n in trace.notes)


def test_weka_public_files_unchanged_by_reading() -> None:
    folder = shared_trace("weka_claude_code")
    files = sorted(folder.glob("*.json"))
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    assert digest.startswith("cacd5e83024bdcb3")
    read_trace(folder)
    assert hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest() == digest


# --- the fixture and built files -------------------------------------------------------------


def test_weka_mini_fixture_maps_every_field() -> None:
    trace = read_trace(MINI)
    req = trace.requests
    assert req["request_id"].tolist() == [
        "trace_0001#1", "trace_0022#1", "trace_0022#2", "trace_0001#2", "trace_0001#3",
    ]
    assert req["arrival_s"].tolist() == [0.0, 0.0, 5.0, 12.0, 40.0]
    assert req["prompt_len"].tolist() == [200, 130, 63, 300, 256]
    assert req["model"].tolist()[:2] == ["claude-opus-4-5-20251101", "claude-sonnet-4-20250514"]
    assert req["first_token_s"].isna().tolist() == [True, True, True, False, True]
    assert req["first_token_s"].iloc[3] == 12.75
    assert req["finish_s"].tolist()[:4] == [2.5, 3.0, 6.0, 13.5]
    assert np.isnan(req["finish_s"].iloc[4])
    offsets, values = list_arrays(req["prompt_block_ids"])
    ns1, ns2 = 1 << 40, 2 << 40
    assert values[offsets[0] : offsets[1]].tolist() == [ns1 | 1, ns1 | 2, ns1 | 3]
    assert values[offsets[1] : offsets[2]].tolist() == [ns2 | 1, ns2 | 2]
    assert offsets[3] - offsets[2] == 0  # 63 tokens: no full block, no id


def test_weka_same_local_ids_do_not_collide(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 128, [1, 2])])
    _file(tmp_path, "b", [_request(0, 128, [1, 2])])
    by_session = _ids_by_session(read_trace(tmp_path))
    assert not by_session["a"] & by_session["b"]


def test_weka_global_scope_keeps_ids(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 128, [1, 2])], hash_id_scope="global")
    _file(tmp_path, "b", [_request(3, 128, [1, 7])], hash_id_scope="global")
    trace = read_trace(tmp_path)
    by_session = _ids_by_session(trace)
    assert by_session == {"a": {1, 2}, "b": {1, 7}}
    assert not any("namespaced" in n for n in trace.notes)


def test_weka_unsorted_file_is_sorted_with_note(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(10, 64, [1]), _request(4, 64, [1])])
    trace = read_trace(tmp_path)
    assert trace.requests["request_id"].tolist() == ["a#2", "a#1"]
    assert any("'t' goes backwards within a.json" in n for n in trace.notes)


def test_weka_subagent_markers_skipped_with_note(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 64, [1]), {"t": 3, "type": "subagent"},
                          _request(9, 128, [1, 2])])
    trace = read_trace(tmp_path)
    assert trace.requests["request_id"].tolist() == ["a#1", "a#3"]
    assert any("1 sub-agent marker(s) were skipped" in n for n in trace.notes)


def test_weka_block_size_mismatch_is_an_error(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 128, [1, 2])])
    _file(tmp_path, "b", [_request(0, 128, [1])], block_size=128)
    with pytest.raises(TraceSchemaError, match=r"different block sizes: 64 \(a\.json\), 128"):
        read_trace(tmp_path)


def test_weka_wrong_id_count_names_file_and_request(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 128, [1, 2]), _request(5, 64, [1, 2, 3])])
    with pytest.raises(
        TraceSchemaError, match=r"a\.json, request 2, column 'prompt_block_ids': 3 ids cannot"
    ):
        read_trace(tmp_path)


def test_weka_missing_in_names_file_and_request(tmp_path: Path) -> None:
    bad = _request(5, 64, [1])
    del bad["in"]
    _file(tmp_path, "a", [_request(0, 64, [1]), bad])
    with pytest.raises(TraceSchemaError, match=r"a\.json, request 2, column 'prompt_len'"):
        read_trace(tmp_path)


def test_weka_non_list_hash_ids_is_an_error(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 64, "1,2")])  # type: ignore[arg-type]
    with pytest.raises(TraceSchemaError, match=r"request 1, column 'hash_ids': expected a list"):
        read_trace(tmp_path)


def test_weka_fractional_ids_are_an_error(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 64, [1.5])])  # type: ignore[list-item]
    with pytest.raises(TraceSchemaError, match=r"whole numbers"):
        read_trace(tmp_path)


def test_weka_non_numeric_t_is_an_error(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request("soon", 64, [1])])  # type: ignore[arg-type]
    with pytest.raises(TraceSchemaError, match=r"a\.json: request 1, column 't': 'soon'"):
        read_trace(tmp_path)


def test_weka_invalid_json_file_is_named(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 64, [1])])
    (tmp_path / "b.json").write_text('{"requests": [', encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"b\.json: invalid JSON"):
        read_trace(tmp_path)


def test_weka_document_without_requests_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"id": "a"}', encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"a\.json: not a WEKA conversation"):
        read_weka(tmp_path)


def test_weka_all_files_empty_is_an_error(tmp_path: Path) -> None:
    _file(tmp_path, "a", [])
    with pytest.raises(TraceSchemaError, match=r"no requests"):
        read_trace(tmp_path)


def test_weka_folder_without_json_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"holds no \.json files"):
        read_trace(tmp_path)


def test_weka_single_built_file_is_detected(tmp_path: Path) -> None:
    path = _file(tmp_path, "trace_0009", [_request(0, 64, [5])])
    assert detect_format(path) is TraceFormat.WEKA
    trace = read_trace(path)
    assert trace.requests["session_id"].tolist() == ["trace_0009"]
    assert not any("WEKA conversations" in n for n in trace.notes)


def test_weka_folder_copied_from_a_mac_skips_hidden_files_with_a_note(tmp_path: Path) -> None:
    # GIVEN a folder with a Mac's AppleDouble companions (binary, named *.json) and .DS_Store
    _file(tmp_path, "trace_0001", [_request(0, 128, [1, 2])])
    _file(tmp_path, "trace_0002", [_request(0, 64, [1])])
    for name in ("._trace_0001.json", "._trace_0002.json", ".DS_Store"):
        (tmp_path / name).write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        \xff")
    # WHEN it is read
    assert detect_format(tmp_path) is TraceFormat.WEKA
    trace = read_trace(tmp_path)
    # THEN the conversations are read, the hidden files skipped and counted
    assert sorted(trace.requests["session_id"]) == ["trace_0001", "trace_0002"]
    assert any(n.startswith("3 hidden file(s) of the folder were skipped") for n in trace.notes)


def test_weka_folder_without_hidden_files_has_no_skip_note(tmp_path: Path) -> None:
    _file(tmp_path, "a", [_request(0, 64, [1])])
    assert not any("hidden" in n for n in read_trace(tmp_path).notes)


def test_weka_folder_of_hidden_files_only_says_they_were_skipped(tmp_path: Path) -> None:
    (tmp_path / "._a.json").write_bytes(b"\x00\x05\x16\x07")
    with pytest.raises(TraceReadError, match=r"holds no \.json files \(besides 1 hidden "
                                             r"file\(s\), which are skipped\)"):
        read_trace(tmp_path)
