"""Async scheduling, the engine releases and cached answers, on hand-checked schedules.

Step time 10 ms + 1 ms per prefill token throughout; blocks of 4 tokens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ConfigError
from yaotu_trace.sim import RequestArrays, SimConfig, StepCost, simulate_requests
from yaotu_trace.sim.config import EngineVersion, SchedulerKind
from yaotu_trace.sim.scenario import DEFAULT_MAX_MODEL_LEN, Scenario, resolve_scenario
from yaotu_trace.sim.summary import request_arrays

BASE = Scenario(model="Llama-3.1-8B", gpu="H100")


def config(**kw: object) -> SimConfig:
    base: dict[str, object] = {"kv_blocks": 100, "block_size_tokens": 4, "max_num_seqs": 8,
                               "max_batched_tokens": 16, "step_cost": StepCost.fixed(0.01, 0.001)}
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


def two_requests() -> RequestArrays:
    """r0: 10 prompt + 3 output tokens at 0; r1: 6 + 2 at 5 ms."""
    return RequestArrays(arrival_s=np.array([0.0, 0.005]), prompt_tokens=np.array([10, 6]),
                         output_tokens=np.array([3, 2]))


def tokens_of(result, i):  # type: ignore[no-untyped-def]
    return result.token_times_s[result.token_offsets[i]:result.token_offsets[i + 1]]


def test_async_the_next_batch_is_decided_while_one_runs_so_a_late_arrival_waits_a_step() -> None:
    # GIVEN two batches in flight: at 0 the engine decides B1 (r0's prefill, 0-20 ms) and B2
    # (r0's first decode on a placeholder, 20-30 ms); r1 arrives at 5 ms, during B1
    r = simulate_requests(two_requests(), config(async_scheduling=True))
    # THEN r1 is admitted when B1's tokens are out (20 ms) into B3, which runs after B2
    # (30-46 ms: r0's decode + r1's 6-token prefill); B4 (46-56 ms) is r1's decode. r0 is not
    # scheduled past its 3 tokens (at 30 ms its batches in flight already reach them).
    np.testing.assert_allclose(r.step_start_s, [0.0, 0.02, 0.03, 0.046])
    np.testing.assert_allclose(r.step_end_s, [0.02, 0.03, 0.046, 0.056])
    np.testing.assert_array_equal(r.step_prefill_tokens, [10, 0, 6, 0])
    np.testing.assert_array_equal(r.step_decode_tokens, [0, 1, 1, 1])
    np.testing.assert_allclose(r.scheduled_s, [0.0, 0.02])
    np.testing.assert_allclose(tokens_of(r, 0), [0.02, 0.03, 0.046])
    np.testing.assert_allclose(tokens_of(r, 1), [0.046, 0.056])
    np.testing.assert_array_equal(r.computed_tokens, [12, 7])


def test_async_off_is_the_synchronous_schedule() -> None:
    # GIVEN the same requests, one batch at a time: r1's prefill joins r0's first decode
    r = simulate_requests(two_requests(), config(async_scheduling=False))
    np.testing.assert_allclose(r.step_start_s, [0.0, 0.02, 0.036])
    np.testing.assert_allclose(tokens_of(r, 1), [0.036, 0.046])


def test_async_a_lone_request_runs_as_it_does_synchronously() -> None:
    one = RequestArrays(arrival_s=np.array([0.0]), prompt_tokens=np.array([10]),
                        output_tokens=np.array([4]))
    sync = simulate_requests(one, config())
    both = simulate_requests(one, config(async_scheduling=True))
    np.testing.assert_allclose(tokens_of(both, 0), tokens_of(sync, 0))
    assert both.num_steps == sync.num_steps == 4


def test_async_is_refused_with_the_sglang_rules() -> None:
    with pytest.raises(ConfigError, match="async-scheduling is vLLM's"):
        config(scheduler=SchedulerKind.SGLANG, async_scheduling=True)


# ---- engine releases


def test_engine_default_is_vllm_033_with_async_scheduling() -> None:
    resolved = resolve_scenario(BASE)
    assert resolved.engine is EngineVersion.VLLM_0_33
    assert resolved.config.async_scheduling is True
    off = resolve_scenario(BASE.merged(Scenario(async_scheduling=False)))
    assert off.config.async_scheduling is False


def test_engine_sglang_runs_synchronously_and_scheduler_sglang_names_it() -> None:
    by_engine = resolve_scenario(BASE.merged(Scenario(engine="sglang-0.5")))
    by_family = resolve_scenario(BASE.merged(Scenario(scheduler="sglang")))
    for resolved in (by_engine, by_family):
        assert resolved.engine is EngineVersion.SGLANG_0_5
        assert resolved.config.scheduler is SchedulerKind.SGLANG
        assert resolved.config.async_scheduling is False


def test_engine_and_scheduler_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"--engine vllm-0\.33 runs vllm's scheduler"):
        resolve_scenario(BASE.merged(Scenario(engine="vllm-0.33", scheduler="sglang")))
    with pytest.raises(ConfigError, match=r"--engine 'vllm-0\.2': choose one of"):
        resolve_scenario(BASE.merged(Scenario(engine="vllm-0.2")))


def test_engine_vllm_budget_without_chunking_is_max_model_len() -> None:
    # vLLM's EngineArgs: max_num_batched_tokens = max(max_model_len, the GPU's default)
    whole = resolve_scenario(BASE.merged(Scenario(chunked_prefill=False))).config
    assert whole.max_batched_tokens == DEFAULT_MAX_MODEL_LEN
    short = resolve_scenario(
        BASE.merged(Scenario(chunked_prefill=False, max_model_len=4096))).config
    assert short.max_batched_tokens == 8192  # H100's default is larger
    given = resolve_scenario(BASE.merged(Scenario(chunked_prefill=False, max_batched_tokens=20000)))
    assert given.config.max_batched_tokens == 20000
    chunked = resolve_scenario(BASE).config
    assert chunked.max_batched_tokens == 8192
    sglang = resolve_scenario(
        BASE.merged(Scenario(chunked_prefill=False, scheduler="sglang"))).config
    assert sglang.max_batched_tokens == 8192


# ---- cached answers


def conversation(with_outputs: bool):  # type: ignore[no-untyped-def]
    """Two turns of one tenant: the second prompt is the first prompt, its answer and more."""
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 1000, 37).tolist()
    answer = rng.integers(0, 1000, 45).tolist()
    follow = rng.integers(0, 1000, 10).tolist()
    table = pd.DataFrame({
        "request_id": ["a", "b"], "arrival_s": [0.0, 5.0], "prompt_len": [37, 92],
        "output_len": [45, 5], "prompt_tokens": [prompt, prompt + answer + follow],
    })
    if with_outputs:
        table["output_tokens"] = [answer, rng.integers(0, 1000, 5).tolist()]
    return normalize(RawTrace(requests=table, format_name="canonical"), "two-turns")


def test_answer_blocks_are_hit_by_the_next_turn_when_the_trace_gives_output_tokens() -> None:
    # GIVEN turn 2 = turn 1's 37-token prompt + its 45-token answer + 10 new tokens
    cfg = config(block_size_tokens=16, max_batched_tokens=256)
    with_ids, notes = request_arrays(conversation(True), 16)
    without, _ = request_arrays(conversation(False), 16)
    # WHEN both run (turn 1 is long done when turn 2 arrives)
    hit = simulate_requests(with_ids, cfg).cached_tokens
    blind = simulate_requests(without, cfg).cached_tokens
    # THEN with the answer's token ids turn 2 hits every block turn 1 computed: 37 + 45 − 1
    # tokens (the last answer token is never computed) are 5 full blocks of 16; without them
    # only the prompt's 2 full blocks
    assert hit.tolist() == [0, 80]
    assert blind.tolist() == [0, 32]
    assert any("cached under the trace's output token ids" in n for n in notes)
