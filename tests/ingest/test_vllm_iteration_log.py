"""vLLM's `--enable-logging-iteration-details` server log as the step log (`--steps vllm.log`).

The logs (`tests/fixtures/captures/vcr/stats/<case>.vllm.log`, by `benchmarks/engines/
vllm_steps.py vcr-stats --write`) are what vLLM 0.33.0's own `LoggingStatLogger` and log
formatter wrote for its scheduler's run of each case, every step's `SchedulerIterationDetails`
made by its `compute_iteration_details`, the log's clock the run's from 2026-01-01 00:00 UTC;
`<case>.json` beside them is the run itself, which the reader never sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace import diagnose
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.load import read_metrics, read_steps
from yaotu_trace.ingest.telemetry.serverlog import server_log_steps

STATS = FIXTURES / "captures" / "vcr" / "stats"
EPOCH_S = 1_767_225_600.0  # the logs' clock: the run's 0 s


def _trace(name: str, tmp_path: Path) -> Path:
    """The case's requests on the log's clock, as a canonical table, each token at the end of
    the step of vLLM's run that emitted it."""
    requests = json.loads((FIXTURES / "sim_vllm" / f"{name}.json").read_text())["requests"]
    run = json.loads((STATS / f"{name}.json").read_text())["run"]
    ends = EPOCH_S + np.array(run["steps"], dtype=np.int64)[:, 1] / 1e9
    times = [ends[np.asarray(s, dtype=np.int64)].tolist() for s in run["token_steps"]]
    path = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": np.array(requests["arrival_s"]) + EPOCH_S,
                  "prompt_len": requests["prompt_tokens"],
                  "output_len": [len(t) for t in times],
                  "token_times_s": times}).to_parquet(path)
    return path


@pytest.mark.parametrize("name", ["multi_tenant", "long_prefill"])
def test_every_step_is_vllms_own_tokens_and_duration(name: str, tmp_path: Path) -> None:
    """One step per line; its context and generation tokens are every token vLLM scheduled in
    that step; its duration is the step's to the log's 0.01 ms; placed back to back within its
    logged second, it ends within 0.04 s of the step's true end (the log stamps whole
    seconds)."""
    run = json.loads((STATS / f"{name}.json").read_text())["run"]
    steps = np.array(run["steps"], dtype=np.int64)
    trace = read_trace(_trace(name, tmp_path), steps_path=STATS / f"{name}.vllm.log")
    assert trace.steps is not None
    log = pd.concat(list(trace.steps.batches(trace.steps.columns)), ignore_index=True)
    assert len(log) == len(steps)
    assert (log["prefill_tokens"] + log["decode_tokens"]).tolist() == steps[:, 2].tolist()
    duration = (steps[:, 1] - steps[:, 0]) / 1e9
    assert np.abs((log["end_s"] - log["start_s"]).to_numpy() - duration).max() < 6e-6
    assert np.abs(log["end_s"].to_numpy() - (EPOCH_S + steps[:, 1] / 1e9)).max() < 0.04
    assert any("vLLM's iteration lines" in n for n in trace.notes)


def test_the_interference_axis_reads_the_prefill_in_vllms_own_steps(tmp_path: Path) -> None:
    """long_prefill's chunked prompts share steps with decodes: the table has no instance, so
    the axis finds the stalls' prefill in the engine's own steps the log gives."""
    trace = read_trace(_trace("long_prefill", tmp_path),
                       steps_path=STATS / "long_prefill.vllm.log")
    assert trace.steps is not None
    doc = diagnose(trace, DiagnosisOptions()).to_dict()
    axis = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    assert axis["metrics"]["coincidence_source"] == "prefill steps in the step log"
    # Its median decode step is the run's: the steps that computed no prompt token.
    run = json.loads((STATS / "long_prefill.json").read_text())["run"]
    steps = np.array(run["steps"], dtype=np.int64)
    log = pd.concat(list(trace.steps.batches(("prefill_tokens",))), ignore_index=True)
    decode_only = (log["prefill_tokens"] == 0).to_numpy()
    true_median = float(np.median((steps[decode_only, 1] - steps[decode_only, 0]) / 1e9))
    assert axis["metrics"]["median_decode_step_s"] == pytest.approx(true_median, abs=1e-5)


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "vllm.log"
    path.write_text("".join(f"(APIServer pid=1) INFO 01-01 00:00:{s} [loggers.py:199] {x}\n"
                            for s, x in lines), encoding="utf-8")
    return path


def _it(n: int, ctx: int, gen: int, ms: float, dummy: str = "") -> str:
    return (f"Engine 000: Iteration({n}): {1 if ctx else 0} context requests, {ctx} context "
            f"tokens, {gen} generation requests, {gen} generation tokens, iteration elapsed "
            f"time: {ms:.2f} ms{dummy}, GPU KV cache usage: 12.5%")


