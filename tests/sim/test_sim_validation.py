"""Validation of the simulator against invariants, queueing theory and the remedy ledgers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yaotu_trace.sim import (
    RequestArrays,
    RoutePolicy,
    SchedulerKind,
    SimConfig,
    StepCost,
    fit_step_cost,
    simulate_requests,
)
from yaotu_trace.sim.config import FIXED_ROUTES

# Routes chosen at arrival; the fixed ones (trace, weighted) are in test_sim_fixed_routes.py.
ARRIVAL_ROUTES = [r for r in RoutePolicy if r not in FIXED_ROUTES]


def workload(n, *, seed=0, rate=5.0, prompt=(16, 400), output=(1, 40), prefixes=6,
             prefix_blocks=8, block=16):
    """Poisson arrivals; prompts start with one of a few shared prefixes, then private blocks."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    prompt_len = rng.integers(prompt[0], prompt[1], n)
    out = rng.integers(output[0], output[1], n)
    shared = rng.integers(0, prefixes, n)
    chains, next_id = [], prefixes * prefix_blocks
    for i in range(n):
        full = prompt_len[i] // block
        ids = [shared[i] * prefix_blocks + k for k in range(min(full, prefix_blocks))]
        while len(ids) < full:
            ids.append(next_id)
            next_id += 1
        chains.append(ids)
    counts = [len(c) for c in chains]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = np.array([x for c in chains for x in c], dtype=np.int32)
    return RequestArrays(arrival_s=arrival, prompt_tokens=prompt_len, output_tokens=out,
                         chain_offsets=offsets, chain_ids=ids, chain_block_tokens=block,
                         num_chain_ids=next_id)


def roofline_like():
    """A step that grows with prefill tokens and context (5 ms + 20 µs/token + 1 ns/context)."""
    return StepCost.fixed(0.005, 2e-5, 1e-9, kv_bytes_per_token=1000.0)


def config(**kw):
    base = {"kv_blocks": 400, "block_size_tokens": 16, "max_num_seqs": 32,
            "max_batched_tokens": 512, "step_cost": roofline_like()}
    base.update(kw)
    return SimConfig(**base)


def check_invariants(req, r, cfg):
    prompt = req.prompt_tokens
    out = np.maximum(req.output_tokens, 1)
    ran = np.isfinite(r.finish_s)
    # every request that fits an empty pool finishes
    fits = (prompt + out + cfg.block_size_tokens - 1) // cfg.block_size_tokens < cfg.kv_blocks
    assert ran[fits].all()
    # computed = prompt − first hits + recomputed + decode tokens (colocated instances)
    if cfg.pd is None:
        expect = prompt - r.cached_tokens + r.recomputed_tokens + (out - 1)
        np.testing.assert_array_equal(r.computed_tokens[ran], expect[ran])
        assert r.step_prefill_tokens.sum() + r.step_decode_tokens.sum() == r.computed_tokens.sum()
    # time moves forward; tokens come after arrival, in order
    assert (r.step_end_s >= r.step_start_s).all()
    assert (r.first_token_s[ran] > req.arrival_s[ran]).all()
    assert (r.scheduled_s[ran] >= req.arrival_s[ran]).all()
    for i in np.flatnonzero(ran)[:50]:
        tt = r.token_times_s[r.token_offsets[i]:r.token_offsets[i + 1]]
        assert (np.diff(tt) > 0).all()
        assert tt[-1] == r.finish_s[i] if len(tt) else True
    # the pool is never over-committed, the batch never exceeds its caps
    assert (r.step_kv_blocks_used <= cfg.kv_blocks - 1).all()
    assert (r.step_num_running <= cfg.max_num_seqs).all()
    if cfg.chunked_prefill and cfg.scheduler is SchedulerKind.VLLM:
        assert (r.step_prefill_tokens + r.step_decode_tokens <= cfg.max_batched_tokens).all()
    # hits respect the last-token rule
    assert (r.cached_tokens <= np.maximum(prompt - 1, 0)).all()


