"""inference-perf: its per-request report, an OTel workload trace, and a stage summary."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.summary import read_summary

DATA = FIXTURES / "inference_perf"
PER_REQUEST = DATA / "per_request_lifecycle_metrics.json"
STAGE = DATA / "stage_0_lifecycle_metrics.json"
WORKLOAD = DATA / "prefix_sharing_example.json"
ORIGIN = 2407.443107818  # start_time of the first request (perf_counter s)


def _records() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(PER_REQUEST.read_text())
    return records


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("path", [PER_REQUEST, STAGE, WORKLOAD], ids=lambda p: p.stem)
def test_inference_perf_documents_are_detected(path: Path) -> None:
    assert detect_format(path) is TraceFormat.INFERENCE_PERF


def test_per_request_report_maps_times_and_server_counts() -> None:
    req = read_trace(PER_REQUEST).requests
    assert len(req) == 8
    # start_time 2407.640237853 - 2407.443107818 = 0.197130035 s.
    assert req["arrival_s"].iloc[:2].tolist() == pytest.approx([0.0, 0.197130035])
    # The server's usage: 41 prompt and 5 completion tokens (the client counted 3).
    assert req["prompt_len"].iloc[0] == 41 and req["output_len"].iloc[0] == 5
    # First chunk 2407.774030701 and end_time 2407.801739958, less the origin.
    assert req["first_token_s"].iloc[0] == pytest.approx(2407.774030701 - ORIGIN)
    assert req["finish_s"].iloc[0] == pytest.approx(2407.801739958 - ORIGIN)


def test_per_request_token_times_are_the_chunk_times() -> None:
    times = list(read_trace(PER_REQUEST).requests["token_times_s"].iloc[0])
    chunks = [2407.774030701, 2407.780856655, 2407.787409079, 2407.794057827, 2407.800899906]
    assert times == pytest.approx([t - ORIGIN for t in chunks])
    # No zero gaps: one time per chunk, as measured.
    assert all(b > a for a, b in itertools.pairwise(times))


def test_per_request_failure_is_a_row_with_its_error() -> None:
    trace = read_trace(PER_REQUEST)
    last = trace.requests.iloc[-1]
    assert last["status"] == "error"
    assert last["error"].startswith("HTTP Error 500: {\"error\":{\"message\":\"Mock server")
    assert last["prompt_len"] == 0 and last["output_len"] == 0  # as inference-perf counted
    assert str(last["finish_s"]) == "nan" and str(last["first_token_s"]) == "nan"
    assert any(n.startswith("1 of 8 requests failed") for n in trace.notes)


def test_per_request_timeout_is_status_timeout(tmp_path: Path) -> None:
    records = _records()
    records[7]["error"] = {"error_type": "TimeoutError", "error_msg": "Request timed out"}
    req = read_trace(_write(tmp_path, records)).requests
    assert req["status"].iloc[-1] == "timeout"
    assert req["error"].iloc[-1] == "TimeoutError: Request timed out"


def test_per_request_without_usage_uses_inference_perf_counts(tmp_path: Path) -> None:
    records = _records()
    records[0]["info"]["response_metrics"]["server_usage"] = None
    trace = read_trace(_write(tmp_path, records))
    assert trace.requests["output_len"].iloc[0] == 3  # the client's count
    # 5 chunk times for 3 tokens: noted, times kept per chunk.
    assert any(n.startswith("1 request(s) streamed a chunk count other than output_len")
               for n in trace.notes)


def test_per_request_bad_start_names_the_request(tmp_path: Path) -> None:
    records = _records()
    records[3]["start_time"] = "soon"
    with pytest.raises(TraceSchemaError, match=r"request 3, field 'start_time': 'soon'"):
        read_trace(_write(tmp_path, records))


def test_workload_trace_spans_are_requests() -> None:
    trace = read_trace(WORKLOAD)
    req = trace.requests
    # Spans start every 2 s from 10:00:00; the conversation's turns end 1-1.8 s later.
    assert req["arrival_s"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert req["finish_s"].tolist() == pytest.approx([1.0, 3.0, 5.0, 7.5, 9.8, 11.5, 13.0])
    assert req["prompt_len"].tolist() == [50, 45, 100, 180, 270, 380, 40]
    assert req["output_len"].tolist() == [20, 15, 50, 60, 70, 55, 10]
    assert req["session_id"].nunique() == 4  # three single calls and one conversation
    assert set(req["model"]) == {"gpt-4o"}
    assert (req["status"] == "ok").all()


def test_workload_trace_without_token_counts_is_refused(tmp_path: Path) -> None:
    doc = json.loads(WORKLOAD.read_text())
    del doc["spans"][2]["attributes"]["gen_ai.usage.prompt_tokens"]
    with pytest.raises(TraceSchemaError, match=r"span 2 \(span_conv_turn1\).*no token counts"):
        read_trace(_write(tmp_path, doc))


def test_workload_trace_error_status_is_kept(tmp_path: Path) -> None:
    doc = json.loads(WORKLOAD.read_text())
    doc["spans"][1]["status"] = {"code": 2, "message": "rate limited"}
    req = read_trace(_write(tmp_path, doc)).requests
    assert req["status"].tolist()[1] == "error" and req["error"].iloc[1] == "rate limited"


def test_stage_report_is_a_summary_with_its_numbers() -> None:
    summary = read_summary(STAGE)
    assert summary is not None and summary.tool == "inference-perf"
    totals = {v.key: (v.value, v.unit) for v in summary.totals}
    assert totals["completed"] == (60.0, "requests")
    assert totals["failed"] == (0.0, "requests")
    assert totals["requests_per_sec"] == (0.996850670841712, "req/s")
    assert totals["achieved_rate"] == (1.0048047820203576, "req/s")
    ttft = next(d for d in summary.latencies if d.metric == "TTFT")
    assert ttft.unit == "s"
    assert ttft.stats["mean"] == 0.03331898592878133
    assert ttft.stats["p99.9"] == 0.042598067724495196
    assert list(ttft.stats)[:3] == ["mean", "median", "p0.1"]
    prompt = next(d for d in summary.latencies if d.metric == "prompt tokens")
    assert prompt.unit == "tokens"


def test_stage_report_analyze_and_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(STAGE)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "Benchmark summary  (inference-perf, run-level numbers only)" in out
    ttft = next(line for line in out.splitlines() if line.lstrip().startswith("TTFT"))
    assert ttft.split()[:3] == ["TTFT", "s", "0.03332"]
    assert "14 statistics per distribution in the file, 6 shown" in out
    assert main(["replay", str(STAGE)]) == ExitCode.INPUT
    err = capsys.readouterr().err
    assert "lifecycle summary" in err and "per_request_lifecycle_metrics.json" in err


def test_stage_report_failure_labels_are_noted(tmp_path: Path) -> None:
    # The failures section as docs/reports.md of inference-perf shows it.
    doc = json.loads(STAGE.read_text())
    doc["failures"] = {"count": 3, "request_latency": {"mean": 9.948665728999458},
                       "by_label": {"504 - Gateway Timeout": {"count": 2},
                                    "400 - Invalid JSON": {"count": 1}}}
    summary = read_summary(_write(tmp_path, doc))
    assert summary is not None
    assert summary.notes == ("failures by label: 504 - Gateway Timeout: 2; 400 - Invalid JSON: 1",)
    failed = next(d for d in summary.latencies if d.metric == "failed E2EL")
    assert failed.stats == {"mean": 9.948665728999458}


@pytest.mark.parametrize("path", [PER_REQUEST, WORKLOAD], ids=lambda p: p.stem)
def test_inference_perf_input_format_names_it(path: Path, tmp_path: Path) -> None:
    renamed = tmp_path / "report.txt"
    renamed.write_bytes(path.read_bytes())
    assert read_trace(renamed, fmt=TraceFormat.INFERENCE_PERF).format_name == "inference-perf"