def test_hand_made_lines_placed_back_to_back(tmp_path: Path) -> None:
    """Three steps in second 1 (20, 10, 10 ms: ending at 1.000, 1.010, 1.020 s), a dummy
    one left out, a lost iteration number noted, and the next second's step anchored there."""
    path = _log(tmp_path, [("01", _it(0, 100, 0, 20.0)), ("01", _it(1, 0, 4, 10.0)),
                           ("01", _it(2, 0, 0, 0.0, " (dummy)")), ("01", _it(3, 0, 4, 10.0)),
                           ("03", _it(5, 50, 4, 15.0))])
    log = read_steps(path, "--steps")
    frame = pd.concat(list(log.batches(log.columns)), ignore_index=True)
    base = frame["end_s"].iloc[0]
    assert (frame["end_s"] - base).round(6).tolist() == [0.0, 0.01, 0.02, 2.0]
    assert (frame["end_s"] - frame["start_s"]).round(6).tolist() == [0.02, 0.01, 0.01, 0.015]
    assert frame["prefill_tokens"].tolist() == [100, 0, 0, 50]
    assert frame["kv_usage"].tolist() == [0.125] * 4
    metrics = read_metrics(path)  # as --metrics: the KV usage after each step
    usage = metrics.gauge("kv_usage", how="max")
    assert usage is not None and usage["value"].tolist() == [0.125, 0.125]


def test_a_log_without_iteration_lines_is_refused_naming_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text("INFO 01-01 00:00:01 [loggers.py:1] Engine 000: Avg prompt throughput: "
                    "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
                    "Waiting: 0 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0%\n",
                    encoding="utf-8")
    with pytest.raises(TraceReadError, match="--enable-logging-iteration-details"):
        read_steps(path, "--steps")


def test_a_request_log_with_iteration_lines_brings_its_steps(tmp_path: Path) -> None:
    """One log with the requests (`--enable-log-requests`, DEBUG) and the steps: the steps
    are the trace's step log, on its clock (seconds since the first arrival), and the notes
    no longer call the iteration lines unused (a hand-made log in vLLM's line formats)."""
    head = "(APIServer pid=1) {lvl} 01-01 00:00:{s} [{f}] "
    lines = [
        (head + "Request r1 details: prompt: 'x', prompt_token_ids: [1, 2, 3, 4], "
         "prompt_embeds shape: None, lora_request: None.").format(lvl="DEBUG", s="02",
                                                                   f="request_logger.py:56"),
        (head + "Received request r1: params: SamplingParams(n=1), lora_request: None.").format(
            lvl="INFO", s="02", f="request_logger.py:66"),
        (head + _it(0, 4, 0, 20.0)).format(lvl="INFO", s="02", f="loggers.py:199"),
        (head + _it(1, 0, 1, 10.0)).format(lvl="INFO", s="02", f="loggers.py:199"),
        (head + "Generated response r1 details: output_token_ids: [7, 8]").format(
            lvl="DEBUG", s="02", f="request_logger.py:112"),
        (head + "Generated response r1: output: 'ab', finish_reason: stop").format(
            lvl="INFO", s="02", f="request_logger.py:119"),
    ]
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    trace = read_trace(path)
    assert trace.format_name == "vllm-log" and trace.steps is not None
    frame = pd.concat(list(trace.steps.batches(trace.steps.columns)), ignore_index=True)
    assert frame["end_s"].round(6).tolist() == [0.0, 0.01]
    assert frame["prefill_tokens"].tolist() == [4, 0]
    assert not any("engine step lines" in n and "not used" in n for n in trace.notes)


def test_steps_that_overlap_are_placed_at_the_end_of_their_second_and_counted(
        tmp_path: Path) -> None:
    """Three 600 ms steps logged in one second cannot all run back to back there (async
    scheduling overlaps them): the third ends at the second's end, overlapping the second,
    and a note counts it rather than pushing it into the next second."""
    path = _log(tmp_path, [("01", _it(0, 0, 4, 600.0)), ("01", _it(1, 0, 4, 600.0)),
                           ("01", _it(2, 0, 4, 600.0))])
    log = read_steps(path, "--steps")
    frame = pd.concat(list(log.batches(log.columns)), ignore_index=True)
    base = frame["end_s"].iloc[0]
    assert (frame["end_s"] - base).round(6).tolist() == [0.0, 0.6, 1.0]
    notes = server_log_steps(path)[1]
    assert any(n.startswith("1 step(s) logged before") for n in notes)


def test_a_step_no_engine_runs_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = _log(tmp_path, [("01", _it(0, 100, 0, 20.0)), ("01", _it(1, 0, 4, 1e24))])
    with pytest.raises(TraceReadError, match=r"vllm\.log: line 2: a step of 1e\+24 ms"):
        read_steps(path, "--steps")