def test_validation_every_request_finishes_and_work_adds_up():
    req = workload(400)
    cfg = config()
    r = simulate_requests(req, cfg)
    check_invariants(req, r, cfg)
    assert r.cached_tokens.sum() > 0


def test_validation_small_pool_preempts_and_recomputes():
    req = workload(300, rate=20.0, output=(50, 200))
    cfg = config(kv_blocks=80)
    r = simulate_requests(req, cfg)
    check_invariants(req, r, cfg)
    assert r.num_preemptions.sum() > 10
    assert r.recomputed_tokens.sum() > 0
    big = simulate_requests(req, config(kv_blocks=4000))
    assert big.num_preemptions.sum() == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kv_blocks=st.integers(30, 300),
    max_num_seqs=st.integers(1, 16),
    budget=st.integers(16, 600),
    chunked=st.booleans(),
    caching=st.booleans(),
    scheduler=st.sampled_from(list(SchedulerKind)),
    instances=st.integers(1, 3),
    route=st.sampled_from(ARRIVAL_ROUTES),
    pd=st.sampled_from([None, (1, 1), (1, 2)]),
)
def test_validation_invariants_hold_for_any_configuration(seed, kv_blocks, max_num_seqs, budget,
                                                          chunked, caching, scheduler, instances,
                                                          route, pd):
    req = workload(60, seed=seed, rate=30.0, prompt=(1, 300), output=(0, 60))
    cfg = config(kv_blocks=kv_blocks, max_num_seqs=max_num_seqs, max_batched_tokens=budget,
                 chunked_prefill=chunked, prefix_caching=caching, scheduler=scheduler,
                 instances=instances, route=route, pd=pd)
    r = simulate_requests(req, cfg)
    check_invariants(req, r, cfg)
    again = simulate_requests(req, cfg)
    np.testing.assert_array_equal(r.finish_s, again.finish_s)


def test_validation_littles_law_on_the_output():
    req = workload(3000, rate=8.0, seed=3)
    r = simulate_requests(req, config(kv_blocks=2000))
    sojourn = r.finish_s - req.arrival_s
    span = r.finish_s.max() - req.arrival_s.min()
    lam = len(sojourn) / span
    # L from the step log: requests in the system (running + waiting) over time
    step_s = r.step_end_s - r.step_start_s
    in_system = r.step_num_running + r.step_num_waiting
    occupied = (in_system * step_s).sum() / span
    assert occupied == pytest.approx(lam * sojourn.mean(), rel=0.08)


def test_validation_single_slot_prefill_matches_md1_waiting_time():
    # GIVEN one slot, prefill-only requests (1 output token), deterministic service S = 0.1 s,
    # Poisson arrivals at ρ = 0.6
    rng = np.random.default_rng(7)
    n, service_s, rho = 40_000, 0.1, 0.6
    arrival = np.cumsum(rng.exponential(service_s / rho, n))
    req = RequestArrays(arrival_s=arrival, prompt_tokens=np.full(n, 100),
                        output_tokens=np.ones(n, dtype=np.int64))
    cfg = SimConfig(kv_blocks=100, block_size_tokens=16, max_num_seqs=1, max_batched_tokens=512,
                    step_cost=StepCost.fixed(0.0, service_s / 100))
    r = simulate_requests(req, cfg)
    wait = r.scheduled_s - arrival
    # THEN the mean wait is Pollaczek–Khinchine's Wq = ρ·S / (2(1 − ρ))
    assert wait.mean() == pytest.approx(rho * service_s / (2 * (1 - rho)), rel=0.06)
    np.testing.assert_allclose(r.first_token_s - r.scheduled_s, service_s)


