"""The simulator against vLLM 0.33's own scheduler, step by step (tests/fixtures/sim_vllm/).

Each fixture holds a small trace's requests (arrivals, lengths, block identities), the limits
and step time both sides ran with, and vLLM's runs of them, synchronous (`Scheduler`) and
async (`AsyncScheduler`, two batches in flight): every step's GPU start and end, tokens,
requests, preemptions, KV blocks in use, running and waiting, and every request's first
scheduling time, prefix hit, preemptions and token times. The simulator must reproduce all of
them. `benchmarks/engines/vllm_steps.py golden --write` made them (README.md there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from yaotu_trace.sim import RequestArrays, SimConfig, StepCost, simulate_requests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim_vllm"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))
TOLERANCE_S = 2e-9  # the fixture stores times in whole nanoseconds


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def requests_of(stored: dict[str, Any]) -> RequestArrays:
    """A fixture's requests as the simulator takes them."""
    def flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in lists], out=offsets[1:])
        return offsets, np.array([v for x in lists for v in x], dtype=np.int64)

    chain_offsets, chain_ids = flat(stored["chain_ids"])
    out_offsets = out_ids = None
    if "output_ids" in stored:
        out_offsets, out_ids = flat(stored["output_ids"])
    return RequestArrays(
        arrival_s=np.array(stored["arrival_s"], dtype=np.float64),
        prompt_tokens=np.array(stored["prompt_tokens"], dtype=np.int64),
        output_tokens=np.array(stored["output_tokens"], dtype=np.int64),
        chain_offsets=chain_offsets, chain_ids=chain_ids, chain_block_tokens=16,
        num_chain_ids=int(stored["num_chain_ids"]), output_offsets=out_offsets,
        output_ids=out_ids)


def config_of(fixture: dict[str, Any], mode: str) -> SimConfig:
    limits = fixture["engine_limits"]
    step = fixture["step_time"]
    return SimConfig(
        kv_blocks=limits["kv_blocks"], block_size_tokens=fixture["block_size"],
        max_num_seqs=limits["max_num_seqs"], max_batched_tokens=limits["max_batched_tokens"],
        chunked_prefill=limits["chunked_prefill"],
        long_prefill_token_threshold=limits["long_prefill_token_threshold"],
        prefix_caching=limits["prefix_caching"], async_scheduling=mode == "async",
        step_cost=StepCost.fixed(step["a_s"], 0.0, step["per_context_token_s"],
                                 per_token_s=step["per_token_s"]))


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", CASES)
def test_vllm_golden_every_step_and_request_matches(case: str, mode: str) -> None:
    # GIVEN vLLM's run of the fixture's requests
    fixture = load(case)
    run = fixture["runs"][mode]
    steps = np.array(run["steps"], dtype=np.int64)
    start_s, end_s = steps[:, 0] / 1e9, steps[:, 1] / 1e9
    # WHEN the simulator runs them with the same limits and step time
    result = simulate_requests(requests_of(fixture["requests"]), config_of(fixture, mode))
    # THEN every step agrees ...
    assert result.num_steps == len(steps)
    np.testing.assert_allclose(result.step_start_s, start_s, rtol=0, atol=TOLERANCE_S)
    np.testing.assert_allclose(result.step_end_s, end_s, rtol=0, atol=TOLERANCE_S)
    ours = np.column_stack([result.step_prefill_tokens + result.step_decode_tokens,
                            result.step_num_scheduled, result.step_num_preempted,
                            result.step_kv_blocks_used, result.step_num_running,
                            result.step_num_waiting])
    for k in np.flatnonzero((ours != steps[:, 2:]).any(axis=1))[:1]:
        pytest.fail(f"step {k}: simulator {ours[k].tolist()} vLLM {steps[k, 2:].tolist()} "
                    "(tokens, requests, preempted, KV blocks used, running, waiting)")
    # ... and so does every request
    assert result.cached_tokens.tolist() == run["hit_tokens"]
    assert result.num_preemptions.tolist() == run["preemptions"]
    np.testing.assert_allclose(result.scheduled_s, np.array(run["first_scheduled_ns"]) / 1e9,
                               rtol=0, atol=TOLERANCE_S)
    off = result.token_offsets
    for r, token_steps in enumerate(run["token_steps"]):
        np.testing.assert_allclose(result.token_times_s[off[r]:off[r + 1]],
                                   end_s[np.asarray(token_steps, dtype=np.int64)],
                                   rtol=0, atol=TOLERANCE_S, err_msg=f"request {r}")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", CASES)
def test_the_recompute_the_step_log_books_is_what_vllm_computed_twice(case: str,
                                                                       mode: str) -> None:
    # GIVEN vLLM's run: every token it scheduled, less each prompt's first uncached pass and
    # the decode, is what its preemptions made it compute again (15,873 tokens on long_prefill)
    fixture = load(case)
    run, stored = fixture["runs"][mode], fixture["requests"]
    scheduled = int(np.array(run["steps"], dtype=np.int64)[:, 2].sum())
    first_pass = sum(stored["prompt_tokens"]) - sum(run["hit_tokens"])
    decode = sum(max(out - 1, 0) for out in stored["output_tokens"])
    twice = scheduled - first_pass - decode
    # WHEN the simulator runs the same requests
    result = simulate_requests(requests_of(stored), config_of(fixture, mode))
    # THEN its step log's recomputed_tokens add up to exactly that (a run that preempts
    # recomputes something)
    assert int(result.step_recomputed_tokens.sum()) == twice
    assert (twice > 0) == (sum(run["preemptions"]) > 0)


def test_vllm_golden_fixtures_cover_what_they_test() -> None:
    """Six workload shapes, preemptions, prefix hits, and an async run that is not the
    synchronous one (its first tokens come a step later)."""
    assert len(CASES) >= 6
    fixtures = [load(c) for c in CASES]
    assert {f["engine_version"] for f in fixtures} == {"0.33.0"}
    assert sum(sum(f["runs"]["async"]["preemptions"]) for f in fixtures) > 0
    assert all(sum(f["runs"]["async"]["hit_tokens"]) > 0 for f in fixtures)
    for f in fixtures:
        assert f["runs"]["sync"]["scheduler"] == "Scheduler"
        assert f["runs"]["async"]["scheduler"] == "AsyncScheduler"
        sync, later = f["runs"]["sync"], f["runs"]["async"]
        assert sync["steps"] != later["steps"]


def test_vllm_golden_async_first_tokens_come_one_step_later() -> None:
    """The difference async scheduling makes: a request's first token waits for the batch
    scheduled behind the one in flight, so TTFT grows (the mean over every fixture)."""
    grew = []
    for case in CASES:
        fixture = load(case)
        arrival = np.array(fixture["requests"]["arrival_s"])
        ttft = {}
        for mode in ("sync", "async"):
            run = fixture["runs"][mode]
            ends = np.array(run["steps"], dtype=np.int64)[:, 1] / 1e9
            ttft[mode] = np.array([ends[s[0]] for s in run["token_steps"]]) - arrival
        grew.append(ttft["async"].mean() / ttft["sync"].mean())
    assert min(grew) > 1.0
