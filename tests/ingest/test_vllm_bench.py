"""vLLM bench serve result reader: per-request arrays, failed requests, unknown arrivals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import schema_error

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, load_trace
from yaotu_trace.ingest.formats import TraceFormat

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = DATA / "vllm_bench_small.json"


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
    trace = load_trace(SMALL)
    req = trace.requests
    assert trace.format_name == "vllm-bench"
    assert req["request_id"].tolist() == ["r0", "r1", "r3"]  # r2 failed
    assert req["arrival_s"].tolist() == pytest.approx([0.0, 0.5, 2.25])
    assert req["prompt_len"].tolist() == [100, 250, 120]
    assert req["output_len"].tolist() == [3, 4, 5]
    assert req["first_token_s"].tolist() == pytest.approx([0.05, 0.625, 2.75])
    assert req["finish_s"].tolist() == pytest.approx([0.10, 0.665, 2.79])
    assert set(req["model"]) == {"meta-llama/Llama-3.1-8B-Instruct"}


def test_vllm_bench_token_times_are_ttft_plus_cumulative_itls() -> None:
    column = load_trace(SMALL).requests["token_times_s"]
    times = column.tolist()
    assert list(times[0]) == pytest.approx([0.05, 0.07, 0.10])
    assert list(times[1]) == pytest.approx([0.625, 0.635, 0.645, 0.665])
    # r3 streamed 3 chunks for 5 tokens: one time per chunk, 2.25 + 0.5, then +0.02, +0.02.
    assert list(times[2]) == pytest.approx([2.75, 2.77, 2.79])


def test_vllm_bench_chunked_gaps_are_the_itl_vllm_reports() -> None:
    # The gaps are the file's itls of the kept requests: [0.02, 0.03], [0.01, 0.01, 0.02],
    # [0.02, 0.02]; their mean is 0.13 / 7 s, as vllm bench computes mean_itl_ms.
    from yaotu_trace.profile.workload import timing_profile

    timing = timing_profile(load_trace(SMALL))
    assert timing is not None and timing.itl_s is not None
    assert timing.itl_s.count == 7
    assert timing.itl_s.mean == pytest.approx(0.13 / 7)


def test_vllm_bench_failed_requests_are_skipped_and_counted() -> None:
    notes = load_trace(SMALL).notes
    assert any(
        note.startswith("1 of 4 requests failed and were skipped")
        and "Bad Request: prompt too long" in note
        for note in notes
    )
    assert any(note.startswith("1 of 3 request(s) streamed a chunk count other than output_len")
               and "one time per chunk" in note for note in notes)


def test_vllm_bench_is_detected_as_a_json_document() -> None:
    assert detect_format(SMALL) is TraceFormat.VLLM_BENCH
    assert detect_format(DATA / "vllm_bench_no_detail.json") is TraceFormat.VLLM_BENCH


def test_vllm_bench_without_start_times_places_requests_at_zero(tmp_path: Path) -> None:
    trace = load_trace(_variant(tmp_path, start_times=None))
    req = trace.requests
    assert req["arrival_s"].tolist() == [0.0, 0.0, 0.0]
    assert req["request_id"].tolist() == ["r0", "r1", "r3"]  # file order kept for the ties
    assert req["first_token_s"].tolist() == pytest.approx([0.05, 0.125, 0.5])
    assert any("arrivals are unknown" in note and "request_rate 2.0" in note
               for note in trace.notes)


def test_vllm_bench_saved_latencies_set_finish(tmp_path: Path) -> None:
    req = load_trace(_variant(tmp_path, latencies=[0.2, 0.3, 0.0, 0.9])).requests
    assert req["finish_s"].tolist() == pytest.approx([0.2, 0.8, 3.15])


def test_vllm_bench_without_detail_asks_for_save_detailed() -> None:
    path = DATA / "vllm_bench_no_detail.json"
    message = schema_error(path)
    assert "--save-detailed" in message


def test_vllm_bench_unparallel_arrays_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceSchemaError, match="key 'ttfts' has 3 entries but 'input_lens' has 4"):
        load_trace(_variant(tmp_path, ttfts=[0.1, 0.2, 0.3]))


def test_vllm_bench_bad_itls_names_the_request(tmp_path: Path) -> None:
    path = _variant(tmp_path, itls=[[0.02, 0.03], [0.01, "x"], [], [0.02]])
    with pytest.raises(TraceSchemaError, match=r"result.json: request 1, key 'itls'") as info:
        load_trace(path)
    assert "\n" not in str(info.value)


def test_vllm_bench_bad_length_names_the_request(tmp_path: Path) -> None:
    path = _variant(tmp_path, input_lens=[100, -3, 80, 120])
    with pytest.raises(TraceSchemaError, match=r"request 1, column 'prompt_len'.*negative"):
        load_trace(path)


def test_vllm_bench_truncated_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(SMALL.read_text()[:400])
    with pytest.raises(TraceReadError, match=r"result.json: line \d+, column \d+: invalid JSON"):
        load_trace(path)


def test_vllm_bench_appended_results_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    one = json.dumps(json.loads(SMALL.read_text()))
    path.write_text(one + "\n" + one + "\n")
    with pytest.raises(TraceReadError, match=r"line 2: a second JSON document.*--append-result"):
        load_trace(path)


def test_vllm_bench_all_failed_is_an_error(tmp_path: Path) -> None:
    path = _variant(tmp_path, errors=["timeout", "timeout", "timeout", "timeout"])
    with pytest.raises(TraceSchemaError, match="all 4 requests of the run failed"):
        load_trace(path)
