"""Failures injected into a simulated run (`--fail-share`, `sim.failures`): the failing
requests end mid-stream with status error, the engine frees them at their last token, and the
diagnosis of the run reports them (Q009, the verdict's outcome line)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.errors import ConfigError
from yaotu_trace.sim.failures import FAILED_ERROR, Failures, failure_plan
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import run_scenario


def _trace(n: int = 200):
    rng = np.random.default_rng(3)
    table = pd.DataFrame({"arrival_s": np.arange(n) * 0.05,
                          "prompt_len": rng.integers(50, 400, n),
                          "output_len": rng.integers(2, 60, n)})
    return normalize(RawTrace(requests=table, format_name="canonical"), "t")


def _run(n: int = 200, **options: object):
    return run_scenario(_trace(n), Scenario(model="Llama-3.1-8B", gpu="H100-SXM", **options))


def test_spread_failures_stop_mid_stream_with_status_error() -> None:
    run = _run(fail_share=0.12)
    df = run.requests
    failed = (df["status"] == "error").to_numpy()
    # exactly round(0.12 × 200) = 24, each with the injected error text
    assert int(failed.sum()) == 24
    assert (df.loc[failed, "error"] == FAILED_ERROR).all()
    assert df.loc[~failed, "error"].isna().all()
    # a failed request streamed 1 ≤ k < its asked length, and its table says k tokens
    asked = _trace().requests["output_len"].to_numpy()
    tokens = df["token_times_s"].map(len).to_numpy()
    assert (tokens == df["output_len"].to_numpy()).all()
    assert ((tokens[failed] >= 1) & (tokens[failed] < asked[failed])).all()
    assert (tokens[~failed] == asked[~failed]).all()
    # it finished at its last token
    last = df["token_times_s"].map(lambda t: t[-1]).to_numpy()
    assert np.allclose(df["finish_s"].to_numpy(), last)


def test_the_engine_serves_only_the_tokens_a_failed_request_streamed() -> None:
    # Colocated vLLM: every output token but the first comes from a decode step, so the step
    # log's decode tokens are Σ (generated − 1) over the table, failures included.
    run = _run(fail_share=0.3)
    generated = run.requests["output_len"].to_numpy()
    assert int(run.steps["decode_tokens"].sum()) == int((generated - 1).sum())
    clean = _run()
    assert int(clean.steps["decode_tokens"].sum()) > int(run.steps["decode_tokens"].sum())


def test_failures_tied_to_one_instance_fall_there_only() -> None:
    run = _run(fail_share=0.4, fail_instance="i1", instances=2)
    df = run.requests
    failed = df["status"] == "error"
    assert failed.any()
    assert set(df.loc[failed, "instance"]) == {"i1"}
    on_i1 = df["instance"] == "i1"
    # about 0.4 of i1's requests that can fail (a draw below 0.4 each)
    assert 0.25 < failed[on_i1].mean() < 0.55


def test_the_draw_is_deterministic_and_checked() -> None:
    out = np.array([5, 1, 9, 3, 2, 8])
    a = failure_plan(out, Failures(share=0.5, seed=7), ("i0",))
    b = failure_plan(out, Failures(share=0.5, seed=7), ("i0",))
    assert a.fail_at.tolist() == b.fail_at.tolist()
    # round(0.5 × 6) = 3 of the five that can fail (output ≥ 2), each before its last token
    drawn = a.fail_at >= 0
    assert int(drawn.sum()) == 3 and a.fail_at[1] == -1
    assert ((a.fail_at[drawn] >= 1) & (a.fail_at[drawn] < out[drawn])).all()
    with pytest.raises(ConfigError, match="--fail-instance 'x'"):
        failure_plan(out, Failures(share=0.5, instance="x"), ("i0", "i1"))
    with pytest.raises(ConfigError, match="--fail-share"):
        failure_plan(out, Failures(share=1.0), ("i0",))


def test_a_failing_run_is_diagnosed_with_its_failures() -> None:
    run = _run(fail_share=0.12)
    trace = normalize(RawTrace(requests=run.requests, format_name="canonical"), "sim")
    trace = replace(trace, steps=StepLog.from_frame(run.steps, "steps"))
    doc = diagnose_trace(trace).to_dict()
    verdict = doc["verdict"]
    assert verdict["outcome"].startswith("successful requests only (176 of 200): 24 failed")
    ids = {f["id"] for f in doc["findings"]}
    assert "Q009" in ids


def test_the_step_log_carries_the_admission_signal() -> None:
    # A pool of 60 blocks (944 tokens) for prompts of 50–400 tokens arriving every 50 ms:
    # requests wait for blocks, and each step that leaves some waiting says what the first
    # of them asked for and what was free.
    run = _run(kv_blocks=60, block_size=16)
    steps = run.steps
    waiting = steps["num_waiting"] > 0
    need = steps["head_blocks_needed"]
    assert waiting.any()
    assert need[waiting].notna().all() and need[~waiting].isna().all()
    assert (steps["kv_blocks_free"] >= 0).all()
    assert (steps["kv_blocks_free"] <= steps["kv_blocks_total"] - steps["kv_blocks_used"]).all()
    blocked = waiting & (need > steps["kv_blocks_free"])
    assert blocked.any()
