"""Engine server logs (vLLM, SGLang) read as `--metrics` telemetry.

The fixtures under tests/fixtures/serverlogs/ are excerpts of engine logs posted in GitHub issues
and pull requests, mostly the engines' own (sources in its README.md); every expected number
below was read off those lines by hand.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES

from tests.conftest import run_cli
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.errors import ExitCode, TraceReadError
from yaotu_trace.ingest.load import read_metrics

LOGS = FIXTURES / "serverlogs"
TRACE = FIXTURES / "engines" / "trace_mixed.parquet"


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _values(m: EngineMetrics, key: str, how: str = "sum") -> list[float]:
    g = m.gauge(key, how=how)
    assert g is not None, key
    return [round(v, 6) for v in g["value"].tolist()]


def test_vllm_v1_periodic_stats_issue_43295() -> None:
    """vllm-project/vllm#43295: five V1 'Engine 000:' lines, 10 s apart, from 05-19 10:13:11."""
    m = read_metrics(LOGS / "vllm_v1_issue43295.log", year=2025)
    assert _values(m, "num_running") == [18, 18, 18, 21, 20]
    assert _values(m, "num_waiting") == [43, 42, 33, 23, 23]
    assert _values(m, "kv_usage", "max") == [0.959, 0.955, 0.877, 0.959, 0.984]
    assert m.name_of("kv_usage") == "vllm:kv_cache_usage_perc"
    assert _values(m, "cache_hit_rate", "max") == [0.0] * 5
    times = m.gauge("num_running")["time_s"].tolist()
    assert times[0] == _utc("2025-05-19T10:13:11")
    assert [b - a for a, b in pairwise(times)] == [10.0] * 4
    prompt = m.frame[m.frame["metric"] == "log:avg_prompt_throughput_tokens_per_s"]
    assert prompt["value"].tolist() == [0.0, 0.0, 12068.8, 18032.5, 0.0]
    assert set(m.frame["labels"]) == {"engine=0"}
    assert "2025 is taken from the trace" in m.notes[0]
    assert "UTC" in m.notes[0]


def test_vllm_year_from_a_date_written_in_the_log() -> None:
    """tenstorrent/tt-inference-server#3359: Docker prefixes each vLLM line with its ISO time,
    2026-05-12T08:01:39Z, so the year comes from the file when no trace year is given."""
    m = read_metrics(LOGS / "vllm_v1_docker_tt3359.log")
    assert m.gauge("num_running")["time_s"].iloc[0] == _utc("2026-05-12T08:01:39")
    assert _values(m, "num_waiting") == [0, 1, 0]
    assert _values(m, "kv_usage", "max") == [0.628, 0.688, 0.745]
    assert "2026 is taken from a date written in the log" in m.notes[0]
    assert m.log_year == 2026


def test_vllm_prefix_cache_hit_rate_torch_spyre_1030() -> None:
    """torch-spyre/sendnn-inference#1030: the rate goes 0.0 % → 48.4 % → 64.6 %; the first line
    ends in two spaces."""
    m = read_metrics(LOGS / "vllm_v1_prefix_spyre1030.log", year=2025)
    assert _values(m, "cache_hit_rate", "max") == [0.0, 0.484, 0.646]
    assert m.name_of("cache_hit_rate") == "log:prefix_cache_hit_rate"


def test_vllm_v0_swapped_and_pending_issue_546() -> None:
    """vllm-project/vllm#546 (vLLM 0.6.3): V0 lines with Swapped and Pending, no 'Engine'."""
    m = read_metrics(LOGS / "vllm_v0_issue546.log", year=2024)
    assert _values(m, "num_waiting") == [98, 98]  # Pending is the waiting queue
    assert _values(m, "num_running") == [2, 2]
    assert _values(m, "kv_usage", "max") == [0.738, 0.861]
    swapped = m.frame[m.frame["metric"] == "vllm:num_requests_swapped"]
    assert swapped["value"].tolist() == [0.0, 0.0]
    assert m.gauge("num_running")["time_s"].iloc[0] == _utc("2024-10-28T11:16:34")


