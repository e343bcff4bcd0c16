"""Hand-checked schedules: a few requests, linear step times, every timestamp worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from yaotu_trace.sim import RequestArrays, SchedulerKind, SimConfig, StepCost, simulate_requests


def requests(arrival, prompt, output, chains=None, chain_block=4, num_ids=0):
    offsets = ids = None
    if chains is not None:
        counts = [len(c) for c in chains]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        ids = np.array([i for c in chains for i in c], dtype=np.int32)
    return RequestArrays(arrival_s=np.array(arrival, dtype=float),
                         prompt_tokens=np.array(prompt, dtype=np.int64),
                         output_tokens=np.array(output, dtype=np.int64),
                         chain_offsets=offsets, chain_ids=ids,
                         chain_block_tokens=chain_block if chains is not None else None,
                         num_chain_ids=num_ids)


def config(**kw):
    base = {"kv_blocks": 100, "block_size_tokens": 4, "max_num_seqs": 8,
            "max_batched_tokens": 16, "step_cost": StepCost.fixed(0.01, 0.001)}
    base.update(kw)
    return SimConfig(**base)


def tokens_of(result, i):
    return result.token_times_s[result.token_offsets[i]:result.token_offsets[i + 1]]


def test_schedule_two_requests_share_steps_decode_first():
    # GIVEN r0 (10 prompt, 3 out) at 0 and r1 (6, 2) at 5 ms; step = 10 ms + 1 ms/prefill token
    r = simulate_requests(requests([0.0, 0.005], [10, 6], [3, 2]), config())
    # THEN step 1 = r0's prefill [0, 20 ms]; step 2 = r0 decode + r1 prefill [20, 36 ms];
    # step 3 = two decodes [36, 46 ms]
    np.testing.assert_allclose(r.step_start_s, [0.0, 0.02, 0.036])
    np.testing.assert_allclose(r.step_end_s, [0.02, 0.036, 0.046])
    np.testing.assert_array_equal(r.step_prefill_tokens, [10, 6, 0])
    np.testing.assert_array_equal(r.step_decode_tokens, [0, 1, 2])
    np.testing.assert_allclose(r.scheduled_s, [0.0, 0.02])
    np.testing.assert_allclose(r.first_token_s, [0.02, 0.036])
    np.testing.assert_allclose(r.finish_s, [0.046, 0.046])
    np.testing.assert_allclose(tokens_of(r, 0), [0.02, 0.036, 0.046])
    np.testing.assert_array_equal(r.computed_tokens, [12, 7])


def test_schedule_preempts_last_admitted_and_resumes_with_its_surviving_prefix():
    # GIVEN 4 usable blocks of 4 tokens and two requests of 6 prompt + 6 output tokens
    cfg = config(kv_blocks=5, step_cost=StepCost.fixed(1.0))
    r = simulate_requests(requests([0.0, 0.0], [6, 6], [6, 6]), cfg)
    # THEN at step 4 r0 needs a third block: r1 (running[-1]) is preempted, its blocks freed
    # tail first; r0 takes r1's second block (evicting it), r1's first block stays cached.
    # r1 waits (head-of-line) until r0 finishes at t=6, then resumes with a 4-token hit and
    # recomputes 5 tokens (4 of them computed before).
    np.testing.assert_allclose(tokens_of(r, 0), [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(tokens_of(r, 1), [1, 2, 3, 7, 8, 9])
    np.testing.assert_array_equal(r.num_preemptions, [0, 1])
    np.testing.assert_array_equal(r.recomputed_tokens, [0, 4])
    np.testing.assert_array_equal(r.computed_tokens, [11, 15])
    np.testing.assert_array_equal(r.step_num_preempted, [0, 0, 0, 1, 0, 0, 0, 0, 0])
    # the step log books the 4 tokens in the step that readmits r1 (its 7th, t = 6), as vLLM's
    # scheduler stats count a readmission's prefix-cache queries less its hits
    np.testing.assert_array_equal(r.step_recomputed_tokens, [0, 0, 0, 0, 0, 0, 4, 0, 0])
    assert r.cached_tokens.tolist() == [0, 0]  # resumed hits are not first-admission hits


def test_schedule_prefix_hit_skips_cached_blocks_and_keeps_the_last_token_rule():
    # GIVEN r0 (8 tokens = blocks [a, b]) then r1 (10 tokens, blocks [a, b] + partial) and
    # r2 (8 tokens, [a, b]) long after; step = 1 s + 0.1 s per prefill token
    cfg = config(step_cost=StepCost.fixed(1.0, 0.1))
    chains = [[0, 1], [0, 1], [0, 1]]
    r = simulate_requests(requests([0.0, 5.0, 10.0], [8, 10, 8], [1, 1, 1], chains, num_ids=2), cfg)
    # THEN r1 hits both blocks (8 tokens) and computes 2; r2 may hit only floor(7/4) = 1 block
    np.testing.assert_array_equal(r.cached_tokens, [0, 8, 4])
    np.testing.assert_allclose(r.first_token_s, [1.8, 6.2, 11.4])
    np.testing.assert_array_equal(r.step_prefill_tokens, [8, 2, 4])


def test_schedule_no_prefix_caching_recomputes_everything():
    cfg = config(step_cost=StepCost.fixed(1.0, 0.1), prefix_caching=False)
    chains = [[0, 1], [0, 1]]
    r = simulate_requests(requests([0.0, 5.0], [8, 10], [1, 1], chains, num_ids=2), cfg)
    np.testing.assert_array_equal(r.cached_tokens, [0, 0])
    np.testing.assert_array_equal(r.step_prefill_tokens, [8, 10])


def test_schedule_chunked_prefill_splits_by_budget_and_threshold():
    # budget 16: a 40-token prompt takes 16 + 16 + 8
    r = simulate_requests(requests([0.0], [40], [1]), config(step_cost=StepCost.fixed(1.0)))
    np.testing.assert_array_equal(r.step_prefill_tokens, [16, 16, 8])
    assert r.first_token_s[0] == pytest.approx(3.0)
    # without chunking the whole prompt runs in one step
    r = simulate_requests(requests([0.0], [40], [1]),
                 config(step_cost=StepCost.fixed(1.0), chunked_prefill=False))
    np.testing.assert_array_equal(r.step_prefill_tokens, [40])
    # long_prefill_token_threshold caps one request's chunk while another is in the system
    # (8 + 4 in step 1); alone, the cap is ignored (vLLM) and r0 takes the budget
    r = simulate_requests(requests([0.0, 0.0], [40, 4], [1, 1]),
                 config(step_cost=StepCost.fixed(1.0), long_prefill_token_threshold=8))
    np.testing.assert_array_equal(r.step_prefill_tokens, [12, 16, 16])


def test_schedule_max_num_seqs_queues_fcfs():
    r = simulate_requests(requests([0.0, 0.0, 0.0], [4, 4, 4], [2, 2, 2]),
                 config(max_num_seqs=1, step_cost=StepCost.fixed(1.0)))
    np.testing.assert_allclose(r.scheduled_s, [0.0, 2.0, 4.0])
    np.testing.assert_allclose(r.finish_s, [2.0, 4.0, 6.0])


def test_schedule_sglang_prefill_batch_pauses_decodes():
    # GIVEN r0 (4, 3 out) at 0 and r1 (4, 1 out) at 0.5 s, 1 s per step
    reqs = requests([0.0, 0.5], [4, 4], [3, 1])
    sg = simulate_requests(reqs, config(scheduler=SchedulerKind.SGLANG,
                                        step_cost=StepCost.fixed(1.0)))
    vl = simulate_requests(reqs, config(step_cost=StepCost.fixed(1.0)))
    # THEN SGLang runs r1's prefill instead of r0's decode at t=1; vLLM mixes them
    np.testing.assert_allclose(tokens_of(sg, 0), [1, 3, 4])
    np.testing.assert_allclose(tokens_of(vl, 0), [1, 2, 3])
    np.testing.assert_array_equal(sg.step_decode_tokens[:2], [0, 0])


def test_schedule_sglang_retracts_the_request_with_fewest_outputs():
    # GIVEN 50 usable blocks of 4 tokens and long outputs: the admission reserve (new-token
    # ratio 0.7, decaying over 600 decode steps) first holds requests back, then over-admits
    cfg = config(kv_blocks=51, max_num_seqs=64, max_batched_tokens=64,
                 scheduler=SchedulerKind.SGLANG, step_cost=StepCost.fixed(1.0))
    n = 12
    r = simulate_requests(requests(np.arange(n) * 20.0, [4] * n, [150] * n), cfg)
    # THEN decode runs out of blocks and a request is retracted; the oldest running request
    # (most outputs) never is, and every request finishes
    assert np.isfinite(r.finish_s).all()
    assert r.num_preemptions[0] == 0
    assert r.num_preemptions.sum() >= 1
    assert (r.step_kv_blocks_used <= 50).all()


def test_schedule_pd_hands_off_after_the_first_token():
    cfg = config(pd=(1, 1), link_bytes_per_s=1000.0, link_latency_s=0.5, layerwise_overlap=False,
                 step_cost=StepCost.fixed(1.0, 0.0, kv_bytes_per_token=100.0))
    r = simulate_requests(requests([0.0], [10], [3]), cfg)
    # prefill on p0 [0, 1]; 10 tokens × 100 B over 1000 B/s + 0.5 s: on d0 at 2.5 s;
    # decode steps [2.5, 3.5] and [3.5, 4.5]
    np.testing.assert_allclose(tokens_of(r, 0), [1.0, 3.5, 4.5])
    assert r.kv_transfer_bytes == 1000.0
    assert r.instance_labels[r.prefill_instance[0]] == "p0"
    assert r.instance_labels[r.instance[0]] == "d0"


def test_schedule_pd_layerwise_overlap_hides_the_transfer_behind_the_prefill():
    cfg = config(pd=(1, 1), link_bytes_per_s=1000.0, link_latency_s=0.5, layerwise_overlap=True,
                 layers=32, step_cost=StepCost.fixed(1.0, 0.0, kv_bytes_per_token=100.0))
    r = simulate_requests(requests([0.0], [10], [3]), cfg)
    # ready = max(prefill end + α + bytes/(L·bw), prefill start + α + bytes/bw)
    #       = max(1 + 0.5 + 1/32, 0 + 0.5 + 1) = 1.53125
    np.testing.assert_allclose(tokens_of(r, 0), [1.0, 2.53125, 3.53125])
