"""The replay rules of replay-spec.md, one test per rule, on hand-checked cases."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import chains_of, hits, run

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.rules import rules_for

WORKED = [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]]


def test_worked_example_block_1() -> None:
    result = run(WORKED, block_size_tokens=1)
    assert result.hit_tokens.tolist() == [0, 3, 0]
    assert int(result.hit_tokens.sum() + result.recompute_tokens.sum()) == 12
    assert result.remaining_prefill_tokens == 9


def test_worked_example_block_2() -> None:
    assert hits(WORKED, block_size_tokens=2) == [0, 2, 0]


@pytest.mark.parametrize("capacity", [None, 100])
def test_first_miss_ends_the_hit(capacity: int | None) -> None:
    # Block 2 differs; block 3 is "cached" content-wise but its chain differs: no hit past 1.
    prompts = [[1, 1, 2, 2, 3, 3], [1, 1, 9, 9, 3, 3], [1, 1, 2, 2, 3, 3]]
    assert hits(prompts, block_size_tokens=2, capacity_blocks=capacity) == [0, 2, 6]


def test_first_miss_ends_the_hit_with_cached_tail() -> None:
    # Head-first flat LRU of capacity 2: block 1 is evicted while blocks 2..3 stay cached.
    prompts = [[1, 2, 3], [1, 2, 3], [7, 8], [1, 2, 3]]
    # r0 inserts 1,12,123 (head-first; cap 2 keeps 12,123); r1 misses block 1 -> hit 0.
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2, touch_order="head-first") == [
        0, 0, 0, 0]


def test_last_token_rule_with_block_dividing_n() -> None:
    prompts = [[1, 2, 3, 4], [1, 2, 3, 4]]
    assert hits(prompts, block_size_tokens=2) == [0, 4]
    assert hits(prompts, block_size_tokens=2, last_token_rule=True) == [0, 2]
    # B does not divide n: the cap floor((n-1)/B) keeps every full block.
    assert hits([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]], block_size_tokens=2,
                last_token_rule=True) == [0, 4]
    assert hits(prompts, block_size_tokens=1, last_token_rule=True) == [0, 3]


def test_tail_first_vs_head_first_eviction() -> None:
    # r0 = [a b c], capacity 3. r1 = [x] evicts one block. Tail-first keeps the head of r0's
    # prefix (evicts c, the deepest); head-first evicts a (block 1) and r2 hits nothing.
    prompts = [[1, 2, 3], [9], [1, 2, 3]]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=3) == [0, 0, 2]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=3,
                touch_order="head-first") == [0, 0, 0]


def test_partial_blocks_of_tokens() -> None:
    prompts = [[1, 2, 3], [1, 2, 3], [1, 2, 4]]
    assert hits(prompts, block_size_tokens=2) == [0, 2, 2]
    assert hits(prompts, block_size_tokens=2, cache_partial_blocks=True) == [0, 3, 2]
    # A partial block of another length is another block.
    assert hits([[1, 2, 3], [1, 2, 3, 3]], block_size_tokens=2, cache_partial_blocks=True) == [
        0, 2]


def test_block_ids_partial_source_block() -> None:
    # S = 4 tokens per id; request lengths 10 and 10: ids [5, 6, 7] where 7 is partial (2 tokens).
    rules = rules_for("mooncake", block_size_tokens=4)
    chains = chains_of([[5, 6, 7], [5, 6, 7], [5, 6, 8]], rules, source_block_size=4,
                       prompt_len=[10, 10, 10])
    assert chains.block_tokens.tolist() == [4, 4, 2] * 3
    assert replay(chains, rules).hit_tokens.tolist() == [0, 10, 8]
    off = rules.with_(cache_partial_blocks=False)
    chains = chains_of([[5, 6, 7], [5, 6, 7]], off, source_block_size=4, prompt_len=[10, 10])
    assert replay(chains, off).hit_tokens.tolist() == [0, 8]


def test_block_ids_grouped_into_larger_blocks() -> None:
    rules = rules_for("none", block_size_tokens=8, last_token_rule=False)
    # ids of 4 tokens; B = 8 groups two ids. [1,2,3] vs [1,2,9]: one full block shared.
    chains = chains_of([[1, 2, 3, 4], [1, 2, 3, 9], [1, 9]], rules, source_block_size=4,
                       prompt_len=[16, 16, 8])
    assert replay(chains, rules).hit_tokens.tolist() == [0, 8, 0]
    # The trailing partial group (one id of two) is cacheable only with partial blocks.
    part = rules.with_(cache_partial_blocks=True)
    chains = chains_of([[1, 2, 3], [1, 2, 3]], part, source_block_size=4, prompt_len=[12, 12])
    assert chains.block_tokens.tolist() == [8, 4, 8, 4]
    assert replay(chains, part).hit_tokens.tolist() == [0, 12]


def test_block_ids_are_rechained_as_content() -> None:
    # Id 6 follows 5 in one request and 7 in another: different chains, so no hit on block 2.
    rules = rules_for("mooncake", block_size_tokens=4)
    chains = chains_of([[5, 6], [7, 6], [5, 6]], rules, source_block_size=4,
                       prompt_len=[8, 8, 8])
    assert replay(chains, rules).hit_tokens.tolist() == [0, 0, 8]


def test_block_size_not_a_multiple_of_source_is_an_error() -> None:
    rules = rules_for("vllm")
    with pytest.raises(ConfigError, match="cannot be split"):
        chains_of([[1, 2]], rules, source_block_size=512, prompt_len=[1000])


def test_namespaces_separate_chains() -> None:
    prompts = [[1, 2, 3, 4]] * 3
    assert hits(prompts, block_size_tokens=2, namespaces=[0, 1, 0]) == [0, 0, 4]


def test_tenant_isolation_never_shares_across_namespaces_even_same_content() -> None:
    prompts = [[1, 2], [1, 2], [1, 2]]
    assert hits(prompts, block_size_tokens=1, namespaces=[7, 8, 9]) == [0, 0, 0]


def test_fifo_hand_case() -> None:
    # B=1, capacity 2, head-first so insertion order is block order.
    # r0 [1] inserts A. r1 [2] inserts B. r2 [1] hits A (FIFO: no refresh). r3 [3] evicts A
    # (oldest inserted), so r4 [1] misses. LRU would have evicted B instead.
    prompts = [[1], [2], [1], [3], [1]]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2, eviction="fifo") == [
        0, 0, 1, 0, 0]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2, eviction="lru") == [
        0, 0, 1, 0, 1]


def test_lfu_hand_case() -> None:
    # capacity 2: A touched 3×, B once; C evicts B (least frequent) not A; then D evicts C
    # (freq 1, and among freq-1 blocks the least recent: C is the only one).
    prompts = [[1], [1], [1], [2], [3], [1], [2]]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2, eviction="lfu") == [
        0, 1, 1, 0, 0, 1, 0]
    # Ties by recency: A and B both freq 1, A older -> C evicts A; B and C then hit.
    prompts = [[1], [2], [3], [2], [3], [1]]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2, eviction="lfu") == [
        0, 0, 0, 1, 1, 0]


def test_scope_instance_from_trace_column() -> None:
    prompts = [[1, 2]] * 4
    assert hits(prompts, block_size_tokens=1, scope="instance",
                instance_codes=[0, 1, 0, 1]) == [0, 0, 2, 2]


def test_route_round_robin() -> None:
    prompts = [[1, 2]] * 4
    result = run(prompts, block_size_tokens=1, scope="instance", route="round-robin",
                 instances=3)
    assert result.instance.tolist() == [0, 1, 2, 0]
    assert result.hit_tokens.tolist() == [0, 0, 0, 2]


def test_route_random_is_seeded() -> None:
    prompts = [[1, 2]] * 50
    a = run(prompts, block_size_tokens=1, scope="instance", route="random", instances=4, seed=3)
    b = run(prompts, block_size_tokens=1, scope="instance", route="random", instances=4, seed=3)
    assert a.instance.tolist() == b.instance.tolist()
    assert set(a.instance.tolist()) == {0, 1, 2, 3}


def test_route_least_loaded() -> None:
    # Load is outstanding prompt tokens; without finish times it accumulates.
    prompts = [[1] * 10, [2] * 3, [3] * 3, [4] * 3, [5]]
    result = run(prompts, block_size_tokens=1, scope="instance", route="least-loaded",
                 instances=2)
    assert result.instance.tolist() == [0, 1, 1, 1, 1]


def test_route_least_loaded_with_finish_times() -> None:
    rules = rules_for("none", block_size_tokens=1, scope="instance", route="least-loaded",
                      instances=2)
    chains = chains_of([[1] * 10, [2] * 3, [3] * 3], rules)
    arrival = np.array([0.0, 1.0, 5.0])
    finish = np.array([2.0, 9.0, 9.0])  # r0 is done when r2 arrives
    result = replay(chains, rules, arrival_s=arrival, finish_s=finish)
    assert result.instance.tolist() == [0, 1, 0]


def test_route_prefix_affinity() -> None:
    shared = [1, 2, 3, 4, 5, 6]
    prompts = [[*shared, 7], [*shared, 8], [9, 9], [*shared, 9], [4, 4]]
    result = run(prompts, block_size_tokens=1, scope="instance", route="prefix-affinity",
                 instances=2)
    # r0 -> 0; r1 follows its prefix to 0; r2 -> 1 (no match: least loaded); r3 -> 0;
    # r4 -> 1 (least loaded).
    assert result.instance.tolist() == [0, 0, 1, 0, 1]
    assert result.hit_tokens.tolist() == [0, 6, 0, 6, 0]
    rr = run(prompts, block_size_tokens=1, scope="instance", route="round-robin", instances=2)
    assert rr.hit_tokens.sum() < result.hit_tokens.sum()
    # Below the threshold the least-loaded instance wins instead of the longest match.
    strict = run(prompts, block_size_tokens=1, scope="instance", route="prefix-affinity",
                 instances=2, affinity_threshold=0.9)
    assert strict.instance.tolist()[:2] == [0, 1]


def test_route_needs_instance_scope() -> None:
    with pytest.raises(ConfigError, match="scope instance"):
        rules_for("none", route="random")


def test_cache_outputs_inserts_prompt_plus_output_blocks() -> None:
    rules = rules_for("none", block_size_tokens=2, cache_outputs=True)
    offsets = np.array([0, 2, 6])
    values = np.array([1, 2, 1, 2, 3, 4])
    out_off = np.array([0, 2, 2])
    out_val = np.array([3, 4])
    from yaotu_trace.prefix.kernels.blocks import build_block_chains
    from yaotu_trace.prefix.kernels.chains import PromptContent

    content = PromptContent(offsets=offsets, values=values, prompt_len=np.array([2, 4]),
                            output_offsets=out_off, output_values=out_val)
    chains = build_block_chains(content, None, rules)
    assert replay(chains, rules).hit_tokens.tolist() == [0, 4]
    assert replay(chains, rules.with_(capacity_blocks=10)).hit_tokens.tolist() == [0, 4]
    plain = rules.with_(cache_outputs=False)
    chains = build_block_chains(replace(content, output_offsets=None, output_values=None),
                                None, plain)
    assert replay(chains, plain).hit_tokens.tolist() == [0, 2]


def test_presets_and_overrides() -> None:
    assert rules_for("mooncake").touch_order == "head-first"
    assert rules_for("sglang").block_size_tokens == 1
    assert rules_for("vllm", block_size_tokens=32).block_size_tokens == 32
    with pytest.raises(ConfigError):
        rules_for("tensorrt")
    with pytest.raises(ConfigError):
        rules_for("vllm", eviction="mru")
    with pytest.raises(ConfigError):
        rules_for("vllm", capacity_blocks=0)


def test_empty_prompts_and_no_requests() -> None:
    assert hits([[], [1], []], block_size_tokens=1, last_token_rule=True) == [0, 0, 0]
    assert hits([[], []], block_size_tokens=4, capacity_blocks=2) == [0, 0]


@pytest.mark.parametrize("slice_ids", [1, 2, 3, 7, 1 << 22])
def test_first_occurrence_flags_slice_by_slice_are_the_first_occurrences(
        monkeypatch: pytest.MonkeyPatch, slice_ids: int) -> None:
    # GIVEN chains that repeat earlier requests' prefixes (ids dense by first appearance)
    from yaotu_trace.prefix.kernels import engine

    rng = np.random.default_rng(5)
    heads = [rng.integers(0, 9, int(rng.integers(1, 12))).tolist() for _ in range(4)]
    prompts = [heads[int(rng.integers(0, 4))] + rng.integers(0, 9, int(rng.integers(0, 6)))
               .tolist() for _ in range(40)]
    chains = chains_of(prompts, rules_for("none", block_size_tokens=2))
    monkeypatch.setattr(engine, "FLAG_SLICE", slice_ids)
    # WHEN the first occurrences are flagged, slice by slice
    got = engine.first_occurrence_flags(chains)
    # THEN they are the positions where each id appears first
    seen: set[int] = set()
    want = []
    for i in chains.ids.tolist():
        want.append(i not in seen)
        seen.add(i)
    assert got.tolist() == want
    assert 0 < sum(want) < len(want)