def test_vllm_startup_pool_size_pr_13596() -> None:
    """vllm-project/vllm#13596: 'GPU KV cache size: 2,042,016 tokens' and 'Maximum concurrency
    for 2,048 tokens per request: 997.08x'."""
    m = read_metrics(LOGS / "vllm_v1_startup_pr13596.log", year=2025)
    assert _values(m, "max_total_tokens", "max") == [2042016.0]
    concurrency = m.frame[m.frame["metric"] == "log:max_concurrency"]
    assert concurrency["value"].tolist() == [997.08]


def test_vllm_preemption_warning_pr_6102() -> None:
    """vllm-project/vllm#6102: one RECOMPUTE warning with total_num_cumulative_preemption=1 is
    one preemption."""
    m = read_metrics(LOGS / "vllm_v0_preemption_pr6102.log", year=2024)
    assert m.counter_increase("preemptions") == 1.0
    steps = m.counter_steps("preemptions")
    assert steps["time_s"].tolist() == [_utc("2024-08-20T10:18:39")]


def test_sglang_prefill_and_decode_batches_pr_29853() -> None:
    """sgl-project/sglang#29853: five TP0 prefill batches (4 × 8192 + 7808 new tokens, none
    cached) and one decode batch; the HTTP access line is not telemetry."""
    m = read_metrics(LOGS / "sglang_pr29853.log")
    assert _values(m, "num_running") == [83, 92, 101, 110, 119, 128]
    assert _values(m, "num_waiting") == [26, 17, 8, 0, 0, 0]
    assert _values(m, "kv_usage", "max") == [0.23, 0.26, 0.28, 0.30, 0.30, 0.31]
    assert m.counter_increase("prompt_tokens") == 4 * 8192 + 7808
    assert m.counter_increase("cached_tokens") == 0.0
    used = m.frame[m.frame["metric"] == "sglang:num_used_tokens"]
    assert used["value"].tolist() == [118656.0]
    gen = m.frame[m.frame["metric"] == "sglang:gen_throughput"]
    assert gen["value"].tolist() == [14.47]
    assert m.gauge("num_running")["time_s"].iloc[0] == _utc("2026-07-01T15:20:26")
    assert m.log_year is None  # SGLang writes the year
    assert "no year" not in m.notes[0]


def test_sglang_cached_tokens_give_the_observed_hit_rate_pr_13023() -> None:
    """sgl-project/sglang#13023: cached 0 + 0 + 4 + 10 + 16 = 30 of 13229 prompt tokens
    (771 + 3341 + 895 + 4096 + 4096 new); lines without a rank tag, a blank stamped line and
    'Benchmark...' in between."""
    m = read_metrics(LOGS / "sglang_cached_pr13023.log")
    assert m.counter_increase("cached_tokens") == 30.0
    assert m.counter_increase("prompt_tokens") == 13229.0
    # Three batches stamped 04:28:01: the last stands for that second, as a scrape would.
    assert _values(m, "num_waiting") == [0, 0, 170]
    assert any("13229 and 30 tokens over 5 batch(es)" in n for n in m.notes)


def test_sglang_startup_limits_issue_29575() -> None:
    """sgl-project/sglang#29575: max_total_num_tokens=2086558, max_running_requests=33."""
    m = read_metrics(LOGS / "sglang_startup_issue29575.log")
    assert _values(m, "max_total_tokens", "max") == [2086558.0]
    running = m.frame[m.frame["metric"] == "log:max_running_requests"]
    assert running["value"].tolist() == [33.0]


def test_sglang_retractions_are_preemptions(tmp_path: Path) -> None:
    """Hand-written from the format string in sgl-project/sglang scheduler.py (quoted in pull
    request #11123): "KV cache pool is full. Retract requests. #retracted_reqs: N, …"; 2 + 3
    retractions are 5 preemptions."""
    log = tmp_path / "sglang.log"
    log.write_text(
        "[2025-10-01 12:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#aborted_retracted_reqs: 0, #new_token_ratio: 0.5833 -> 0.9583\n"
        "[2025-10-01 12:00:09 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_token_ratio: 0.7000 -> 1.0000\n", encoding="utf-8")
    m = read_metrics(log)
    assert m.name_of("preemptions") == "sglang:num_retracted_requests_total"
    assert m.counter_increase("preemptions") == 5.0
    assert m.counter_steps("preemptions")["delta"].tolist() == [2.0, 3.0]


