"""`sim.metrics_export`: the Prometheus export of a run, checked by hand on a tiny run, read
back through `--metrics`' reader, and written by `trace simulate --metrics-out`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cli.test_cli_simulate import small_trace
from yaotu_trace.cli import main
from yaotu_trace.commands.simulate import write_metrics_csv
from yaotu_trace.errors import ExitCode
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.sim.metrics_export import metrics_export, scrape_times


def tiny_run() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two requests on one instance, four steps.

    r0 arrives at 0.0, is scheduled at once, first token 0.5, tokens 0.5/1.0/1.5; r1 arrives
    at 0.2, waits until 1.2, tokens 1.7/2.2. Steps end at 0.5, 1.0, 1.7, 2.2.
    """
    requests = pd.DataFrame({
        "arrival_s": [0.0, 0.2], "scheduled_s": [0.0, 1.2], "first_token_s": [0.5, 1.7],
        "finish_s": [1.5, 2.2], "prompt_len": [100, 50], "output_len": [3, 2],
        "cached_tokens": [16, 0], "instance": ["i0", "i0"],
        "token_times_s": [[0.5, 1.0, 1.5], [1.7, 2.2]],
    })
    steps = pd.DataFrame({
        "instance": ["i0"] * 4, "start_s": [0.0, 0.5, 1.2, 1.7], "end_s": [0.5, 1.0, 1.7, 2.2],
        "prefill_tokens": [84, 0, 50, 0], "decode_tokens": [0, 1, 1, 1],
        "num_running": [1, 1, 2, 1], "num_waiting": [1, 1, 0, 0],
        "kv_blocks_used": [7, 7, 10, 4], "kv_blocks_total": [11] * 4,
        "num_preempted": [0, 1, 0, 0],
    })
    return requests, steps


def series(frame: pd.DataFrame, metric: str, le: str | None = None) -> list[float]:
    labels = '{instance="i0"}' if le is None else f'{{instance="i0",le="{le}"}}'
    rows = frame[(frame["metric"] == metric) & (frame["labels"] == labels)]
    return rows.sort_values("timestamp")["value"].tolist()


def test_scrapes_run_from_the_first_event_to_just_after_the_last():
    requests, steps = tiny_run()
    # events span 0.0 .. 2.2: floor(2.2 / 1) + 2 = 4 scrapes, the last (3.0) after 2.2
    np.testing.assert_allclose(scrape_times(requests, steps, 1.0), [0.0, 1.0, 2.0, 3.0])
    # every 0.5 s: floor(4.4) + 2 = 6 scrapes, 0.0 .. 2.5
    assert scrape_times(requests, steps, 0.5).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


def test_gauges_read_the_last_step_ended_before_the_scrape():
    frame = metrics_export(*tiny_run(), scrape_interval_s=1.0)
    # t=0: no step ended → 0; t=1: s0 (ended 0.5; s1 ends at 1.0, not before 1); t=2: s2
    # (1.7); t=3: s3 (2.2)
    assert series(frame, "vllm:num_requests_running") == [0, 1, 2, 1]
    assert series(frame, "vllm:num_requests_waiting") == [0, 1, 0, 0]
    # kv_blocks_used / kv_blocks_total = used / 11 (the usable blocks: vLLM's get_usage()
    # divides by num_gpu_blocks - 1, and the step log counts the pool without the null block)
    assert series(frame, "vllm:kv_cache_usage_perc") == pytest.approx([0, 7 / 11, 10 / 11,
                                                                        4 / 11])


def test_counters_sum_the_events_before_the_scrape():
    frame = metrics_export(*tiny_run(), scrape_interval_s=1.0)
    # s1 preempted one request and ended at 1.0: counted from the scrape at 2
    assert series(frame, "vllm:num_preemptions_total") == [0, 0, 1, 1]
    # prompt_len at first token: r0 at 0.5 (100), r1 at 1.7 (50)
    assert series(frame, "vllm:prompt_tokens_total") == [0, 100, 150, 150]
    # tokens at 0.5 | 1.0 1.5 1.7 | 2.2
    assert series(frame, "vllm:generation_tokens_total") == [0, 1, 4, 5]
    # queried at scheduling: r0 at 0.0 (seen from t=1), r1 at 1.2
    assert series(frame, "vllm:prefix_cache_queries_total") == [0, 100, 150, 150]
    assert series(frame, "vllm:prefix_cache_hits_total") == [0, 16, 16, 16]


