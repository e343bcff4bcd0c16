"""guidellm benchmark report reader: a report guidellm wrote, several benchmarks, failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

DATA = FIXTURES / "guidellm"
REPORT = DATA / "benchmarks_mock_server.json"
V03 = DATA / "benchmarks_stripped_v03.json"
# request_start_time of the report's first request (benchmark 0, successful 0).
ORIGIN = 1796191624.6778991


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(REPORT.read_text())
    return doc


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


def test_guidellm_reports_are_detected_as_json_documents() -> None:
    assert detect_format(REPORT) is TraceFormat.GUIDELLM
    assert detect_format(V03) is TraceFormat.GUIDELLM


def test_guidellm_successful_requests_map_to_rows() -> None:
    req = read_trace(REPORT).requests
    ok = req[req["status"] == "ok"]
    assert ok["prompt_len"].tolist() == [31, 69, 73]
    assert ok["output_len"].tolist() == [6, 6, 6]
    # request_start_time less the first: 1796191624.767988 - 1796191624.6778991 = 0.0900889 s.
    assert ok["arrival_s"].tolist() == pytest.approx(
        [0.0, 1796191624.767988 - ORIGIN, 1796191624.8572218 - ORIGIN], abs=1e-6)
    # time_to_first_token_ms 43.827056884765625 and request_latency 0.08678126335144043.
    assert ok["first_token_s"].iloc[0] == pytest.approx(0.043827056884765625)
    assert ok["finish_s"].iloc[0] == pytest.approx(0.08678126335144043)
    assert ok["request_id"].iloc[0] == "4bb139d1-2173-423e-a37c-bef7421f2a8f"
    assert ok["session_id"].iloc[0] == "cc872ef6-1eb1-4141-9626-12f1040d41fc"
    assert "token_times_s" not in req.columns


def test_guidellm_every_benchmark_is_read_on_one_clock() -> None:
    trace = read_trace(REPORT)
    req = trace.requests
    assert len(req) == 8  # 4 + 4, as metrics.request_totals say
    # Benchmark 1 started 1796191634.559625 - ORIGIN = 9.8817259 s after the first request.
    assert req["arrival_s"].iloc[4] == pytest.approx(1796191634.559625 - ORIGIN, abs=1e-6)
    assert req["arrival_s"].is_monotonic_increasing
    first = trace.notes[0]
    assert first.startswith("the report holds 2 benchmark(s), read as one trace")
    assert "benchmark 0 concurrent@1: 4 requests, started 0.000-0.269 s" in first
    assert "benchmark 1 concurrent@2: 4 requests, started 9.882-9.902 s" in first
    assert not any("out of order" in note for note in trace.notes)


def test_guidellm_errored_requests_are_rows_with_their_error() -> None:
    trace = read_trace(REPORT)
    req = trace.requests
    failed = req[req["status"] != "ok"]
    assert failed["status"].tolist() == ["error"] * 5
    assert failed["error"].str.startswith("HTTPStatusError(\"Server error '500").all()
    assert failed["finish_s"].isna().all() and failed["first_token_s"].isna().all()
    # guidellm saved no token counts for them.
    assert failed["prompt_len"].tolist() == [0] * 5
    assert any(note.startswith("5 of 8 requests did not succeed (errored: 5, incomplete: 0)")
               for note in trace.notes)
    assert any(note.startswith("5 failed request(s) carry no token counts")
               for note in trace.notes)


def test_guidellm_incomplete_requests_are_aborted(tmp_path: Path) -> None:
    doc = _doc()
    groups = doc["benchmarks"][0]["requests"]
    groups["incomplete"] = [groups["successful"].pop()]
    req = read_trace(_write(tmp_path, doc)).requests
    aborted = req[req["status"] == "aborted"]
    assert len(aborted) == 1
    assert aborted["prompt_len"].tolist() == [73]  # its counts are kept
    assert aborted["finish_s"].isna().all()  # it never finished
    assert aborted["first_token_s"].iloc[0] == pytest.approx(
        1796191624.8572218 - ORIGIN + 0.04312467575073242, abs=1e-6)


def test_guidellm_v03_report_and_its_sample_note() -> None:
    trace = read_trace(V03)
    req = trace.requests
    assert req["prompt_len"].tolist() == [257]
    assert req["output_len"].tolist() == [128]
    # time_to_first_token_ms 21.281957626342773, request_latency 0.6891846656799316.
    assert req["first_token_s"].tolist() == pytest.approx([0.021281957626342773])
    assert req["finish_s"].tolist() == pytest.approx([0.6891846656799316])
    assert "benchmark 0 synchronous: 1 requests" in trace.notes[0]
    assert any(note.startswith("benchmark 0 keeps 1 of its 47 requests") for note in trace.notes)


def test_guidellm_report_without_requests_says_so(tmp_path: Path) -> None:
    doc = _doc()
    for bench in doc["benchmarks"]:
        bench["requests"] = {"successful": [], "errored": [], "incomplete": [], "total": None}
    with pytest.raises(TraceSchemaError, match=r"hold no requests.*sample_size 0"):
        read_trace(_write(tmp_path, doc))


def test_guidellm_request_without_start_names_it(tmp_path: Path) -> None:
    doc = _doc()
    bad = doc["benchmarks"][1]["requests"]["errored"][2]
    bad.pop("request_start_time")
    bad["info"]["timings"]["request_start"] = None
    bad["info"]["timings"]["resolve_start"] = None
    with pytest.raises(TraceSchemaError,
                       match=r"benchmark 1, errored request 2, field 'request_start_time'") as e:
        read_trace(_write(tmp_path, doc))
    assert "\n" not in str(e.value)


def test_guidellm_bad_length_names_the_request(tmp_path: Path) -> None:
    doc = _doc()
    doc["benchmarks"][0]["requests"]["successful"][1]["prompt_tokens"] = "many"
    with pytest.raises(TraceSchemaError,
                       match=r"benchmark 0, successful request 1, column 'prompt_len'"):
        read_trace(_write(tmp_path, doc))


def test_guidellm_requests_not_lists_is_an_error(tmp_path: Path) -> None:
    doc = _doc()
    doc["benchmarks"][0]["requests"]["errored"] = {"a": 1}
    with pytest.raises(TraceSchemaError, match=r"benchmark 0, field 'requests.errored'"):
        read_trace(_write(tmp_path, doc))


def test_guidellm_timing_matches_guidellm_own_metrics() -> None:
    # guidellm's metrics of benchmark 0 (successful requests, left out of the excerpt; see the
    # README): time_to_first_token_ms mean 43.5496171315511, request_latency mean
    # 0.08639192581176758 s. Benchmark 1 has no successful request.
    from yaotu_trace.profile.workload import timing_profile

    timing = timing_profile(read_trace(REPORT))
    assert timing is not None and timing.ttft_s is not None and timing.e2e_s is not None
    assert timing.ttft_s.count == 3
    assert timing.ttft_s.mean == pytest.approx(0.0435496171315511)
    assert timing.e2e_s.mean == pytest.approx(0.08639192581176758)


@pytest.mark.parametrize("path", [REPORT, V03], ids=["0.8", "0.3"])
def test_guidellm_input_format_names_it(path: Path, tmp_path: Path) -> None:
    renamed = tmp_path / "report.txt"
    renamed.write_bytes(path.read_bytes())
    trace = read_trace(renamed, fmt=TraceFormat.GUIDELLM)
    assert trace.format_name == "guidellm"