def test_startup_values_hold_until_the_last_sample(tmp_path: Path) -> None:
    """A pool size logged at start-up is repeated at the first and last periodic sample, so
    cutting the telemetry to the trace's range keeps it."""
    log = tmp_path / "server.txt"
    log.write_text(
        "INFO 05-19 10:00:00 kv_cache_utils.py:524] GPU KV cache size: 1,000 tokens\n"
        + (LOGS / "vllm_v1_issue43295.log").read_text(), encoding="utf-8")
    m = read_metrics(log, year=2025)
    pool = m.gauge("max_total_tokens", how="max")
    assert pool["value"].tolist() == [1000.0] * 3
    assert pool["time_s"].tolist() == [_utc("2025-05-19T10:00:00"), _utc("2025-05-19T10:13:11"),
                                       _utc("2025-05-19T10:13:51")]


def test_detected_by_content_without_extension(tmp_path: Path) -> None:
    """The same lines under a name without extension read as under .log."""
    bare = tmp_path / "server"
    bare.write_bytes((LOGS / "sglang_pr29853.log").read_bytes())
    m = read_metrics(bare)
    assert m.counter_increase("prompt_tokens") == 40576.0


def test_year_rolls_over_and_engines_sum(tmp_path: Path) -> None:
    """Hand-written: a log over New Year gains a year; two DP engines' lines at one second sum
    their running requests; a TP1 duplicate of an SGLang batch is not counted twice."""
    stats = ("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, "
             "Running: {} reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, "
             "Prefix cache hit rate: 0.0%")
    log = tmp_path / "v.log"
    log.write_text("\n".join([
        f"INFO 12-31 23:59:55 [loggers.py:1] Engine 000: {stats.format(3)}",
        f"INFO 12-31 23:59:55 [loggers.py:1] Engine 001: {stats.format(4)}",
        f"INFO 01-01 00:00:05 [loggers.py:1] Engine 000: {stats.format(5)}",
        # vLLM 0.6 split the hit rate by device.
        "INFO 01-01 00:00:15 metrics.py:1] Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 1.0 tokens/s, Running: 6 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
        "cache usage: 10.0%, CPU KV cache usage: 0.0%, Prefix cache hit rate: GPU: 25.00%, "
        "CPU: 0.00%.",
    ]) + "\n", encoding="utf-8")
    m = read_metrics(log, year=2024)
    g = m.gauge("num_running")
    assert g["value"].tolist() == [7.0, 5.0, 6.0]
    assert g["time_s"].tolist()[:2] == [_utc("2024-12-31T23:59:55"),
                                        _utc("2025-01-01T00:00:05")]
    assert _values(m, "cache_hit_rate", "max")[-1] == 0.25
    sg = tmp_path / "s.log"
    line = ("Prefill batch, #new-seq: 1, #new-token: 100, #cached-token: 20, token usage: 0.10, "
            "#running-req: 0, #queue-req: 0")
    sg.write_text(f"[2025-01-01 00:00:00 TP0] {line}\n[2025-01-01 00:00:00 TP1] {line}\n",
                  encoding="utf-8")
    s = read_metrics(sg)
    assert s.counter_increase("prompt_tokens") == 120.0
    assert s.counter_increase("cached_tokens") == 20.0


def test_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """A stats line with a value that is not a number, and one without a time, are skipped
    with a count and the first line number in the notes."""
    good = (LOGS / "vllm_v1_issue43295.log").read_text().splitlines()
    log = tmp_path / "server.log"
    log.write_text("\n".join([
        good[0],
        good[1].replace("Running: 18 reqs", "Running: many reqs"),
        "Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs",
        good[2],
    ]) + "\n", encoding="utf-8")
    m = read_metrics(log, year=2025)
    assert _values(m, "num_running") == [18, 18]
    assert any("2 engine log line(s) could not be read and were skipped (first: line 2)" in n
               for n in m.notes)