def test_validation_chunking_lowers_the_largest_inter_token_gap():
    req = workload(200, rate=4.0, prompt=(16, 4000), output=(20, 80), seed=5)
    whole = simulate_requests(req, config(kv_blocks=3000, chunked_prefill=False))
    chunked = simulate_requests(req, config(kv_blocks=3000, chunked_prefill=True,
                                            max_batched_tokens=256))

    def max_gap(r):
        off = r.token_offsets
        gaps = [np.diff(r.token_times_s[off[i]:off[i + 1]]).max()
                for i in range(len(req.arrival_s)) if off[i + 1] - off[i] > 1]
        return max(gaps)

    assert max_gap(chunked) < max_gap(whole)
    assert chunked.num_steps > whole.num_steps  # the work chunking adds


def test_validation_disaggregation_moves_exactly_the_prompt_kv():
    req = workload(300, rate=10.0)
    cfg = config(kv_blocks=2000, pd=(1, 2), route=RoutePolicy.LEAST_LOADED)
    r = simulate_requests(req, cfg)
    check_invariants(req, r, cfg)
    kv_b = cfg.step_cost.kv_bytes_per_token
    assert r.kv_transfer_bytes == float(req.prompt_tokens.sum()) * kv_b
    # decode instances run no prefill unless they had to recompute after a preemption
    decode_steps = np.isin(r.step_instance, [1, 2])
    if r.num_preemptions.sum() == 0:
        assert r.step_prefill_tokens[decode_steps].sum() == 0
    assert (r.prefill_instance == 0).all()
    # a one-token request is done on its prefill instance; the others decode on d0 or d1
    many = req.output_tokens > 1
    assert np.isin(r.instance[many], [1, 2]).all()
    assert (r.instance[~many] == 0).all()


def test_validation_prefix_caching_off_changes_only_prefill_work():
    req = workload(400, rate=6.0)
    on = simulate_requests(req, config(kv_blocks=4000))
    off = simulate_requests(req, config(kv_blocks=4000, prefix_caching=False))
    assert on.num_preemptions.sum() == off.num_preemptions.sum() == 0
    assert on.cached_tokens.sum() > 0 and off.cached_tokens.sum() == 0
    assert on.step_decode_tokens.sum() == off.step_decode_tokens.sum()
    assert off.step_prefill_tokens.sum() - on.step_prefill_tokens.sum() == on.cached_tokens.sum()
    assert off.step_prefill_tokens.sum() == req.prompt_tokens.sum()


