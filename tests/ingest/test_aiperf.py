"""AIPerf `profile_export.jsonl` reader: AIPerf's documented records, units, failures."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

EXPORT = FIXTURES / "aiperf" / "profile_export.jsonl"
GAPS_MS = [4.898437, 5.316006, 4.801489, 5.674918, 4.811467, 5.097998, 5.504797, 5.533548]


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXPORT.read_text().splitlines()]


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_aiperf_is_detected_by_its_record_keys() -> None:
    assert detect_format(EXPORT) is TraceFormat.AIPERF


def test_aiperf_documented_records_map_to_requests() -> None:
    trace = read_trace(EXPORT)
    req = trace.requests
    assert trace.format_name == "aiperf"
    assert req["request_id"].tolist() == ["7609a2e7-aa53-4ab1-98f4-f35ecafefd25",
                                          "c35e4b1b-6775-4750-b875-94cd68e5ec15"]
    # request_start_ns 1759879161119147826 - 1759813207532900363 = 65,953,586,247,463 ns.
    assert req["arrival_s"].tolist() == pytest.approx([0.0, 65953.586247463])
    assert req["prompt_len"].tolist() == [550, 550]  # input_sequence_length, error_isl
    assert req["output_len"].tolist() == [9, 0]
    assert req["session_id"].iloc[0] == "32ee4f33-cfca-4cfc-988f-79b45408b909"
    # 255.886568 ms to the first token, 297.525228 ms to the end.
    assert req["first_token_s"].iloc[0] == pytest.approx(0.255886568)
    assert req["finish_s"].iloc[0] == pytest.approx(0.297525228)


def test_aiperf_token_times_are_ttft_plus_cumulative_chunk_gaps() -> None:
    times = list(read_trace(EXPORT).requests["token_times_s"].iloc[0])
    assert len(times) == 9  # 1 + 8 gaps, output_sequence_length 9
    assert times[0] == pytest.approx(0.255886568)
    assert times[1] == pytest.approx(0.255886568 + 0.004898437)
    # The last chunk lands on request_latency: 255.886568 + 41.63866 = 297.525228 ms.
    assert times[-1] == pytest.approx(0.297525228)
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx(
        [g / 1000 for g in GAPS_MS])


def test_aiperf_cancelled_request_is_kept_as_aborted() -> None:
    trace = read_trace(EXPORT)
    req = trace.requests
    assert req["status"].tolist() == ["ok", "aborted"]
    assert req["error"].iloc[1] == (
        "RequestCancellationError (499): Request was cancelled after 0.000 seconds")
    assert pd.isna(req["first_token_s"].iloc[1]) and pd.isna(req["finish_s"].iloc[1])
    assert any(note.startswith("1 of 2 requests failed (1 cancelled by AIPerf)")
               for note in trace.notes)


def test_aiperf_server_error_is_status_error(tmp_path: Path) -> None:
    ok, failed = _records()
    failed["metadata"]["was_cancelled"] = False
    failed["error"] = {"code": 500, "type": "HTTPError", "message": "Internal Server Error"}
    req = read_trace(_write(tmp_path, [ok, failed])).requests
    assert req["status"].tolist() == ["ok", "error"]
    assert req["error"].iloc[1] == "HTTPError (500): Internal Server Error"


def test_aiperf_units_are_read_from_each_metric(tmp_path: Path) -> None:
    ok, _ = _records()
    ok["metrics"]["time_to_first_token"] = {"value": 255886568, "unit": "ns"}
    ok["metrics"]["request_latency"] = {"value": 0.297525228, "unit": "sec"}
    req = read_trace(_write(tmp_path, [ok])).requests
    assert req["first_token_s"].iloc[0] == pytest.approx(0.255886568)
    assert req["finish_s"].iloc[0] == pytest.approx(0.297525228)


def test_aiperf_chunked_stream_is_noted(tmp_path: Path) -> None:
    ok, _ = _records()
    ok["metrics"]["output_sequence_length"] = {"value": 20, "unit": "tokens"}
    trace = read_trace(_write(tmp_path, [ok]))
    assert len(trace.requests["token_times_s"].iloc[0]) == 9  # chunk times kept as measured
    assert any(note.startswith("1 request(s) streamed a chunk count other than output_len")
               for note in trace.notes)


def test_aiperf_unknown_unit_names_line_and_metric(tmp_path: Path) -> None:
    ok, failed = _records()
    ok["metrics"]["request_latency"] = {"value": 297.5, "unit": "minutes"}
    with pytest.raises(TraceSchemaError, match=r"line 2, metric 'request_latency': unit "
                                               r"'minutes' is not a time unit") as info:
        read_trace(_write(tmp_path, [failed, ok]))
    assert "\n" not in str(info.value)


def test_aiperf_missing_start_names_the_field(tmp_path: Path) -> None:
    ok, failed = _records()
    del failed["metadata"]["request_start_ns"]
    with pytest.raises(TraceSchemaError, match=r"line 2, field 'metadata.request_start_ns'"):
        read_trace(_write(tmp_path, [ok, failed]))


def test_aiperf_missing_input_length_is_a_validation_error(tmp_path: Path) -> None:
    ok, _ = _records()
    del ok["metrics"]["input_sequence_length"]
    with pytest.raises(TraceSchemaError, match=r"line 1.*prompt_len.*missing"):
        read_trace(_write(tmp_path, [ok]))


def test_aiperf_warmup_records_are_left_out(tmp_path: Path) -> None:
    ok, failed = _records()
    failed["metadata"]["benchmark_phase"] = "warmup"
    trace = read_trace(_write(tmp_path, [failed, ok]))
    assert trace.requests["status"].tolist() == ["ok"]
    assert trace.requests["arrival_s"].tolist() == [0.0]  # the clock starts at the kept one
    assert trace.notes[0].startswith("1 warmup request(s) are left out")


def test_aiperf_newer_record_keys_are_still_detected(tmp_path: Path) -> None:
    # aiperf 0.13 adds trace_data and spec_decode_acceptance to each record.
    ok, _ = _records()
    ok["trace_data"] = None
    ok["spec_decode_acceptance"] = None
    assert detect_format(_write(tmp_path, [ok])) is TraceFormat.AIPERF


MOCK_RUN = EXPORT.parent / "profile_export_mock_server.jsonl"
MOCK_SUMMARY = EXPORT.parent / "profile_export_aiperf.json"


def test_aiperf_013_run_reads_its_profiling_records() -> None:
    trace = read_trace(MOCK_RUN)
    req = trace.requests
    assert len(req) == 8  # 10 records less 2 warmup
    assert trace.notes[0].startswith("2 warmup request(s) are left out")
    assert req["status"].tolist().count("error") == 1
    failed = req[req["status"] == "error"].iloc[0]
    assert failed["error"].startswith("Internal Server Error (500): {\"error\"")
    ok = req[req["status"] == "ok"]
    # The server's usage: 5 completion tokens, as many as the 5 chunks streamed.
    assert set(ok["output_len"]) == {5}
    assert {len(t) for t in ok["token_times_s"]} == {5}
    assert not any("chunk count" in note for note in trace.notes)


def test_aiperf_013_run_gives_aiperf_own_statistics() -> None:
    # AIPerf's summary of the same run: TTFT avg 39.53180471428571 ms, inter_chunk_latency avg
    # 6.736474178571428 ms over 28 gaps (7 requests x 4), request_latency avg 66.47770142857142.
    from yaotu_trace.profile.workload import timing_profile

    timing = timing_profile(read_trace(MOCK_RUN))
    assert timing is not None and timing.ttft_s is not None and timing.itl_s is not None
    assert timing.ttft_s.mean == pytest.approx(0.03953180471428571)
    assert timing.itl_s.count == 28
    assert timing.itl_s.mean == pytest.approx(0.006736474178571428)
    assert timing.e2e_s is not None and timing.e2e_s.mean == pytest.approx(0.06647770142857142)


def test_aiperf_summary_is_shown_and_refused() -> None:
    from yaotu_trace.ingest.summary import read_summary

    assert detect_format(MOCK_SUMMARY) is TraceFormat.AIPERF
    summary = read_summary(MOCK_SUMMARY)
    assert summary is not None and summary.tool == "AIPerf"
    totals = {v.key: (v.value, v.unit) for v in summary.totals}
    assert totals["request_throughput"] == (21.13710109266402, "requests/sec")
    assert totals["error_request_count"] == (1.0, "requests")
    ttft = next(d for d in summary.latencies if d.metric == "TTFT")
    assert (ttft.unit, ttft.stats["mean"], ttft.stats["p50"]) == ("ms", 39.53180471428571,
                                                                  39.081042)
    assert "count" not in ttft.stats and "sum" not in ttft.stats
    with pytest.raises(TraceSchemaError, match=r"AIPerf's run summary.*profile_export.jsonl"):
        read_trace(MOCK_SUMMARY)


def test_aiperf_input_format_names_it(tmp_path: Path) -> None:
    renamed = tmp_path / "export.txt"
    renamed.write_bytes(EXPORT.read_bytes())
    assert len(read_trace(renamed, fmt=TraceFormat.AIPERF).requests) == 2
