"""Hypothesis properties of the replay, and agreement with the brute-force reference."""

from __future__ import annotations

import numpy as np
from helpers import chains_of, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_replay

from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.rules import rules_for

# Small alphabets and short prompts make shared prefixes (and collisions of content) common.
prompt = st.lists(st.integers(0, 2), min_size=0, max_size=10)
prompts_st = st.lists(prompt, min_size=1, max_size=14)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    prompts = draw(prompts_st)
    # Mostly extensions of earlier prompts so that reuse is frequent.
    for i in range(1, len(prompts)):
        if draw(st.booleans()):
            j = draw(st.integers(0, i - 1))
            cut = draw(st.integers(0, len(prompts[j])))
            prompts[i] = prompts[j][:cut] + prompts[i]
    tenants = draw(st.lists(st.integers(0, 2), min_size=len(prompts), max_size=len(prompts)))
    return prompts, tenants


@SETTINGS
@given(traces(), st.integers(1, 4), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(1, 12)), st.sampled_from(["lru", "fifo", "lfu"]),
       st.sampled_from(["tail-first", "head-first"]), st.booleans())
def test_engine_agrees_with_reference(trace, block, ltr, partial, capacity, eviction, touch,
                                      isolate) -> None:
    prompts, tenants = trace
    ns = tenants if isolate else None
    got = run(prompts, block_size_tokens=block, last_token_rule=ltr,
              cache_partial_blocks=partial, capacity_blocks=capacity, eviction=eviction,
              touch_order=touch, namespaces=ns).hit_tokens.tolist()
    want = reference_replay(prompts, block=block, namespaces=ns, last_token_rule=ltr,
                            partial=partial, capacity=capacity, eviction=eviction,
                            touch_order=touch)
    assert got == want


@SETTINGS
@given(traces(), st.integers(1, 3), st.one_of(st.none(), st.integers(1, 8)),
       st.sampled_from(["round-robin", "least-loaded", "prefix-affinity", "trace"]),
       st.integers(1, 3), st.sampled_from([0.0, 0.3]))
def test_instances_agree_with_reference(trace, block, capacity, route, k, threshold) -> None:
    prompts, tenants = trace
    kw: dict = {"block_size_tokens": block, "capacity_blocks": capacity, "scope": "instance",
                "affinity_threshold": threshold}
    if route == "trace":
        codes = [t % k for t in tenants]
        got = run(prompts, instance_codes=codes, **kw)
        want = reference_replay(prompts, block=block, capacity=capacity, instances=codes,
                                num_instances=max(codes) + 1)
    else:
        got = run(prompts, route=route, instances=k, **kw)
        codes = [i % k for i in range(len(prompts))] if route == "round-robin" else None
        want = reference_replay(prompts, block=block, capacity=capacity, instances=codes,
                                route=None if route == "round-robin" else route,
                                num_instances=k, affinity_threshold=threshold)
    assert got.hit_tokens.tolist() == want


@SETTINGS
@given(traces(), st.integers(1, 4), st.booleans(), st.one_of(st.none(), st.integers(1, 10)),
       st.sampled_from(["lru", "fifo", "lfu"]))
def test_hits_bounded_by_prompt_and_last_token_cap(trace, block, ltr, capacity, eviction):
    prompts, _ = trace
    result = run(prompts, block_size_tokens=block, last_token_rule=ltr, capacity_blocks=capacity,
                 eviction=eviction)
    n = np.array([len(p) for p in prompts])
    if capacity is not None:  # resident blocks never exceed the capacity
        assert result.inserted_blocks - result.evicted_blocks <= capacity
    assert (result.hit_tokens >= 0).all()
    assert (result.hit_tokens <= n).all()
    assert (result.hit_tokens + result.recompute_tokens == n).all()
    if ltr:
        assert (result.hit_tokens <= np.maximum(n - 1, 0) // block * block).all()


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(1, 10),
       st.sampled_from(["tail-first", "head-first"]))
def test_lru_hits_never_fall_as_capacity_grows(trace, block, capacity, touch) -> None:
    prompts, _ = trace
    small = run(prompts, block_size_tokens=block, capacity_blocks=capacity, touch_order=touch)
    big = run(prompts, block_size_tokens=block, capacity_blocks=capacity + 1, touch_order=touch)
    unlimited = run(prompts, block_size_tokens=block, touch_order=touch)
    # LRU is a stack algorithm: the cache at C is a subset of the cache at C + 1.
    assert (small.hit_tokens <= big.hit_tokens).all()
    assert (big.hit_tokens <= unlimited.hit_tokens).all()