def test_validation_cache_aware_routing_beats_round_robin_on_hits():
    # pairs of requests share a prefix: X X Y Y X X …, so round-robin splits every pair
    n, block = 200, 16
    arrival = np.arange(n) * 0.5
    prompt = np.full(n, 20 * block + 5)
    chains = []
    nid = 2 * 20
    for i in range(n):
        p = (i // 2) % 2
        chains.append([p * 20 + k for k in range(20)])
    offsets = np.arange(0, 20 * n + 1, 20, dtype=np.int64)
    req = RequestArrays(arrival_s=arrival, prompt_tokens=prompt, output_tokens=np.full(n, 4),
                        chain_offsets=offsets,
                        chain_ids=np.array([x for c in chains for x in c], dtype=np.int32),
                        chain_block_tokens=block, num_chain_ids=nid)
    hits = {}
    for route in ARRIVAL_ROUTES:
        r = simulate_requests(req, config(kv_blocks=30, instances=2, route=route, max_num_seqs=4))
        hits[route] = r.cached_tokens.sum()
    assert hits[RoutePolicy.PREFIX_AFFINITY] > hits[RoutePolicy.ROUND_ROBIN]
    assert hits[RoutePolicy.KV_AWARE] > hits[RoutePolicy.ROUND_ROBIN]


def test_validation_calibration_recovers_a_linear_step_time():
    rng = np.random.default_rng(1)
    prefill = rng.integers(0, 8192, 500).astype(float)
    context = rng.integers(0, 400_000, 500).astype(float)
    step_s = 0.004 + 3e-5 * prefill + 2e-8 * context + rng.normal(0, 1e-4, 500)
    fit = fit_step_cost(prefill, context, step_s)
    assert fit.a_s == pytest.approx(0.004, abs=1e-4)
    assert fit.b_s_per_prefill_token == pytest.approx(3e-5, rel=0.01)
    assert fit.c_s_per_context_token == pytest.approx(2e-8, rel=0.02)
    assert fit.r_squared > 0.99
    assert fit.rmse_s == pytest.approx(1e-4, rel=0.2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 100_000),
    kv_blocks=st.integers(12, 120),
    max_num_seqs=st.integers(1, 8),
    budget=st.integers(8, 200),
    chunked=st.booleans(),
    caching=st.booleans(),
    threshold=st.sampled_from([0, 0, 24]),
)
def test_validation_matches_the_python_reference_exactly(seed, kv_blocks, max_num_seqs, budget,
                                                         chunked, caching, threshold):
    from tests.sim.reference import reference

    req = workload(30, seed=seed, rate=30.0, prompt=(1, 120), output=(0, 30), prefixes=3,
                   prefix_blocks=4, block=8)
    cfg = SimConfig(kv_blocks=kv_blocks, block_size_tokens=8, max_num_seqs=max_num_seqs,
                    max_batched_tokens=budget, chunked_prefill=chunked,
                    long_prefill_token_threshold=threshold, prefix_caching=caching,
                    step_cost=StepCost.fixed(0.01, 0.001, 1e-5))
    fits = (np.maximum(req.prompt_tokens, 1) + np.maximum(req.output_tokens, 1) + 7) // 8
    if (fits > kv_blocks - 1).any():
        return  # requests over capacity are not run; the reference does not model rejection
    r = simulate_requests(req, cfg)
    ref = reference(req, kv_blocks=kv_blocks, block=8, max_seqs=max_num_seqs, budget=budget,
                    chunked=chunked, threshold=threshold, caching=caching,
                    a=0.01, b=0.001, c=1e-5)
    for i, x in enumerate(ref):
        tt = r.token_times_s[r.token_offsets[i]:r.token_offsets[i + 1]]
        want = x.tokens[:max(int(req.output_tokens[i]), 0)]
        np.testing.assert_allclose(tt, want, rtol=0, atol=1e-9)
        assert r.num_preemptions[i] == x.preemptions
        assert r.cached_tokens[i] == x.cached
        assert r.recomputed_tokens[i] == x.recomputed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), instances=st.integers(2, 4), kv_blocks=st.integers(40, 200),
       scheduler=st.sampled_from(list(SchedulerKind)))
def test_validation_round_robin_cluster_equals_independent_instances(seed, instances, kv_blocks,
                                                                     scheduler):
    # GIVEN round-robin routing, instance k serves requests k, k + N, k + 2N, …: the cluster
    # run must equal N separate one-instance runs on those subsets, token for token
    from yaotu_trace.sim.run import _subset

    req = workload(80, seed=seed, rate=40.0, prompt=(1, 300), output=(0, 40))
    cluster = simulate_requests(req, config(kv_blocks=kv_blocks, instances=instances,
                                   scheduler=scheduler, max_num_seqs=6, max_batched_tokens=128))
    for k in range(instances):
        keep = np.arange(k, len(req.arrival_s), instances)
        alone = simulate_requests(_subset(req, keep), config(
            kv_blocks=kv_blocks, scheduler=scheduler, max_num_seqs=6, max_batched_tokens=128))
        np.testing.assert_array_equal(cluster.finish_s[keep], alone.finish_s)
        np.testing.assert_array_equal(cluster.num_preemptions[keep], alone.num_preemptions)
        np.testing.assert_array_equal(cluster.cached_tokens[keep], alone.cached_tokens)
        ran = np.isfinite(alone.finish_s)
        assert (cluster.instance[keep][ran] == k).all()
