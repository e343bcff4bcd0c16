"""Success rate: failed requests are counted, and every latency figure leaves them out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.commands.analyze import analyze
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.profile.figures import plot_data
from yaotu_trace.profile.success import success_profile, window_width_s
from yaotu_trace.profile.workload import profile_trace
from yaotu_trace.render import views

# Ten requests 1 s apart. r3 failed with an error, r6 timed out; r8 says nothing (read as ok).
# Successful end-to-end latencies (finish − arrival): 1, 2, 3, 5, 6, 8, 9, 10 s.
TEN = {
    "request_id": [f"r{k}" for k in range(10)],
    "arrival_s": [float(k) for k in range(10)],
    "prompt_len": [100, 110, 120, 900, 130, 140, 950, 150, 160, 170],
    "output_len": [10, 20, 30, 0, 50, 60, 3, 80, 90, 100],
    "first_token_s": [k + 0.1 * (k + 1) for k in range(10)],
    "finish_s": [0 + 1.0, 1 + 2.0, 2 + 3.0, 3 + 0.01, 4 + 5.0, 5 + 6.0, 6 + 30.0, 7 + 8.0,
                 8 + 9.0, 9 + 10.0],
    "status": ["ok", "ok", "ok", "error", "ok", "ok", "timeout", "ok", None, "ok"],
    "error": [None, None, None, "CUDA error: out of memory", None, None, "deadline exceeded",
              None, None, None],
    "tenant": ["a", "a", "b", "b", "a", "a", "b", "a", "a", "b"],
}


def _trace(columns: dict[str, object]) -> Trace:
    return normalize(RawTrace(requests=pd.DataFrame(columns), format_name="test"), "t.jsonl")


def test_ten_requests_one_error_one_timeout_hand_checked() -> None:
    trace = _trace(TEN)
    success = success_profile(trace)
    assert success is not None
    assert (success.requests, success.successful, success.failed) == (10, 8, 2)
    assert success.success_rate == pytest.approx(0.8)
    assert success.by_status == {"unstated": 1, "ok": 7, "error": 1, "aborted": 0,
                                 "timeout": 1, "rejected": 0}
    # Tenant b: r2, r3, r6, r9 → 2 of 4; tenant a: 6 of 6. Most failures first.
    assert [(g.name, g.requests, g.successful) for g in success.by_tenant] == [
        ("b", 4, 2), ("a", 6, 6)]
    assert success.instances is None and success.by_instance == ()
    # Span 9 s: 1 s windows (10 of them ≤ 48), one request each; r3 and r6 fail.
    assert success.window_s == 1.0
    assert success.windows is not None
    assert [w.successful for w in success.windows] == [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    assert [(e.error, e.requests) for e in success.errors] == [
        ("CUDA error: out of memory", 1), ("deadline exceeded", 1)]

    profile = profile_trace(trace)
    assert (profile.requests, profile.successful_requests) == (10, 8)
    timing = profile.timing
    assert timing is not None and timing.e2e_s is not None and timing.ttft_s is not None
    e2e = [1.0, 2.0, 3.0, 5.0, 6.0, 8.0, 9.0, 10.0]  # the 8 successful, by hand
    assert timing.e2e_s.count == 8
    assert timing.e2e_s.mean == pytest.approx(44 / 8)
    # numpy's linear interpolation over 8 sorted values: P50 at rank 3.5 → (5 + 6) / 2;
    # P90 at rank 6.3 → 9 + 0.3 × (10 − 9).
    assert timing.e2e_s.p50 == pytest.approx(5.5)
    assert timing.e2e_s.p90 == pytest.approx(9.3)
    assert timing.e2e_s.max == 10.0 == max(e2e)
    # TTFT of request k is 0.1 (k + 1): the successful k are 0,1,2,4,5,7,8,9.
    assert timing.ttft_s.count == 8
    assert timing.ttft_s.max == pytest.approx(1.0)
    assert timing.ttft_s.mean == pytest.approx(0.1 * (1 + 2 + 3 + 5 + 6 + 8 + 9 + 10) / 8)
    # Lengths too: the failed prompts (900, 950) and outputs (0, 3) are not in them.
    assert profile.lengths.prompt_len.max == 170
    assert profile.lengths.output_len.min == 10
    assert profile.lengths.prompt_tokens_total == 100 + 110 + 120 + 130 + 140 + 150 + 160 + 170
    # Arrivals are offered load: every request.
    assert profile.arrivals is not None and profile.arrivals.requests == 10


def test_failures_with_short_latencies_do_not_make_a_run_look_faster() -> None:
    """The same eight slow successful requests, with and without two requests rejected in
    10 ms: the latency figures are equal, and only the success rate differs."""
    slow = {
        "arrival_s": [float(k) for k in range(8)],
        "prompt_len": [100] * 8,
        "output_len": [50] * 8,
        "first_token_s": [k + 2.0 for k in range(8)],
        "finish_s": [k + 8.0 for k in range(8)],
    }
    with_failures = {
        "arrival_s": [*slow["arrival_s"], 8.0, 9.0],
        "prompt_len": [*slow["prompt_len"], 100, 100],
        "output_len": [*slow["output_len"], 0, 0],
        "first_token_s": [*slow["first_token_s"], np.nan, np.nan],
        "finish_s": [*slow["finish_s"], 8.01, 9.01],
        "status": ["ok"] * 8 + ["rejected", "rejected"],
    }
    clean = profile_trace(_trace(slow)).timing
    failing = profile_trace(_trace(with_failures)).timing
    assert clean is not None and failing is not None
    assert failing.e2e_s == clean.e2e_s and failing.ttft_s == clean.ttft_s
    assert clean.e2e_s is not None and clean.e2e_s.p50 == 8.0
    success = success_profile(_trace(with_failures))
    assert success is not None and success.success_rate == pytest.approx(0.8)
    # The report's histograms leave them out too.
    plots = plot_data(_trace(with_failures), None, None)
    assert plots.ttft is not None and plots.ttft.total == 8


def test_no_status_column_means_no_success_section() -> None:
    trace = _trace({k: v for k, v in TEN.items() if k not in ("status", "error")})
    assert success_profile(trace) is None
    profile = profile_trace(trace)
    assert profile.successful_requests is None
    assert profile.timing is not None and profile.timing.e2e_s is not None
    assert profile.timing.e2e_s.count == 10
    assert "success" not in analyze(trace).sections


def test_window_width_is_the_smallest_that_gives_at_most_48_windows() -> None:
    assert window_width_s(0.0) == 1.0
    assert window_width_s(47.0) == 1.0  # 48 windows
    assert window_width_s(48.0) == 5.0  # 49 one-second windows would be too many
    assert window_width_s(86_400.0) == 3600.0  # a day: 25 hourly windows
    assert window_width_s(10 * 86_400.0) == 21_600.0


def test_burstgpt_failed_row_is_in_the_success_rate(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # burstgpt_small.csv: 5 rows, 1 with 'Response tokens' 0 → 4 of 5 completed.
    assert main(["analyze", str(FIXTURES / "burstgpt_small.csv"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["success"]["successful"] == 4 and doc["success"]["requests"] == 5
    assert doc["success"]["by_status"]["error"] == 1
    assert doc["profile"]["successful_requests"] == 4
    # Its lengths are the four answered requests', as before the failed row was kept.
    assert doc["profile"]["lengths"]["output_len"]["min"] == 18
    assert doc["profile"]["lengths"]["prompt_tokens_total"] == 472 + 417 + 213 + 1208


def test_success_section_has_its_view_in_every_renderer(
        capsys: pytest.CaptureFixture[str]) -> None:
    trace = read_trace(FIXTURES / "otel" / "sglang_flat_spans.json")
    sections = analyze(trace).sections
    assert views.view_name("success", sections["success"]) == "success"
    for name, section in sections.items():
        assert views.find_view(name, section) is not None, name
    path = str(FIXTURES / "otel" / "sglang_flat_spans.json")
    assert main(["analyze", path, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Success" in out and "| completed | 2 of 3 (66.7 %) |" in out
    assert "have unclosed span, auto closed" in out
    assert "### Observed timing (successful requests only: 2 of 3)" in out


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_success_json_validates_against_the_shipped_schema(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    from yaotu_trace.render.json_report import json_schema

    path = str(FIXTURES / "otel" / "sglang_flat_spans.json")
    assert main([command, path, "--format", "json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["success"]["success_rate"] == pytest.approx(2 / 3)
    validator = jsonschema.Draft202012Validator(json_schema())
    assert not list(validator.iter_errors(doc))
    broken = {**doc, "success": {**doc["success"], "windows": "none"}}
    assert list(validator.iter_errors(broken))  # the schema does pin the section


def test_report_page_says_which_requests_its_lengths_describe(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(FIXTURES / "otel" / "sglang_flat_spans.json"),
                 "--output", str(out)]) in (0, 1)
    page = out.read_text()
    assert "<h2>Success</h2>" in page and "successful requests only: 2 of 3" in page


def test_baseline_gate_fails_a_run_that_lost_requests(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The same ten requests, all answered (baseline) and then with r3 and r6 failed: the
    success rate fell from 1.0 to 0.8, beyond the 5 % tolerance, so the gate fails."""
    from yaotu_trace.data.canonical import write_trace

    clean = pd.DataFrame({**TEN, "status": ["ok"] * 10, "error": [None] * 10})
    write_trace(clean, tmp_path / "before.csv")
    write_trace(pd.DataFrame(TEN), tmp_path / "after.csv")
    assert main(["analyze", str(tmp_path / "before.csv"), "--format", "json",
                 "--output", str(tmp_path / "before.json")]) == 0
    capsys.readouterr()
    code = main(["check", str(tmp_path / "after.csv"), "--baseline",
                 str(tmp_path / "before.json"), "--format", "json"])
    results = json.loads(capsys.readouterr().out)["checks"]["results"]
    success = next(r for r in results if r["path"] == "success.success_rate")
    assert code == 1 and success["status"] == "failed"
    assert (success["value"], success["baseline"]) == (pytest.approx(0.8), 1.0)
