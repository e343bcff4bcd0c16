"""vLLM bench serve result reader: per-request arrays, failed requests, unknown arrivals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FIXTURES, schema_error

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

SMALL = FIXTURES / "vllm_bench_small.json"


def _variant(tmp_path: Path, **changes: Any) -> Path:
    """The small fixture with keys replaced (a value of None deletes the key)."""
    doc = json.loads(SMALL.read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_vllm_bench_fixture_maps_arrays_to_absolute_times() -> None:
    trace = read_trace(SMALL)
    req = trace.requests
    assert trace.format_name == "vllm-bench"
    assert req["request_id"].tolist() == ["r0", "r1", "r2", "r3"]
    # start_times 1000.25, 1000.75, 1001.0, 1002.5 less the first.
    assert req["arrival_s"].tolist() == pytest.approx([0.0, 0.5, 0.75, 2.25])
    assert req["prompt_len"].tolist() == [100, 250, 80, 120]
    assert req["output_len"].tolist() == [3, 4, 0, 5]
    # arrival + ttft; r2 failed and has no timings.
    first = req["first_token_s"].tolist()
    assert first[:2] + first[3:] == pytest.approx([0.05, 0.625, 2.75])
    assert pd.isna(first[2])
    assert req["finish_s"].iloc[[0, 1, 3]].tolist() == pytest.approx([0.10, 0.665, 2.79])
    assert pd.isna(req["finish_s"].iloc[2])
    assert set(req["model"]) == {"meta-llama/Llama-3.1-8B-Instruct"}


def test_vllm_bench_token_times_are_ttft_plus_cumulative_itls() -> None:
    column = read_trace(SMALL).requests["token_times_s"]
    times = column.tolist()
    assert list(times[0]) == pytest.approx([0.05, 0.07, 0.10])
    assert list(times[1]) == pytest.approx([0.625, 0.635, 0.645, 0.665])
    assert column.isna().tolist()[2]  # r2 failed
    # r3 streamed 3 chunks for 5 tokens: one time per chunk, 2.25 + 0.5, then +0.02, +0.02.
    assert list(times[3]) == pytest.approx([2.75, 2.77, 2.79])


def test_vllm_bench_chunked_gaps_are_the_itl_vllm_reports() -> None:
    # The gaps are the file's itls of the kept requests: [0.02, 0.03], [0.01, 0.01, 0.02],
    # [0.02, 0.02]; their mean is 0.13 / 7 s, as vllm bench computes mean_itl_ms.
    from yaotu_trace.profile.workload import timing_profile

    timing = timing_profile(read_trace(SMALL))
    assert timing is not None and timing.itl_s is not None
    assert timing.itl_s.count == 7
    assert timing.itl_s.mean == pytest.approx(0.13 / 7)


def test_vllm_bench_failed_requests_are_rows_with_their_error() -> None:
    trace = read_trace(SMALL)
    req = trace.requests
    assert req["status"].tolist() == ["ok", "ok", "error", "ok"]
    assert req["error"].iloc[2] == "Bad Request: prompt too long"
    assert req["error"].isna().tolist() == [True, True, False, True]
    assert any(
        note.startswith("1 of 4 requests failed; they are kept as rows with status 'error'")
        and "Bad Request: prompt too long" in note
        for note in trace.notes
    )
    assert any(note.startswith("1 of 3 successful request(s) streamed a chunk count other than "
                               "output_len") and "one time per chunk" in note
               for note in trace.notes)
    assert not any("no TTFT" in note for note in trace.notes)  # the failed row is not counted


def test_vllm_bench_unsuccessful_without_error_text(tmp_path: Path) -> None:
    path = _variant(tmp_path, errors=None, successes=[True, False, True, True])
    req = read_trace(path).requests
    assert req["status"].tolist() == ["ok", "error", "ok", "ok"]
    assert "error" not in req.columns or req["error"].isna().all()


def test_vllm_bench_is_detected_as_a_json_document() -> None:
    assert detect_format(SMALL) is TraceFormat.VLLM_BENCH
    assert detect_format(FIXTURES / "vllm_bench_no_detail.json") is TraceFormat.VLLM_BENCH


def test_vllm_bench_without_start_times_places_requests_at_zero(tmp_path: Path) -> None:
    trace = read_trace(_variant(tmp_path, start_times=None))
    req = trace.requests
    assert req["arrival_s"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert req["request_id"].tolist() == ["r0", "r1", "r2", "r3"]  # file order kept for ties
    assert req["first_token_s"].iloc[[0, 1, 3]].tolist() == pytest.approx([0.05, 0.125, 0.5])
    assert any("arrivals are unknown" in note and "request_rate 2.0" in note
               for note in trace.notes)


def test_vllm_bench_saved_latencies_set_finish(tmp_path: Path) -> None:
    req = read_trace(_variant(tmp_path, latencies=[0.2, 0.3, 0.0, 0.9])).requests
    # arrival + latency: 0 + 0.2, 0.5 + 0.3, 2.25 + 0.9; the failed r2 keeps no finish.
    assert req["finish_s"].iloc[[0, 1, 3]].tolist() == pytest.approx([0.2, 0.8, 3.15])


def test_vllm_bench_without_detail_asks_for_save_detailed() -> None:
    path = FIXTURES / "vllm_bench_no_detail.json"
    message = schema_error(path)
    assert "--save-detailed" in message


def test_vllm_bench_unparallel_arrays_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceSchemaError, match="key 'ttfts' has 3 entries but 'input_lens' has 4"):
        read_trace(_variant(tmp_path, ttfts=[0.1, 0.2, 0.3]))


def test_vllm_bench_bad_itls_names_the_request(tmp_path: Path) -> None:
    path = _variant(tmp_path, itls=[[0.02, 0.03], [0.01, "x"], [], [0.02]])
    with pytest.raises(TraceSchemaError, match=r"result.json: request 1, key 'itls'") as info:
        read_trace(path)
    assert "\n" not in str(info.value)


def test_vllm_bench_bad_length_names_the_request(tmp_path: Path) -> None:
    path = _variant(tmp_path, input_lens=[100, -3, 80, 120])
    with pytest.raises(TraceSchemaError, match=r"request 1, column 'prompt_len'.*negative"):
        read_trace(path)


def test_vllm_bench_truncated_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(SMALL.read_text()[:400])
    with pytest.raises(TraceReadError, match=r"result.json: line \d+, column \d+: invalid JSON"):
        read_trace(path)


def test_vllm_bench_appended_results_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    one = json.dumps(json.loads(SMALL.read_text()))
    path.write_text(one + "\n" + one + "\n")
    with pytest.raises(TraceReadError, match=r"line 2: a second JSON document.*--append-result"):
        read_trace(path)


def test_vllm_bench_all_failed_is_a_trace_of_failures(tmp_path: Path) -> None:
    path = _variant(tmp_path, errors=["timeout", "timeout", "timeout", "timeout"])
    req = read_trace(path).requests
    assert req["status"].tolist() == ["error"] * 4
    assert req["error"].tolist() == ["timeout"] * 4
    assert "first_token_s" not in req.columns or req["first_token_s"].isna().all()