def test_histograms_observe_at_finish_first_token_and_step_end():
    frame = metrics_export(*tiny_run(), scrape_interval_s=1.0)
    # queue times 0.0 (r0, finished 1.5) and 1.0 (r1, finished 2.2)
    queue = "vllm:request_queue_time_seconds"
    assert series(frame, f"{queue}_count") == [0, 0, 1, 2]
    assert series(frame, f"{queue}_sum") == [0, 0, 0, 1.0]
    assert series(frame, f"{queue}_bucket", "0.3") == [0, 0, 1, 1]
    assert series(frame, f"{queue}_bucket", "1.0") == [0, 0, 1, 2]
    assert series(frame, f"{queue}_bucket", "+Inf") == [0, 0, 1, 2]
    # TTFT 0.5 at 0.5 and 1.5 at 1.7
    assert series(frame, "vllm:time_to_first_token_seconds_sum") == [0, 0.5, 2.0, 2.0]
    # step tokens 84 (0.5), 1 (1.0), 51 (1.7), 1 (2.2)
    assert series(frame, "vllm:iteration_tokens_total_count") == [0, 1, 3, 4]
    assert series(frame, "vllm:iteration_tokens_total_sum") == [0, 84, 136, 137]


def test_the_csv_reads_back_through_the_metrics_reader(tmp_path):
    requests, steps = tiny_run()
    path = tmp_path / "m.csv"
    write_metrics_csv(requests, steps, path, 1.0)
    m = read_metrics(path)
    # mean queue time (0 + 1) / 2, mean TTFT (0.5 + 1.5) / 2
    assert m.histogram_mean("queue_time_s") == pytest.approx(0.5)
    assert m.histogram_mean("ttft_s") == pytest.approx(1.0)
    assert m.counter_increase("prompt_tokens") == 150
    waiting = m.gauge("num_waiting")
    assert waiting is not None and waiting["value"].tolist() == [0, 1, 0, 0]


def test_requests_without_an_instance_take_the_step_logs_only_one():
    requests, steps = tiny_run()
    frame = metrics_export(requests.drop(columns="instance"), steps, scrape_interval_s=1.0)
    assert set(frame["labels"].str.extract(r'instance="([^"]*)"')[0]) == {"i0"}


def test_simulate_metrics_out_exports_each_instance(tmp_path: Path, capsys):
    trace = small_trace(tmp_path)
    out, metrics = tmp_path / "sim.parquet", tmp_path / "m.csv"
    code = main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--instances", "2", "--out", str(out), "--metrics-out", str(metrics),
                 "--scrape-interval-s", "0.5", "--format", "json"])
    assert code == ExitCode.OK
    capsys.readouterr()
    m = read_metrics(metrics)
    df = read_trace(out).requests
    assert m.counter_increase("prompt_tokens") == df["prompt_len"].sum()
    assert m.counter_increase("generation_tokens") == df["output_len"].sum()
    assert m.histogram_count("queue_time_s") == len(df)
    queue = (df["scheduled_s"] - df["arrival_s"]).mean()
    assert m.histogram_mean("queue_time_s") == pytest.approx(queue)
    running = m.frame[m.frame["metric"] == "vllm:num_requests_running"]
    assert set(running["labels"]) == {"instance=i0", "instance=i1"}
    assert np.diff(np.unique(running["time_s"])) == pytest.approx(0.5)


def test_metrics_out_must_be_csv(tmp_path, capsys):
    trace = small_trace(tmp_path)
    code = main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--out", str(tmp_path / "s.parquet"), "--metrics-out", str(tmp_path / "m.json")])
    assert code == ExitCode.USAGE
    assert "--metrics-out" in capsys.readouterr().err


def test_generate_metrics_out_exports_the_diag_run(tmp_path, capsys):
    out, metrics = tmp_path / "h.parquet", tmp_path / "h.csv"
    code = main(["generate", "diag-healthy", "--seed", "1", "--requests", "30", "--out",
                 str(out), "--metrics-out", str(metrics), "-q"])
    assert code == ExitCode.OK
    m = read_metrics(metrics)
    df = read_trace(out).requests
    assert m.histogram_count("e2e_s") == len(df)
    assert m.counter_increase("prompt_tokens") == df["prompt_len"].sum()
    # only a simulated scenario has an engine to export
    code = main(["generate", "chat", "--out", str(tmp_path / "c.parquet"), "--metrics-out",
                 str(tmp_path / "c.csv"), "-q"])
    assert code == ExitCode.USAGE
    assert "no engine run" in capsys.readouterr().err


def test_a_mistyped_scrape_interval_is_refused_not_allocated():
    # events span 0.0 .. 2.2 s: at 1e-9 s that is 2.2e9 scrapes, far above MAX_SCRAPES
    from yaotu_trace.errors import ConfigError

    requests, steps = tiny_run()
    with pytest.raises(ConfigError, match=r"--scrape-interval-s 1e-09: the run spans 2\.2 s"):
        scrape_times(requests, steps, 1e-9)