@SETTINGS
@given(traces(), st.integers(1, 4), st.booleans())
def test_isolation_never_adds_hits(trace, block, ltr) -> None:
    prompts, tenants = trace
    shared = run(prompts, block_size_tokens=block, last_token_rule=ltr)
    isolated = run(prompts, block_size_tokens=block, last_token_rule=ltr, namespaces=tenants)
    assert (isolated.hit_tokens <= shared.hit_tokens).all()


@SETTINGS
@given(traces(), st.integers(1, 4), st.integers(1, 3), st.booleans())
def test_larger_block_never_adds_hits_at_unlimited_capacity(trace, block, factor, ltr) -> None:
    prompts, _ = trace
    fine = run(prompts, block_size_tokens=block, last_token_rule=ltr)
    coarse = run(prompts, block_size_tokens=block * factor, last_token_rule=ltr)
    assert (coarse.hit_tokens <= fine.hit_tokens).all()


@SETTINGS
@given(traces(), st.integers(1, 3))
def test_same_input_same_result(trace, block) -> None:
    prompts, tenants = trace
    rules = rules_for("none", block_size_tokens=block, capacity_blocks=3, scope="instance",
                      route="random", instances=2, seed=7)
    a = replay(chains_of(prompts, rules, tenants), rules)
    b = replay(chains_of(prompts, rules, tenants), rules)
    assert a.hit_tokens.tolist() == b.hit_tokens.tolist()


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(0, 5))
def test_chain_ids_do_not_depend_on_the_seed(trace, block, seed) -> None:
    prompts, tenants = trace
    a = chains_of(prompts, rules_for("none", block_size_tokens=block), tenants)
    b = chains_of(prompts, rules_for("none", block_size_tokens=block, seed=seed + 1), tenants)
    assert a.ids.tolist() == b.ids.tolist()
    assert a.num_distinct == b.num_distinct


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(1, 8), st.integers(1, 3),
       st.sampled_from(["tail-first", "head-first"]))
def test_saturated_lfu_agrees_with_reference(trace, block, capacity, cap, touch) -> None:
    prompts, _ = trace
    rules = rules_for("none", block_size_tokens=block, capacity_blocks=capacity,
                      eviction="lfu", touch_order=touch)
    got = replay(chains_of(prompts, rules), rules, max_lfu_count=cap).hit_tokens.tolist()
    want = reference_replay(prompts, block=block, capacity=capacity, eviction="lfu",
                            touch_order=touch, lfu_cap=cap)
    assert got == want


@st.composite
def id_traces(draw: st.DrawFn) -> tuple[list[list[int]], list[int], int]:
    """Block-id prompts (source block size S) and their token lengths (last id may be partial)."""
    size = draw(st.integers(1, 4))
    prompts = draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1,
                            max_size=10))
    for i in range(1, len(prompts)):
        if draw(st.booleans()):
            j = draw(st.integers(0, i - 1))
            prompts[i] = prompts[j][: draw(st.integers(0, len(prompts[j])))] + prompts[i]
    lengths = [(len(p) - 1) * size + draw(st.integers(1, size)) for p in prompts]
    return prompts, lengths, size


@SETTINGS
@given(id_traces(), st.integers(1, 3), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(1, 8)), st.sampled_from(["tail-first", "head-first"]))
def test_block_ids_replay_as_their_expanded_tokens(trace, m, ltr, partial, capacity, touch):
    # An id of S tokens behaves as S copies of itself (a partial last id as fewer copies).
    prompts, lengths, size = trace
    rules = rules_for("none", block_size_tokens=m * size, last_token_rule=ltr,
                      cache_partial_blocks=partial, capacity_blocks=capacity, touch_order=touch)
    ids = replay(chains_of(prompts, rules, source_block_size=size, prompt_len=lengths), rules)
    tokens = [[b for b in p for _ in range(size)][:n] for p, n in zip(prompts, lengths,
                                                                       strict=True)]
    expanded = replay(chains_of(tokens, rules), rules)
    assert ids.hit_tokens.tolist() == expanded.hit_tokens.tolist()
