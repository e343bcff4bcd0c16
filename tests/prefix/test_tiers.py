"""The tiered replay (`prefix/tiers/`): small cases worked by hand from the engines' rules
(kv-tiers.md), the options' one-line refusals, and what the tiers add to a replay.

vLLM's native offload is also checked per request against vLLM itself
(`test_tiers_vllm_golden.py`); LMCache's and SGLang's tiers are checked here only, against the
rules as read in their source (LMCache 0.5.6 `storage_manager.py`, `cache_engine.py`,
`vllm_v1_adapter.py`; SGLang 0.5.23 `unified_radix_cache.py`, `components/full.py`).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import chains_of

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.options import ReplayOptions, check_tier_options
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.tiers import (
    TierEvictions,
    TierName,
    TierPolicy,
    TierSpec,
    parse_tier,
    replay_tiers,
    resolve_tiers,
    tier_curve,
    tier_policy_for,
)

R0 = [1, 2, 3, 4]
R1 = [5, 6, 7, 8]


def _tier(name: str, chunks: int, tokens: int) -> TierSpec:
    return TierSpec(name=TierName(name), capacity_chunks=chunks, chunk_tokens=tokens)


def _same_evictions(got: tuple, want: tuple) -> None:
    """Every tier evicted the same keys, for the same requests, last used by the same ones."""
    for mine, theirs in zip(got, want, strict=True):
        assert mine.key.tolist() == theirs.key.tolist()
        assert mine.request.tolist() == theirs.request.tolist()
        assert mine.last_use_request.tolist() == theirs.last_use_request.tolist()


def test_vllm_native_loads_the_cpu_run_past_the_gpu_hit_and_a_full_hit() -> None:
    # GIVEN vLLM's pool of 4 blocks (3 usable) of 2 tokens and a CPU tier of 4 chunks
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=4)
    prompts = [R0, R1, [*R0, 9], R1]
    chains = chains_of(prompts, rules)
    # WHEN replayed with the CPU tier
    result = replay_tiers(chains, rules, (_tier("cpu", 4, 2),), TierPolicy.VLLM)
    # THEN request 2 finds block 1 on the GPU and block 2 (evicted there by request 1) on
    # the CPU; request 3 finds nothing on the GPU and its whole prompt on the CPU: a full
    # hit, counted as vLLM counts it (all 4 tokens external)
    assert result.gpu_hit_tokens.tolist() == [0, 0, 2, 0]
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 2, 4]
    assert result.hit_tokens.tolist() == [0, 0, 4, 4]
    assert result.recompute_tokens.tolist() == [4, 4, 1, 0]


def test_vllm_native_lookup_starts_at_the_chunk_of_the_gpu_hit() -> None:
    # GIVEN chunks of 2 blocks, vLLM's pool of 6 blocks (5 usable)
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=6)
    prompts = [[*R0, *R1], [10, 11, 12, 13, 14, 15], [*R0, *R1, 9]]
    chains = chains_of(prompts, rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 8, 4),), TierPolicy.VLLM)
    # THEN request 1 took request 0's last two blocks (the tail goes first): request 2 finds
    # the first chunk on the GPU and the second on the CPU
    assert result.gpu_hit_tokens.tolist() == [0, 0, 4]
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 4]


def test_vllm_native_offer_that_cannot_make_room_fails_whole() -> None:
    # GIVEN a CPU tier of 1 chunk and prompts of 2 chunks
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=8)
    chains = chains_of([R0, R1, R0], rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 1, 2),), TierPolicy.VLLM)
    # THEN every offer needs 2 chunks and fails: nothing is ever stored
    assert result.counters[0].stored_chunks == 0
    assert result.counters[0].failed_stores >= 2
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 0]


def test_vllm_refused_request_is_all_miss_and_never_reaches_the_tier() -> None:
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=3)  # 2 usable blocks
    chains = chains_of([R0, [*R0, 9], R0], rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 4, 2),), TierPolicy.VLLM)
    assert result.refused.tolist() == [False, True, False]
    assert result.hit_tokens[1] == 0


def test_lmcache_walks_cpu_then_disk_and_a_full_hit_loads_one_token_less() -> None:
    # GIVEN a GPU of 2 blocks, a CPU backend of 2 chunks and a disk of 4
    rules = rules_for("lmcache", block_size_tokens=2, capacity_blocks=2)
    chains = chains_of([R0, R1, [*R0, 9], R1], rules)
    tiers = (_tier("cpu", 2, 2), _tier("disk", 4, 2))
    result = replay_tiers(chains, rules, tiers, TierPolicy.LMCACHE)
    # THEN request 2's chunks were pushed out of the CPU by request 1's but are on disk;
    # request 3's whole prompt is on disk: LMCache loads one token less
    assert result.gpu_hit_tokens.tolist() == [0, 0, 0, 0]
    assert result.tier_hits("cpu").tolist() == [0, 0, 0, 0]
    assert result.tier_hits("disk").tolist() == [0, 0, 4, 3]
    # and a disk read fills the CPU backend
    assert result.counters[0].stored_chunks == 2 + 2 + 2 + 2


def test_lmcache_gpu_hit_wins() -> None:
    # GIVEN an unlimited GPU: LMCache holds the prompt too, but the GPU serves it
    rules = rules_for("lmcache", block_size_tokens=2)
    chains = chains_of([R0, [*R0, 9]], rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 4, 2),), TierPolicy.LMCACHE)
    assert result.gpu_hit_tokens.tolist() == [0, 4]
    assert result.tier_hits("cpu").tolist() == [0, 0]


A = list(range(1, 13))
C = list(range(201, 213))
D = list(range(301, 313))


@pytest.mark.parametrize(("policy", "prompts", "host_hits"), [
    (TierPolicy.SGLANG_WRITE_THROUGH, [[*A, 9], [*C, 11], [*D, 12], [*A, 13]], [0, 0, 0, 12]),
    (TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE, [[*A, 9], [*C, 11], [*D, 12], [*A, 13]],
     [0, 0, 0, 0]),
    (TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE,
     [[*A, 9], [*A, 10], [*C, 11], [*D, 12], [*A, 13]], [0, 0, 0, 0, 12]),
    (TierPolicy.SGLANG_WRITE_BACK, [[*A, 9], [*C, 11], [*D, 12], [*A, 13]], [0, 0, 0, 12]),
])
def test_sglang_host_tier_backs_up_at_the_policy_hit_count(
        policy: TierPolicy, prompts: list[list[int]], host_hits: list[int]) -> None:
    # GIVEN SGLang's pool of 6 pages of 4 tokens and a host of 13 pages (hicache_ratio 2);
    # these hits are SGLang 0.5.23's own (benchmarks/engines/golden_tiers_sglang.py, HiCache)
    rules = rules_for("sglang", block_size_tokens=4, capacity_blocks=6)
    chains = chains_of(prompts, rules)
    # WHEN A is pushed off the GPU by C and D and asked again
    result = replay_tiers(chains, rules, (_tier("cpu", 13, 4),), policy)
    # THEN write_through backs A up when inserted and write_back when evicted, so the host
    # serves it; write_through_selective backs a page up at its second use while cached, and
    # a page dropped before that starts its count again (the node is gone)
    assert result.tier_hit_tokens[0].tolist() == host_hits


def test_sglang_load_back_needs_ten_tokens() -> None:
    rules = rules_for("sglang", block_size_tokens=2, capacity_blocks=2, accounting="clean")
    chains = chains_of([R0, R1, [*R0, 9]], rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 8, 2),), TierPolicy.SGLANG_WRITE_THROUGH)
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 0]  # 4 tokens < load_back_threshold


def test_tier_never_changes_gpu_hits_and_only_adds() -> None:
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=5)
    rng = np.random.default_rng(3)
    prompts = [list(rng.integers(0, 3, size=int(rng.integers(2, 12)))) for _ in range(60)]
    chains = chains_of(prompts, rules)
    alone = replay_tiers(chains, rules, (_tier("cpu", 1, 2),), TierPolicy.VLLM)
    small = replay_tiers(chains, rules, (_tier("cpu", 3, 2),), TierPolicy.VLLM)
    large = replay_tiers(chains, rules, (_tier("cpu", 400, 2),), TierPolicy.VLLM)
    for r in (small, large):
        np.testing.assert_array_equal(r.gpu_hit_tokens, alone.gpu_hit_tokens)
        assert (r.hit_tokens <= r.prompt_tokens).all()
    assert int(large.hit_tokens.sum()) >= int(small.hit_tokens.sum())


def test_tier_curve_rows_are_replays_at_each_size() -> None:
    rules = rules_for("vllm", block_size_tokens=2)
    chains = chains_of([R0, R1, [*R0, 9], R1], rules)
    curve = tier_curve(chains, rules, _tier("cpu", 4, 2), TierPolicy.VLLM, (4, 8), (1, 4))
    one = replay_tiers(chains, rules.with_(capacity_blocks=4), (_tier("cpu", 4, 2),),
                       TierPolicy.VLLM)
    assert curve.hit_tokens[0][1] == int(one.hit_tokens.sum())
    assert len(curve.hit_tokens) == 2 and len(curve.hit_tokens[0]) == 2
    # the same curve, and the same points seen in the same order, on two threads
    seen: list[list[tuple[int | None, int | None, list[int]]]] = [[], []]
    for threads, points in ((1, seen[0]), (2, seen[1])):
        again = tier_curve(chains, rules, _tier("cpu", 4, 2), TierPolicy.VLLM, (4, 8), (1, 4),
                           threads=threads,
                           observe=lambda b, c, g, t, p=points: p.append((b, c, g.tolist())))
        assert again == curve
    assert seen[0] == seen[1] and len(seen[0]) == 2 * 3


@pytest.mark.parametrize("name", ["cpu", "remote", "disk"])
def test_lmcache_curve_from_one_pass_per_tier_size_equals_a_replay_per_point(name: str) -> None:
    # GIVEN random prompts behind vLLM's pool with LMCache: 4, 6 and 8 blocks refuse 121, 63
    # and 14 prompts (so the backend sees other requests), 9 blocks and an unlimited pool none
    # (one pass serves both); backends from 1 to 30 chunks (a local disk, which the reads
    # refresh, is replayed per point)
    rng = np.random.default_rng(7)
    prompts = [[int(t) for t in rng.integers(0, 2, size=int(rng.integers(1, 16)))]
               for _ in range(200)]
    rules = rules_for("vllm", block_size_tokens=2)
    chains = chains_of(prompts, rules)
    tier = _tier(name, 30, 4)
    gpu_sizes = (4, 6, 8, 9, None)
    seen: list[tuple[int | None, int | None, list[int], list[int] | None]] = []
    # WHEN the curve is drawn (one backend pass per tier size and refused set)
    curve = tier_curve(chains, rules, tier, TierPolicy.LMCACHE, gpu_sizes, (1, 3, 9, 30),
                       observe=lambda b, c, g, t: seen.append(
                           (b, c, g.tolist(), None if t is None else t.tolist())))
    # THEN every point is the replay at that point, request by request
    for row, blocks in zip(curve.hit_tokens, gpu_sizes, strict=True):
        for hits, chunks in zip(row, (1, 3, 9, 30), strict=True):
            one = replay_tiers(chains, rules.with_(capacity_blocks=blocks),
                               (_tier(name, chunks, 4),), TierPolicy.LMCACHE)
            assert hits == int(one.hit_tokens.sum())
            point = next(p for p in seen if p[:2] == (blocks, chunks))
            assert point[2:] == (one.gpu_hit_tokens.tolist(), one.tier_hit_tokens[0].tolist())
    assert sum(1 for p in seen if p[1] is not None and any(p[3] or [])) > 8
    # AND on two threads (the GPU replays, then the backend passes, side by side) the same
    # curve, its points seen in the same order
    seen_two: list[tuple[int | None, int | None, list[int], list[int] | None]] = []
    assert tier_curve(chains, rules, tier, TierPolicy.LMCACHE, gpu_sizes, (1, 3, 9, 30),
                      threads=2, observe=lambda b, c, g, t: seen_two.append(
                          (b, c, g.tolist(), None if t is None else t.tolist()))) == curve
    assert seen_two == seen


def test_tier_sizes_convert_bytes_tokens_and_blocks() -> None:
    requests = (parse_tier("cpu=1GiB"), parse_tier("disk=1Mtok"), parse_tier("remote=1000"))
    tiers = resolve_tiers(requests, policy=TierPolicy.VLLM, block_size_tokens=16,
                          chunk_tokens=None, kv_bytes_per_token=131_072)
    assert [t.capacity_chunks for t in tiers] == [2**30 // (131_072 * 16), 62_500, 1000]
    lm = resolve_tiers(requests[:1], policy=TierPolicy.LMCACHE, block_size_tokens=16,
                       chunk_tokens=None, kv_bytes_per_token=131_072)
    assert lm[0].chunk_tokens == 256


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tiers": ("cpu=1GiB",)}, "is in bytes; give --model"),
    ({"tiers": ("cpu=3",), "tier_chunk_tokens": 64}, "holds less than one 64-token chunk"),
    ({"tiers": ("gpu=3",)}, "must be one of cpu, disk, remote"),
    ({"tiers": ("cpu",)}, "must be NAME=SIZE"),
    ({"tiers": ("cpu=10", "cpu=20")}, "given twice"),
    ({"tiers": ("cpu=100",), "tier_chunk_tokens": 24}, "whole number of 16-token blocks"),
    ({"tier_policy": "lmcache"}, "add one with --tier"),
])
def test_tier_options_refused_in_one_line(kwargs: dict, message: str) -> None:
    options = ReplayOptions(preset="vllm", **kwargs)
    with pytest.raises(ConfigError, match=message) as caught:
        check_tier_options(options)
        options.tier_setup(rules_for("vllm"), "vllm")
    assert "\n" not in str(caught.value)


def test_tier_policy_must_be_the_preset_engines() -> None:
    assert tier_policy_for("vllm", None) is TierPolicy.VLLM
    assert tier_policy_for("vllm", "lmcache") is TierPolicy.LMCACHE
    assert tier_policy_for("sglang", None) is TierPolicy.SGLANG_WRITE_THROUGH
    with pytest.raises(ConfigError, match="not one of preset sglang's engine"):
        tier_policy_for("sglang", "vllm-native")
    with pytest.raises(ConfigError, match="is not a tier policy"):
        tier_policy_for("vllm", "arc")


@pytest.mark.parametrize(("arc", "seed", "per_chunk", "cpu_chunks", "gpu_blocks", "threshold"), [
    (False, 1, 1, 2, 6, 0), (False, 2, 1, 7, 9, 0), (False, 3, 2, 3, 12, 0),
    (False, 4, 3, 20, 8, 0), (False, 5, 1, 60, 30, 0), (False, 6, 2, 1, 7, 0),
    (False, 7, 1, 15, 10, 2), (False, 8, 2, 9, 20, 3), (False, 9, 1, 40, 12, 2),
    (True, 101, 1, 2, 6, 0), (True, 102, 1, 7, 9, 0), (True, 103, 2, 3, 12, 2),
    (True, 104, 3, 20, 8, 0), (True, 105, 1, 60, 30, 2), (True, 106, 2, 8, 12, 3),
    (True, 107, 1, 15, 10, 2), (True, 108, 2, 9, 20, 0),
])
def test_vllm_kernels_equal_the_python_model(arc: bool, seed: int, per_chunk: int,
                                             cpu_chunks: int, gpu_blocks: int,
                                             threshold: int) -> None:
    # GIVEN random prompts over a tiny vocabulary (shared prefixes, full hits, failed offers),
    # LRU's CPU tier or ARC's, a chunk stored from its first offer on or, with a store
    # threshold, from its N-th
    from dataclasses import replace

    from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
    from yaotu_trace.prefix.tiers.vllm_native import (
        replay_vllm_arc,
        replay_vllm_offload,
        replay_vllm_tiers,
    )

    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(0, 3 if arc else 2,
                                             size=int(rng.integers(1, 20 if arc else 14)))]
               for _ in range(150)]
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=gpu_blocks)
    chains = chains_of(prompts, rules)
    gpu = gpu_replay(chains, rules)
    refused = refused_requests(chains, rules)
    tier = replace(_tier("cpu", cpu_chunks, 2 * per_chunk), store_threshold=threshold)
    # WHEN the compiled kernel and the Python model replay the CPU tier
    lacking = np.full((2, len(prompts)), -1, dtype=np.int64)
    if arc:
        (compiled,), (counters,), (evicted,) = replay_vllm_arc(
            chains, gpu.hit_blocks, refused, (tier,), lacking=lacking[0])
    else:
        (compiled,), (counters,), (evicted,) = replay_vllm_tiers(
            chains, gpu.hit_blocks, refused, (tier,), lacking=lacking[0])
    (python,), (reference,), (expected,) = replay_vllm_offload(
        chains, gpu.hit_blocks, refused, tier, arc=arc, lacking=lacking[1])
    # THEN they agree on every request, every counter and every eviction, and on the first
    # chunk the tier lacked at each lookup
    assert compiled.tolist() == python.tolist()
    assert counters == reference
    assert evicted.key.tolist() == expected.key.tolist()
    assert evicted.request.tolist() == expected.request.tolist()
    assert evicted.last_use_request.tolist() == expected.last_use_request.tolist()
    assert lacking[0].tolist() == lacking[1].tolist() and (lacking[0] >= 0).any()


def test_vllm_kernel_equals_the_python_model_on_random_configurations() -> None:
    # GIVEN 60 seeded configurations drawn at random: prompts over 2 to 6 token values (shared
    # prefixes, full hits), GPU pools of 8 to 39 blocks, CPU tiers of 1 to 39 chunks of 1 to 3
    # blocks (1 to 5 on odd seeds: a tier smaller than one prompt fails offers and evicts the
    # live requests' own keys, the groups of both live requests read), store thresholds, and a
    # disk (and a remote) tier below some
    from dataclasses import replace

    from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
    from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_offload, replay_vllm_tiers

    failed = below = 0
    for seed in range(60):
        rng = np.random.default_rng(1000 + seed)
        vocab, longest = int(rng.integers(2, 7)), int(rng.integers(3, 60))
        prompts = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, longest)))]
                   for _ in range(int(rng.integers(20, 120)))]
        per_chunk = int(rng.integers(1, 4))
        rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=int(rng.integers(8, 40)))
        chains = chains_of(prompts, rules)
        gpu, refused = gpu_replay(chains, rules), refused_requests(chains, rules)
        threshold = int(rng.choice([0, 0, 2, 3]))
        cpu = replace(_tier("cpu", int(rng.integers(1, 6 if seed % 2 else 40)), 2 * per_chunk),
                      store_threshold=threshold)
        names = [] if threshold or rng.random() < 0.5 else (
            ["disk"] if rng.random() < 0.6 else ["disk", "remote"])
        tiers = (cpu, *(_tier(name, int(rng.integers(1, 60)), 2 * per_chunk) for name in names))
        # WHEN the compiled kernel and the Python model replay them
        lacking = np.full((2, len(prompts)), -1, dtype=np.int64)
        compiled, counters, evicted = replay_vllm_tiers(chains, gpu.hit_blocks, refused, tiers,
                                                        lacking=lacking[0])
        python, reference, expected = replay_vllm_offload(
            chains, gpu.hit_blocks, refused, tiers[0], tiers[1:], lacking=lacking[1])
        # THEN every request's hits, every counter and eviction and first lacking chunk agree
        assert [h.tolist() for h in compiled] == [h.tolist() for h in python], seed
        assert counters == reference, seed
        _same_evictions(evicted, expected)
        assert lacking[0].tolist() == lacking[1].tolist(), seed
        failed += reference[0].failed_stores > 0
        below += sum(int(h.sum()) for h in python[1:]) > 0
    # and the draw reached failed offers and hits served from below the CPU
    assert failed >= 5 and below >= 5, (failed, below)


def _tiny_vocabulary_case(seed: int, preset: str = "vllm",  # type: ignore[no-untyped-def]
                          capacity_blocks: int = 9):
    """150 random prompts of 1 to 13 tokens over two token values (prefixes shared often), as
    chains of two-token blocks, with their GPU replay (`preset`'s pool of `capacity_blocks`)
    and refusals."""
    from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests

    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(0, 2, size=int(rng.integers(1, 14)))]
               for _ in range(150)]
    rules = rules_for(preset, block_size_tokens=2, capacity_blocks=capacity_blocks)
    chains = chains_of(prompts, rules)
    return chains, gpu_replay(chains, rules), refused_requests(chains, rules)


@pytest.mark.parametrize("arc", [False, True])
@pytest.mark.parametrize(("seed", "per_chunk", "sizes"), [
    (1, 1, (("cpu", 6), ("disk", 9))), (2, 2, (("cpu", 3), ("disk", 20))),
    (3, 1, (("cpu", 7), ("disk", 3), ("remote", 40))), (4, 2, (("cpu", 3), ("remote", 30))),
    (5, 1, (("cpu", 6), ("disk", 12), ("remote", 25))), (6, 3, (("cpu", 2), ("disk", 7))),
    (7, 1, (("cpu", 6), ("disk", 1000))), (8, 2, (("cpu", 4), ("disk", 1000), ("remote", 5))),
])
def test_vllm_kernel_with_lower_tiers_equals_the_python_model(
        seed: int, per_chunk: int, sizes: tuple[tuple[str, int], ...], arc: bool) -> None:
    # GIVEN random prompts over a tiny vocabulary, a CPU tier (LRU or ARC) of at least the
    # longest prompt that loses chunks the disk or remote tier still holds (promoted through
    # the CPU a chunk at a time after the tier answers, a step late; vLLM's tiers never
    # evict: 1,000 chunks is that, smaller ones are LRU stores)
    from yaotu_trace.prefix.tiers.vllm_native import (
        replay_vllm_arc,
        replay_vllm_offload,
        replay_vllm_tiers,
    )

    chains, gpu, refused = _tiny_vocabulary_case(seed)
    tiers = tuple(_tier(name, chunks, 2 * per_chunk) for name, chunks in sizes)
    # WHEN the compiled kernel and the Python model replay the tiers
    kernel = replay_vllm_arc if arc else replay_vllm_tiers
    lacking = np.full((2, chains.num_requests), -1, dtype=np.int64)
    compiled, counters, evicted = kernel(chains, gpu.hit_blocks, refused, tiers,
                                         lacking=lacking[0])
    python, reference, expected = replay_vllm_offload(chains, gpu.hit_blocks, refused,
                                                      tiers[0], tiers[1:], arc=arc,
                                                      lacking=lacking[1])
    # THEN they agree on every request, counter and eviction of every tier, and the lower
    # tiers served some
    assert [h.tolist() for h in compiled] == [h.tolist() for h in python]
    assert sum(int(h.sum()) for h in python[1:]) > 0
    assert counters == reference
    _same_evictions(evicted, expected)
    assert lacking[0].tolist() == lacking[1].tolist()


@pytest.mark.parametrize("arc", [False, True])
def test_vllm_lookup_that_never_settles_is_refused_by_kernel_and_model(arc: bool) -> None:
    # GIVEN prompts of up to 6 chunks and a CPU tier of 1 chunk above a disk that holds them:
    # vLLM 0.33 promotes each disk chunk into the CPU, evicting the one promoted before, and
    # looks again a step later, for ever (found driving its scheduler: a request that never
    # finished)
    from yaotu_trace.errors import ConfigError
    from yaotu_trace.prefix.tiers.vllm_native import (
        replay_vllm_arc,
        replay_vllm_offload,
        replay_vllm_tiers,
    )

    chains, gpu, refused = _tiny_vocabulary_case(3)
    tiers = (_tier("cpu", 1, 2), _tier("disk", 1000, 2))
    kernel = replay_vllm_arc if arc else replay_vllm_tiers
    # WHEN the compiled kernel and the Python model replay it THEN both refuse, naming the
    # same request and the CPU size that would let it start
    with pytest.raises(ConfigError) as compiled:
        kernel(chains, gpu.hit_blocks, refused, tiers)
    with pytest.raises(ConfigError) as python:
        replay_vllm_offload(chains, gpu.hit_blocks, refused, tiers[0], tiers[1:], arc=arc)
    assert str(compiled.value) == str(python.value)
    assert "would never start" in str(python.value)
    assert "at least" in str(python.value)


@pytest.mark.parametrize(("seed", "per_chunk", "sizes"), [
    (1, 1, (("cpu", 2),)), (2, 2, (("cpu", 7),)), (3, 1, (("cpu", 3), ("disk", 9))),
    (4, 3, (("cpu", 1), ("disk", 2), ("remote", 5))), (5, 1, (("disk", 4), ("remote", 30))),
    (6, 2, (("cpu", 60),)), (7, 1, (("cpu", 4), ("remote", 40))),
])
def test_lmcache_kernel_equals_the_python_model(seed: int, per_chunk: int,
                                                sizes: tuple[tuple[str, int], ...]) -> None:
    # GIVEN random prompts over a tiny vocabulary and one to three backends, small enough to
    # evict, promote reads from disk and remote into the CPU, and serve full hits
    from yaotu_trace.prefix.tiers.lmcache import replay_lmcache_model, replay_lmcache_tiers

    chains, gpu, refused = _tiny_vocabulary_case(seed, "lmcache", 6)
    tiers = tuple(_tier(name, chunks, 2 * per_chunk) for name, chunks in sizes)
    # WHEN the compiled kernel and the Python model replay the backends
    compiled, counters, evicted = replay_lmcache_tiers(chains, gpu.hit_blocks, refused, tiers)
    python, reference, expected = replay_lmcache_model(chains, gpu.hit_blocks, refused, tiers)
    # THEN they agree on every request, every counter and every eviction, backend by backend
    assert [h.tolist() for h in compiled] == [h.tolist() for h in python]
    assert any(h.sum() for h in python)
    assert counters == reference
    _same_evictions(evicted, expected)


@pytest.mark.parametrize(("below", "stop"), [("disk", "WaitsForCpuRoom"),
                                             ("remote", "LoadOutgrowsCpu")])
def test_lmcache_load_outgrowing_the_cpu_stops_kernel_and_model_alike(below: str,
                                                                      stop: str) -> None:
    # GIVEN a CPU backend of one chunk above a disk or a remote store: a load of two chunks
    # outgrows it (LMCache waits for ever reading the disk, loads less from the remote;
    # `benchmarks/engines/fuzz_tiers_lmcache.py --small-cpu` and tests/fixtures/tiers_lmcache)
    from yaotu_trace.prefix.tiers import lmcache

    chains, gpu, refused = _tiny_vocabulary_case(7, "lmcache", 6)
    tiers = (_tier("cpu", 1, 2), _tier(below, 40, 2))
    # WHEN the compiled kernel and the Python model replay it THEN both stop at one request,
    # in one line naming what would let it run
    stopped = []
    for replay in (lmcache.replay_lmcache_tiers, lmcache.replay_lmcache_model):
        with pytest.raises(lmcache.LoadOutgrowsCpu) as raised:
            replay(chains, gpu.hit_blocks, refused, tiers)
        assert type(raised.value).__name__ == stop
        stopped.append((raised.value.request, str(raised.value)))
    assert stopped[0] == stopped[1]
    assert raised.value.holding_chunks > 1 and "at least" in str(raised.value)


@pytest.mark.parametrize(("seed", "policy", "gpu_blocks", "sizes"), [
    (1, TierPolicy.SGLANG_WRITE_THROUGH, 100, (("cpu", 200),)),
    (2, TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE, 100, (("cpu", 150),)),
    (3, TierPolicy.SGLANG_WRITE_BACK, 100, (("cpu", 60),)),
    (4, TierPolicy.SGLANG_WRITE_BACK, None, (("cpu", 60),)),
    (5, TierPolicy.SGLANG_WRITE_THROUGH, 100, (("cpu", 110), ("disk", 400))),
    (6, TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE, 100,
     (("cpu", 100), ("disk", 250), ("remote", 3000))),
])
def test_sglang_kernel_equals_the_python_model(seed: int, policy: TierPolicy,
                                               gpu_blocks: int | None,
                                               sizes: tuple[tuple[str, int], ...]) -> None:
    # GIVEN random prompts over a tiny vocabulary behind SGLang's pool of 4-token pages, with
    # a host and storage small enough to evict, and long shared runs that storage prefetches
    from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
    from yaotu_trace.prefix.tiers.sglang import replay_hicache_model, replay_hicache_tiers

    rng = np.random.default_rng(seed)
    documents = [rng.integers(0, 2, size=340).tolist() for _ in range(6)]
    prompts = [documents[int(rng.integers(0, 6))][:int(rng.integers(0, 340))]
               + rng.integers(0, 2, size=int(rng.integers(1, 60))).tolist() for _ in range(300)]
    rules = rules_for("sglang", block_size_tokens=4, capacity_blocks=gpu_blocks)
    chains = chains_of(prompts, rules)
    gpu = gpu_replay(chains, rules)
    refused = refused_requests(chains, rules)
    tiers = tuple(_tier(name, chunks, 4) for name, chunks in sizes)
    # WHEN the compiled kernel and the Python model replay the tiers
    compiled, counters, evicted = replay_hicache_tiers(chains, gpu.hit_blocks, refused, tiers,
                                                       policy, gpu_blocks)
    python, reference, expected = replay_hicache_model(chains, gpu.hit_blocks, refused, tiers,
                                                       policy, gpu_blocks)
    # THEN they agree on every request, every counter and every eviction, tier by tier
    assert [h.tolist() for h in compiled] == [h.tolist() for h in python]
    # (write_back behind an unlimited GPU pool never backs up: nothing is evicted)
    assert any(h.sum() > 0 for h in python) == (gpu_blocks is not None)
    assert counters == reference
    _same_evictions(evicted, expected)


@pytest.mark.parametrize("policy", [TierPolicy.VLLM, TierPolicy.LMCACHE,
                                    TierPolicy.SGLANG_WRITE_THROUGH])
def test_every_eviction_is_recorded_with_its_evictor_and_last_use(policy: TierPolicy) -> None:
    preset = {TierPolicy.VLLM: "vllm", TierPolicy.LMCACHE: "lmcache"}.get(policy, "sglang")
    rules = rules_for(preset, block_size_tokens=2, capacity_blocks=6, accounting="clean")
    rng = np.random.default_rng(11)
    prompts = [[int(t) for t in rng.integers(0, 3, size=int(rng.integers(2, 14)))]
               for _ in range(80)]
    chains = chains_of(prompts, rules)
    result = replay_tiers(chains, rules, (_tier("cpu", 5, 2),), policy, explain=True)
    (evictions,) = result.evictions
    assert evictions.key.size == result.counters[0].evicted_chunks > 0
    # the evictor comes no earlier than the key's last use (the previous request's re-offer
    # can evict a key the request being scheduled has just looked up)
    assert (evictions.request >= evictions.last_use_request - 1).all()
    assert (evictions.last_use_request >= 0).all()


@pytest.mark.parametrize("policy", [TierPolicy.VLLM, TierPolicy.VLLM_ARC, TierPolicy.LMCACHE,
                                    TierPolicy.SGLANG_WRITE_THROUGH])
@pytest.mark.parametrize("below", [False, True])
def test_a_replay_not_asked_to_explain_counts_its_evictions_without_keeping_them(
        policy: TierPolicy, below: bool) -> None:
    # GIVEN small tiers that evict, with a disk below the CPU tier or not
    preset = {TierPolicy.LMCACHE: "lmcache"}.get(policy, "vllm")
    if policy is TierPolicy.SGLANG_WRITE_THROUGH:
        preset = "sglang"
    rules = rules_for(preset, block_size_tokens=2, capacity_blocks=6)
    rng = np.random.default_rng(5)
    prompts = [[int(t) for t in rng.integers(0, 3, size=int(rng.integers(2, 14)))]
               for _ in range(120)]
    chains = chains_of(prompts, rules)
    tiers = (_tier("cpu", 5, 2), *((_tier("disk", 9, 2),) if below else ()))
    # WHEN it is replayed with and without `explain`
    kept = replay_tiers(chains, rules, tiers, policy, explain=True)
    counted = replay_tiers(chains, rules, tiers, policy)
    # THEN only the explained one keeps the evictions; hits, counters and the chunks the
    # tiers lacked are the same
    assert counted.evictions == ()
    assert [len(e) for e in kept.evictions] == [c.evicted_chunks for c in kept.counters]
    assert kept.counters[0].evicted_chunks > 0
    assert counted.counters == kept.counters
    assert np.array_equal(counted.gpu_hit_tokens, kept.gpu_hit_tokens)
    for a, b in zip(counted.tier_hit_tokens, kept.tier_hit_tokens, strict=True):
        assert np.array_equal(a, b)
    if kept.lacking_chunk is not None:
        assert np.array_equal(counted.lacking_chunk, kept.lacking_chunk)


def test_evictions_given_as_runs_expand_into_one_row_per_page() -> None:
    # GIVEN two runs a tree evicted: pages 2..4 of the ids by request 5 (last used by 4), then
    # page 0 by request 7 (never used)
    ids = np.array([10, 11, 12, 13, 14, 15], dtype=np.int64)
    evictions = TierEvictions.of_runs(ids, np.array([[2, 3, 5, 4], [0, 1, 7, -1]]))
    # WHEN counted, then read
    count = len(evictions)
    # THEN the count needs no expansion, and each page is its own row, in order
    assert count == 4
    assert evictions.key.tolist() == [12, 13, 14, 10]
    assert evictions.request.tolist() == [5, 5, 5, 7]
    assert evictions.last_use_request.tolist() == [4, 4, 4, -1]


@pytest.mark.parametrize("arc", [False, True])
def test_vllm_kernels_count_offers_past_the_trackers_size(arc: bool) -> None:
    # GIVEN more distinct chunks offered than vLLM's offer tracker keeps (64,000): 8,000
    # requests of 20 two-token chunks, 40 % of them one of 300 prompts seen before
    from dataclasses import replace

    from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
    from yaotu_trace.prefix.tiers.spec import MAX_TRACKED_OFFERS
    from yaotu_trace.prefix.tiers.vllm_native import (
        replay_vllm_arc,
        replay_vllm_offload,
        replay_vllm_tiers,
    )

    rng = np.random.default_rng(7)
    seen = [[int(x) for x in rng.integers(0, 10**9, size=40)] for _ in range(300)]
    prompts = [seen[int(rng.integers(0, 300))] if rng.random() < 0.4
               else [int(x) for x in rng.integers(0, 10**9, size=40)] for _ in range(8000)]
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=200)
    chains = chains_of(prompts, rules)
    assert chains.num_distinct > MAX_TRACKED_OFFERS
    gpu = gpu_replay(chains, rules)
    refused = refused_requests(chains, rules)
    tier = replace(_tier("cpu", 3000, 2), store_threshold=2)
    # WHEN compiled and in Python, under ARC or LRU
    if arc:
        (compiled,), (counters,), _ = replay_vllm_arc(chains, gpu.hit_blocks, refused,
                                                      (tier,))
    else:
        (compiled,), (counters,), _ = replay_vllm_tiers(chains, gpu.hit_blocks, refused,
                                                        (tier,))
    (python,), (reference,), _ = replay_vllm_offload(chains, gpu.hit_blocks, refused, tier,
                                                     arc=arc)
    # THEN the same
    assert compiled.tolist() == python.tolist() and counters == reference


@pytest.mark.parametrize("arc", [False, True])
def test_vllm_kernels_run_again_when_promotions_outgrow_the_evictions_room(
        arc: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN random prompts, a small CPU tier over a disk that never evicts, and the kernels'
    # first room for evictions far too small (promotions evict again and again)
    from yaotu_trace.prefix.tiers import lru_rows
    from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_arc, replay_vllm_tiers

    chains, gpu, refused = _tiny_vocabulary_case(11)
    tiers = (_tier("cpu", 7, 2), _tier("disk", 1000, 2))
    kernel = replay_vllm_arc if arc else replay_vllm_tiers
    expected = kernel(chains, gpu.hit_blocks, refused, tiers)
    tries: list[int] = []

    def tiny(chunks: int, lrus: int) -> int:
        tries.append(chunks)
        return 3

    monkeypatch.setattr(lru_rows, "first_room", tiny)
    # WHEN replayed with that room
    hits, counters, evictions = kernel(chains, gpu.hit_blocks, refused, tiers)
    # THEN the pass ran out of room, ran again with more, and gave the same hits, counters and
    # evictions
    assert len(tries) == 1 and int(expected[1][0].evicted_chunks) > 3
    assert [h.tolist() for h in hits] == [h.tolist() for h in expected[0]]
    assert counters == expected[1]
    assert evictions[0].key.tolist() == expected[2][0].key.tolist()


@pytest.mark.parametrize("arc", [False, True])
def test_vllm_kernels_eviction_columns_hold_the_evictions_alone(arc: bool) -> None:
    # GIVEN random prompts and a CPU tier of 5 chunks, which evicts most of what it stores
    from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_arc, replay_vllm_tiers

    chains, gpu, refused = _tiny_vocabulary_case(17)
    kernel = replay_vllm_arc if arc else replay_vllm_tiers
    # WHEN replayed
    _, (counters,), (evictions,) = kernel(chains, gpu.hit_blocks, refused, (_tier("cpu", 5, 2),))
    # THEN each column is an array of its own, as long as the evictions made (cut in place
    # from the pass's room for one per chunk of the trace): a result keeps no pass buffer alive
    evicted = int(counters.evicted_chunks)
    assert evicted > 20
    for column in (evictions.key, evictions.request, evictions.last_use_request):
        assert column.base is None and column.shape == (evicted,)
        assert column.nbytes == 8 * evicted and column.flags.owndata


def test_vllm_arc_kernel_widens_its_rows_when_stamps_outgrow_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the ARC kernel's int32 rows made to hold stamps up to 50 only (a trace would need
    # 2^31 store calls), over random prompts with a disk below the CPU tier
    import numpy as np

    from yaotu_trace.prefix.tiers import vllm_arc_kernel
    from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_arc

    chains, gpu, refused = _tiny_vocabulary_case(13)
    tiers = (_tier("cpu", 7, 2), _tier("disk", 1000, 2))
    expected = replay_vllm_arc(chains, gpu.hit_blocks, refused, tiers)
    widened: list[type] = []
    real = vllm_arc_kernel.stamp_limit

    def small(row: type) -> int:
        widened.append(row)
        return 50 if row is np.int32 else real(row)

    monkeypatch.setattr(vllm_arc_kernel, "stamp_limit", small)
    # WHEN replayed
    hits, counters, evictions = replay_vllm_arc(chains, gpu.hit_blocks, refused, tiers)
    # THEN the pass stopped at the limit, ran again with int64 rows, and gave the same result
    assert widened == [np.int32, np.int64]
    assert [h.tolist() for h in hits] == [h.tolist() for h in expected[0]]
    assert counters == expected[1]
    assert evictions[0].key.tolist() == expected[2][0].key.tolist()


def test_vllm_kernel_refuses_more_requests_than_its_owner_word_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the LRU kernel's owner word made to name 4 requests only (its 29 bits name
    # 536,870,911), and a trace of 150 requests
    from yaotu_trace.errors import ResourceLimitError
    from yaotu_trace.prefix.tiers import vllm_kernel
    from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_tiers

    chains, gpu, refused = _tiny_vocabulary_case(17)
    monkeypatch.setattr(vllm_kernel, "_REQUEST", 4)
    # WHEN replayed THEN refused in one line that names the count and the way out
    with pytest.raises(ResourceLimitError, match=r"^\d+ requests exceed the 3 .*in parts$"):
        replay_vllm_tiers(chains, gpu.hit_blocks, refused, (_tier("cpu", 5, 2),))
