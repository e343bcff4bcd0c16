"""The engine-exact vLLM replay (`prefix.kernels.exact_vllm.replay_vllm`) against vLLM itself.

Three kinds of check: a plain-Python model of vLLM 0.33.0's block pool, written from
`vllm/v1/core/block_pool.py`, `kv_cache_utils.py` (`FreeKVCacheBlockQueue`) and
`single_type_kv_cache_manager.py`, on random small cases; small cases checked by hand; and the
golden fixtures `tests/fixtures/engines/vllm_*.json`, recorded from vLLM's real `KVCacheManager` by
`benchmarks/engines/golden_vllm.py` (no vLLM needed here).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pytest
from conftest import FIXTURES
from helpers import chains_of
from reference import reference_chains

from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.kernels.exact_vllm import replay_vllm
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for

DATA = FIXTURES / "engines"
GOLDEN = sorted(DATA.glob("vllm_*.json"))


def reference_vllm(prompts: Sequence[Sequence[int]], namespaces: Sequence[int], block: int,
                   num_gpu_blocks: int) -> tuple[list[int], int, int, int]:
    """vLLM's block pool, obviously: (hit tokens, rejected, evicted, inserted).

    The free queue is an OrderedDict of physical ids (1..N-1; 0 is the null block), the hash
    map a dict chain -> physical copies in insertion order.
    """
    chains = reference_chains(prompts, namespaces, block)
    free: OrderedDict[int, None] = OrderedDict((p, None) for p in range(1, num_gpu_blocks))
    hash_of: dict[int, int] = {}
    copies: dict[int, list[int]] = {}
    hits: list[int] = []
    rejected = evicted = inserted = 0
    for prompt, blocks in zip(prompts, chains, strict=True):
        ids = [c for c, _ in blocks]
        n = len(prompt)
        total = -(-n // block)
        cap = min(len(ids), max(n - 1, 0) // block)
        hit: list[int] = []
        while len(hit) < cap and copies.get(ids[len(hit)]):
            hit.append(copies[ids[len(hit)]][0])
        if total - len(hit) + sum(p in free for p in hit) > len(free):
            rejected += 1
            hits.append(0)
            continue
        hits.append(len(hit) * block)
        for p in hit:
            free.pop(p, None)
        owned = list(hit)
        for k in range(len(hit), total):
            p, _ = free.popitem(last=False)
            if p in hash_of:
                chain = hash_of.pop(p)
                copies[chain].remove(p)
                evicted += 1
            if k < len(ids):
                hash_of[p] = ids[k]
                copies.setdefault(ids[k], []).append(p)
                inserted += 1
            owned.append(p)
        order = owned[::-1]
        hashless = [p for p in order if p not in hash_of]
        for p in reversed(hashless):
            free[p] = None
            free.move_to_end(p, last=False)
        for p in order:
            if p in hash_of:
                free[p] = None
    return hits, rejected, evicted, inserted


def _exact(prompts: Sequence[Sequence[int]], block: int, num_gpu_blocks: int,
           namespaces: Sequence[int] | None = None):  # type: ignore[no-untyped-def]
    chains = chains_of(prompts, rules_for("vllm", block_size_tokens=block), namespaces)
    return replay_vllm(chains, num_gpu_blocks)


def _clean(prompts: Sequence[Sequence[int]], block: int, capacity: int) -> list[int]:
    rules = rules_for("vllm", block_size_tokens=block, capacity_blocks=capacity,
                      accounting="clean")
    return replay(chains_of(prompts, rules), rules).hit_tokens.tolist()


def _blocks(*values: int, block: int = 4) -> list[int]:
    """Full blocks of `block` equal tokens, one block per value."""
    return [v for v in values for _ in range(block)]


@pytest.mark.parametrize("seed", range(8))
def test_kernel_equals_the_reference_model_on_random_small_cases(seed: int) -> None:
    """Random prompts over a tiny vocabulary (much sharing), tiny pools, two namespaces: the
    kernel equals the plain-Python model written from vLLM 0.33.0's block_pool.py on hits,
    rejections, evictions and insertions."""
    rng = np.random.default_rng(seed)
    bases = [rng.integers(0, 2, size=int(rng.integers(4, 24))).tolist() for _ in range(4)]
    prompts = []
    for _ in range(60):
        base = bases[int(rng.integers(0, len(bases)))]
        tail = rng.integers(0, 3, size=int(rng.integers(0, 12))).tolist()
        prompts.append((base + tail)[: int(rng.integers(1, 36))])
    namespaces = rng.integers(0, 2, size=len(prompts)).tolist()
    for block in (2, 4):
        for num_gpu_blocks in (1, 2, 3, 5, 8, 13, 30, 400):
            want = reference_vllm(prompts, namespaces, block, num_gpu_blocks)
            got = _exact(prompts, block, num_gpu_blocks, namespaces)
            assert (got.hit_tokens.tolist(), got.rejected_requests, got.evicted_blocks,
                    got.inserted_blocks) == want, (block, num_gpu_blocks)


def test_the_null_block_leaves_n_minus_one_usable() -> None:
    """N = 3 holds 2 blocks (block 0 is vLLM's null block, block_pool.py): after a, b, c the
    block a is gone, where a clean cache of 3 blocks still has it (hand-checked)."""
    prompts = [_blocks(1), _blocks(2), _blocks(3), _blocks(1, 9)]
    assert _exact(prompts, 4, 3).hit_tokens.tolist() == [0, 0, 0, 0]
    assert _clean(prompts, 4, 3) == [0, 0, 0, 4]
    assert _clean(prompts, 4, 2) == [0, 0, 0, 0]


def test_a_partial_block_evicts_a_cached_block() -> None:
    """N = 4 (3 usable): a b cached, then c plus one token takes two blocks from the free
    queue, and the partial one evicts b, which a clean cache of 3 blocks keeps (hand-checked
    against vLLM's get_new_blocks / _maybe_evict_cached_block)."""
    prompts = [_blocks(1, 2), [*_blocks(3), 7], _blocks(1, 2, 5)]
    result = _exact(prompts, 4, 4)
    assert result.hit_tokens.tolist() == [0, 0, 4]
    assert _clean(prompts, 4, 3) == [0, 0, 8]


def test_a_freed_partial_block_goes_to_the_head_of_the_free_queue() -> None:
    """After c plus one token, the hashless partial block is prepended to the free queue
    (free_blocks in vLLM 0.33.0), so the next miss reuses it instead of evicting a; before
    vLLM PR #42656 it was appended and a would be lost (hand-checked)."""
    prompts = [_blocks(1, 2), [*_blocks(3), 7], _blocks(4), _blocks(1, 6)]
    result = _exact(prompts, 4, 4)
    assert result.hit_tokens.tolist() == [0, 0, 0, 4]
    assert result.evicted_blocks == 2  # b by the partial block, c by the last request


def test_a_recomputed_last_block_is_a_second_copy() -> None:
    """A prompt that is a multiple of B and fully cached recomputes its last block (the
    last-token rule); vLLM does not deduplicate, so b gets a second physical copy
    (BlockHashToBlockMap.insert). Evicting the first copy leaves the second: a b c still hits
    a and b (hand-checked; a deduplicating pool would lose b)."""
    prompts = [_blocks(1, 2), _blocks(1, 2), _blocks(8, 9), _blocks(1, 2, 3)]
    result = _exact(prompts, 4, 5)
    assert result.hit_tokens.tolist() == [0, 4, 0, 8]
    assert result.inserted_blocks == 6  # a, b, b's copy, x, y, c
    assert result.evicted_blocks == 2  # b's first copy, then y


def test_a_request_larger_than_the_pool_is_rejected_untouched() -> None:
    """N = 4 (3 usable): a prompt of 4 blocks cannot be allocated (allocate_slots returns
    None), its hit counts as 0 and it touches nothing, so the next request still hits a
    (hand-checked)."""
    prompts = [_blocks(1, 2, 3), [*_blocks(1, 2, 3), 7], _blocks(1, 2)]
    result = _exact(prompts, 4, 4)
    assert result.hit_tokens.tolist() == [0, 0, 4]
    assert result.rejected_requests == 1
    assert _clean(prompts, 4, 4) == [0, 12, 4]


def test_a_pool_below_one_block_is_a_config_error() -> None:
    chains = chains_of([_blocks(1)], rules_for("vllm", block_size_tokens=4))
    with pytest.raises(ConfigError, match="at least 1 block"):
        replay_vllm(chains, 0)


@lru_cache(maxsize=8)
def _trace_chains(name: str, block: int) -> BlockChains:
    prepared = prepare(read_trace(DATA / name))
    return prepared.chains(rules_for("vllm", block_size_tokens=block))


def _golden_cases() -> list[tuple[str, int, int, list[int], list[int]]]:
    cases = []
    for path in GOLDEN:
        doc = json.loads(path.read_text())
        assert doc["engine"] == "vllm"
        cases.extend((doc["trace"], c["block_size_tokens"], c["num_gpu_blocks"],
                      c["hit_tokens"], c["rejected"]) for c in doc["configs"])
    return cases


def test_the_golden_fixtures_are_there() -> None:
    """Both engine traces, tight (some rejected) to ample pools, B = 16 and 32."""
    cases = _golden_cases()
    assert {c[0] for c in cases} == {"trace_mixed.parquet", "trace_sessions.parquet"}
    assert {c[1] for c in cases} == {16, 32}
    assert any(c[4] for c in cases)


@pytest.mark.parametrize(("trace", "block", "num_gpu_blocks", "hit_tokens", "rejected"),
                         _golden_cases(),
                         ids=lambda v: v if isinstance(v, str | int) else "")
def test_equals_vllm_on_every_request(trace: str, block: int, num_gpu_blocks: int,
                                      hit_tokens: list[int], rejected: list[int]) -> None:
    """Per request, the hits vLLM 0.33.0's KVCacheManager (kv_cache_manager.py, driven by
    benchmarks/engines/golden_vllm.py) reported with num_gpu_blocks = N, and its rejections."""
    result = replay_vllm(_trace_chains(trace, block), num_gpu_blocks)
    assert result.hit_tokens.tolist() == hit_tokens
    assert result.rejected_requests == len(rejected)


@pytest.mark.parametrize("trace", ["trace_mixed.parquet", "trace_sessions.parquet"])
def test_an_ample_pool_equals_the_clean_unlimited_replay(trace: str) -> None:
    """With more blocks than the trace ever allocates nothing is evicted, and the engine-exact
    replay equals the clean unlimited `replay()` on every request (spec §5: at unlimited
    capacity the accountings agree)."""
    chains = _trace_chains(trace, 16)
    ample = int((-(-chains.prompt_tokens // 16)).sum()) + 2
    exact = replay_vllm(chains, ample)
    clean = replay(chains, rules_for("vllm"))
    assert exact.hit_tokens.tolist() == clean.hit_tokens.tolist()
    assert exact.evicted_blocks == 0
    assert exact.rejected_requests == 0