@pytest.mark.parametrize("name", ["server.log", "server"])
def test_no_recognisable_line_is_one_line_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("INFO:     Started server process [1]\nhello\n", encoding="utf-8")
    with pytest.raises(TraceReadError) as info:
        read_metrics(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "\n" not in message
    assert "Avg prompt throughput" in message and "Prefill batch" in message


def test_only_unreadable_lines_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"no engine log line recognised \(1 such line"):
        read_metrics(path)


def test_diagnose_with_a_server_log_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """`trace diagnose TRACE --metrics server.log` on the bundled mixed trace and a generated
    vLLM log (12 stats lines, 4 preemption warnings, pool 98,304 tokens): the log feeds the
    kv_memory and queueing axes, and the notes say how its times were read."""
    code, out, err = run_cli(["diagnose", str(TRACE), "--metrics",
                              str(LOGS / "vllm_generated_mixed.log"), "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    axes = {a["name"]: a for a in doc["axes"]}
    assert "metrics" in axes["kv_memory"]["sources"]
    assert "metrics" in axes["queueing"]["sources"]
    assert "vllm:num_preemptions_total" in doc["config"]["metrics"]["series"]
    notes = doc["input"]["notes"]
    assert any("is an engine server log (4 preemption warning line(s), 2 start-up line(s), "
               "12 vLLM stats line(s))" in n for n in notes)
    code, out, err = run_cli(["diagnose", str(TRACE), "--metrics",
                              str(LOGS / "vllm_generated_mixed.log")], capsys)
    assert code == ExitCode.OK, err
    assert "4 preemptions" in out


def test_diagnose_dates_the_log_by_the_trace(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A trace on Unix time in 2025 dates vLLM's year-less lines (issue 43295's, 05-19
    10:13:11–10:13:51) in 2025, so they overlap the trace's 40 s instead of being refused."""
    start = _utc("2025-05-19T10:13:11")
    trace = tmp_path / "t.parquet"
    pd.DataFrame({"request_id": [f"r{i}" for i in range(5)],
                  "arrival_s": [start + 10.0 * i for i in range(5)],
                  "prompt_len": [100] * 5, "output_len": [10] * 5}).to_parquet(trace)
    code, out, err = run_cli(["diagnose", str(trace), "--metrics",
                              str(LOGS / "vllm_v1_issue43295.log"), "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    notes = json.loads(out)["input"]["notes"]
    assert any("2025 is taken from the trace" in n for n in notes)
    assert not any("cannot be matched in time" in n for n in notes)


def test_diagnose_reads_sglang_cached_tokens_as_observed_hit_rate(
        capsys: pytest.CaptureFixture[str]) -> None:
    """sgl-project/sglang#13023's prefill lines through `trace diagnose`: the prefix_reuse
    axis observes 30 / 13229 cached prompt tokens."""
    code, out, err = run_cli(["diagnose", str(TRACE), "--metrics",
                              str(LOGS / "sglang_cached_pr13023.log"), "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    reuse = {a["name"]: a for a in json.loads(out)["axes"]}["prefix_reuse"]["metrics"]
    assert reuse["observed_source"] == "sglang:cached_tokens_total"
    assert reuse["observed_hit_rate"] == pytest.approx(30 / 13229)


def test_a_log_without_a_year_reads_the_same_whatever_its_file_time(tmp_path: Path) -> None:
    """No year in the trace or the log: the times are dated in one fixed year, never by the
    file's modification time, so a copied log gives the same telemetry."""
    import os
    import shutil

    frames = []
    for year in (2011, 2024):
        copy = tmp_path / f"copy-{year}.log"
        shutil.copyfile(LOGS / "vllm_generated_mixed.log", copy)
        when = datetime(year, 6, 1, tzinfo=UTC).timestamp()
        os.utime(copy, (when, when))
        metrics = read_metrics(copy)
        assert metrics.log_year == 2004
        assert any("so 2004" in note for note in metrics.notes)
        frames.append(metrics.frame)
    pd.testing.assert_frame_equal(frames[0], frames[1])
