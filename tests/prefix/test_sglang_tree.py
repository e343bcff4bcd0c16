"""SGLang's one tree of GPU and host KV (`prefix/tiers/sglang_tree.py`) on hand-checked cases,
and its compiled pass (`sglang_tree_kernel.py`) against the Python tree on random traces.

SGLang itself is held in `test_tiers_sglang_golden.py` (135 recorded configurations)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import chains_of

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers
from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions
from yaotu_trace.prefix.tiers.sglang_tree import PrefillOutOfMemory, replay_hicache_tree
from yaotu_trace.prefix.tiers.spec import SGLANG_PREFETCH_MIN_TOKENS

A = list(range(1, 13))  # 12 tokens
B = list(range(101, 113))
# What `replay_hicache_tree` returns: GPU hits, hits per tier, counters and evictions per tier.
_Outcome = tuple[np.ndarray, tuple[np.ndarray, ...], tuple[TierCounters, ...],
                 tuple[TierEvictions, ...]]


def _host(tokens: int, page: int = 1) -> TierSpec:
    return TierSpec(name=TierName.CPU, capacity_chunks=tokens // page, chunk_tokens=page)


@pytest.mark.parametrize("policy", [TierPolicy.SGLANG_WRITE_THROUGH,
                                    TierPolicy.SGLANG_WRITE_BACK])
def test_the_host_serves_what_the_gpu_pool_evicted_and_its_load_back_evicts_in_turn(
        policy: TierPolicy) -> None:
    # GIVEN SGLang's pool of 16 one-token pages behind a 32-token host, and A, B, A, B of 12
    # tokens each: every request evicts the other prompt from the GPU pool
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=16)
    chains = chains_of([A, B, A, B], rules)
    # WHEN the tree replays them
    result = replay_tiers(chains, rules, (_host(32),), policy)
    # THEN the GPU pool alone hits nothing, and the host serves A's and B's first 11 tokens
    # (the last-token rule caps the lookup) on their second turns: B's arrival demoted A to
    # the host (write-through copied it at insert; write-back copies it at eviction), and A's
    # load-back of 11 tokens into 4 free ones demotes B in turn
    assert gpu_replay(chains, rules).hit_tokens.tolist() == [0, 0, 0, 0]
    assert result.gpu_hit_tokens.tolist() == [0, 0, 0, 0]
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 11, 11]
    assert result.counters[0].loaded_chunks == 22


def test_a_host_continuation_under_ten_tokens_is_recomputed() -> None:
    # GIVEN the same, with prompts of 9 tokens: the host holds 8 tokens of each past the cap
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=10)
    chains = chains_of([A[:9], B[:9], A[:9]], rules)
    # WHEN the tree replays them
    result = replay_tiers(chains, rules, (_host(32),), TierPolicy.SGLANG_WRITE_THROUGH)
    # THEN A's 8 host tokens are below SGLang's load_back_threshold of 10: recomputed
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 0]


def test_write_through_selective_backs_up_a_prefix_only_on_its_second_insert() -> None:
    # GIVEN A twice and then B, which evicts A, then A: under write_through_selective A's node
    # reaches hit count 2 on its second insert and is backed up then
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=16)
    once = chains_of([A, B, A], rules)
    twice = chains_of([A, A, B, A], rules)
    policy = TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE
    # WHEN the tree replays both
    # THEN A seen once is gone with the GPU copy (no backup), A seen twice comes back from the
    # host
    assert replay_tiers(once, rules, (_host(32),), policy).tier_hit_tokens[0].tolist() == [
        0, 0, 0]
    result = replay_tiers(twice, rules, (_host(32),), policy)
    assert result.gpu_hit_tokens.tolist() == [0, 11, 0, 0]
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 0, 11]


def test_write_back_drops_a_leaf_the_host_cannot_take() -> None:
    # GIVEN a host of 8 tokens, smaller than any prompt: write_back's backup at eviction fails
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=16)
    chains = chains_of([A, B, A], rules)
    # WHEN the tree replays A, B, A
    result = replay_tiers(chains, rules, (_host(8),), TierPolicy.SGLANG_WRITE_BACK)
    # THEN A is dropped without a backup ("due to host memory pressure"): nothing to load
    assert result.tier_hit_tokens[0].tolist() == [0, 0, 0]
    assert result.counters[0].stored_chunks == 0
    # and both failed backups (A's at B's arrival, B's at A's return) are counted
    assert result.counters[0].failed_stores == 2


C, D, E = (list(range(base, base + 300)) for base in (1000, 2000, 3000))  # 300 tokens each


@pytest.mark.parametrize(("prompts", "host_tokens", "store_pages", "fetched"), [
    # C fell out of the host (E's backup evicted it); the host makes room by evicting D
    ([C, D, E, C], 600, 1200, 299),
    # the same, but the store's LRU has dropped C's pages for E's
    ([C, D, E, C], 600, 600, 0),
    # the host holds D on the GPU too and cannot make room: nothing is fetched
    ([C, D, C], 300, 1200, 0),
    # fewer than 256 tokens past the match: SGLang does not prefetch
    ([C[:200], D[:200], E[:200], C[:200]], 400, 1200, 0),
])
def test_storage_serves_what_fell_out_of_the_host_when_the_host_has_room(
        prompts: list[list[int]], host_tokens: int, store_pages: int, fetched: int) -> None:
    # GIVEN SGLang's pool of 300 one-token pages (each prompt evicts the one before it from
    # the GPU), a host and a store below it, under write_through
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=300)
    chains = chains_of(prompts, rules)
    store = TierSpec(name=TierName.DISK, capacity_chunks=store_pages, chunk_tokens=1)
    # WHEN the tree replays them
    result = replay_tiers(chains, rules, (_host(host_tokens), store),
                          TierPolicy.SGLANG_WRITE_THROUGH)
    # THEN C's return is served from storage (its first n - 1 tokens, fetched into the host
    # and loaded back with it) only when the store still has it, it is 256 tokens or more,
    # and the host can make room; SGLang counts those tokens as storage hits, not host hits
    assert result.tier_hit_tokens[1].tolist() == [0] * (len(prompts) - 1) + [fetched]
    assert result.gpu_hit_tokens.sum() == result.tier_hit_tokens[0].sum() == 0
    assert result.counters[1].loaded_chunks == fetched
    # and the host's books balance: what it took in (backups and the pages fetched from the
    # store alike, as vLLM counts a promotion) less what it dropped is what it holds
    host = result.counters[0]
    held = host.stored_chunks - host.evicted_chunks
    assert fetched <= held <= host_tokens
    if fetched:  # E's 300 pages and C's (299 fetched, its last one backed up): full
        assert held == host_tokens


@pytest.mark.parametrize("compiled", [True, False])
def test_a_page_read_from_storage_was_last_used_by_the_request_that_read_it(
        compiled: bool) -> None:
    # GIVEN a store of 900 one-token pages filled by C, D, E; C returns and is read from the
    # store (request 3); F, G and H then write 300 new pages each, so the store drops D, E and
    # at last C
    F, G, H = (list(range(base, base + 300)) for base in (4000, 5000, 6000))
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=300)
    chains = chains_of([C, D, E, C, F, G, H], rules)
    store = TierSpec(name=TierName.DISK, capacity_chunks=900, chunk_tokens=1)
    refused = refused_requests(chains, rules)
    # WHEN the tree replays them
    _, hits, _, evictions = replay_hicache_tree(chains, refused, (_host(600), store),
                                                TierPolicy.SGLANG_WRITE_THROUGH, 300,
                                                compiled=compiled)
    assert hits[1].tolist() == [0, 0, 0, 299, 0, 0, 0]
    # THEN C's pages leave the store at H's writes, last used by request 3, which read them
    # (its last page, recomputed and written again, too)
    c_keys = set(chains.ids[chains.offsets[0]:chains.offsets[1]].tolist())
    dropped = evictions[1]
    of_c = np.isin(dropped.key, list(c_keys))
    assert of_c.sum() == 300
    assert set(dropped.request[of_c].tolist()) == {6}
    assert set(dropped.last_use_request[of_c].tolist()) == {3}


def test_sglang_has_one_storage_backend() -> None:
    # GIVEN SGLang's own pool with a disk and a remote tier below its host
    rules = rules_for("sglang", block_size_tokens=1, capacity_blocks=300)
    chains = chains_of([C, D], rules)
    tiers = (_host(600), TierSpec(name=TierName.DISK, capacity_chunks=900, chunk_tokens=1),
             TierSpec(name=TierName.REMOTE, capacity_chunks=900, chunk_tokens=1))
    # WHEN the tree is asked to replay them THEN it refuses in one line: HiCache attaches one
    # storage backend (`--hicache-storage-backend`)
    with pytest.raises(ConfigError, match="one storage backend") as caught:
        replay_tiers(chains, rules, tiers, TierPolicy.SGLANG_WRITE_THROUGH)
    assert "\n" not in str(caught.value)


def _random_chains(seed: int, page: int, pool_pages: int,  # type: ignore[no-untyped-def]
                   document_tokens: int = 120, documents: int = 5, requests: int = 400):
    rng = np.random.default_rng(seed)
    texts = [rng.integers(0, 3, size=document_tokens).tolist() for _ in range(documents)]
    prompts = [texts[int(rng.integers(0, documents))][:int(rng.integers(0, document_tokens))]
               + rng.integers(0, 3, size=int(rng.integers(1, 30))).tolist()
               for _ in range(requests)]
    tenants = rng.integers(0, 2, size=len(prompts)).tolist()
    rules = rules_for("sglang", block_size_tokens=page, capacity_blocks=pool_pages)
    return chains_of(prompts, rules, tenants), rules


@pytest.mark.parametrize("policy", list(TierPolicy)[2:])
@pytest.mark.parametrize(("seed", "page", "pool_pages", "host_pages"), [
    (1, 1, 160, 320), (2, 1, 150, 100), (3, 4, 40, 40), (4, 4, 36, 30), (5, 2, 90, 400),
])
def test_the_compiled_tree_equals_the_python_tree(policy: TierPolicy, seed: int, page: int,
                                                  pool_pages: int, host_pages: int) -> None:
    # GIVEN random prompts over shared documents, two tenants, pools small enough to evict
    # (some prompts refused), hosts from smaller than the pool to larger
    chains, rules = _random_chains(seed, page, pool_pages)
    refused = refused_requests(chains, rules)
    host = (_host(host_pages * page, page),)
    # WHEN the compiled pass and the Python tree replay them
    compiled = replay_hicache_tree(chains, refused, host, policy, pool_pages)
    python = replay_hicache_tree(chains, refused, host, policy, pool_pages, compiled=False)
    # THEN every request's GPU and host hits, the counters and every eviction agree
    _assert_the_same_outcome(compiled, python)
    assert compiled[1][0].sum() > 0


@pytest.mark.parametrize("policy", list(TierPolicy)[2:])
@pytest.mark.parametrize(("seed", "page", "pool_pages", "host_pages", "store_pages"), [
    (1, 1, 800, 600, 1000), (2, 1, 1000, 900, 100_000), (4, 4, 250, 300, 1000),
    (5, 2, 450, 300, 700), (6, 2, 450, 200, 100),
    # hosts a little larger than the pool: write_back runs the whole trace there
    (1, 1, 800, 850, 1000), (5, 2, 450, 500, 700), (2, 1, 1000, 1100, 100_000),
])
def test_the_compiled_tree_equals_the_python_tree_with_storage(
        policy: TierPolicy, seed: int, page: int, pool_pages: int, host_pages: int,
        store_pages: int) -> None:
    # GIVEN prompts over shared documents long enough to prefetch (256 tokens), hosts that
    # cannot keep them all, and stores from too small to serve one prefetch to never full
    chains, rules = _random_chains(seed, page, pool_pages, document_tokens=700, documents=6,
                                   requests=300)
    refused = refused_requests(chains, rules)
    tiers = (_host(host_pages * page, page),
             TierSpec(name=TierName.DISK, capacity_chunks=store_pages, chunk_tokens=page))
    # WHEN the compiled pass and the Python tree replay them
    stops = [_stop(chains, refused, tiers, policy, pool_pages, compiled=c) for c in (True, False)]
    # THEN both stop at the same request, if at all: only under write_back, where a leaf the
    # host cannot back up may stay (SGLang's "Prefill out of memory",
    # `test_tiers_sglang_golden.py`)
    assert stops[0] == stops[1]
    assert stops[0] is None or policy is TierPolicy.SGLANG_WRITE_BACK
    if stops[0] is not None:  # the requests before the stop, replayed alone
        refused = refused | (np.arange(chains.num_requests) >= stops[0])
    compiled = replay_hicache_tree(chains, refused, tiers, policy, pool_pages)
    python = replay_hicache_tree(chains, refused, tiers, policy, pool_pages, compiled=False)
    # AND every request's GPU, host and storage hits, both tiers' counters and every eviction
    # agree
    _assert_the_same_outcome(compiled, python)
    # and storage serves whenever it can hold a prefetch, and evicts unless it is the largest
    if stops[0] is None:
        can_serve = store_pages * page >= SGLANG_PREFETCH_MIN_TOKENS
        assert (compiled[1][1].sum() > 0) == can_serve
        assert (compiled[2][1].evicted_chunks > 0) == (store_pages < 100_000)


def _stop(chains: BlockChains, refused: np.ndarray, tiers: tuple[TierSpec, ...],
          policy: TierPolicy, pool_pages: int, *, compiled: bool) -> int | None:
    """The request the tree stops at (SGLang out of memory), or None."""
    try:
        replay_hicache_tree(chains, refused, tiers, policy, pool_pages, compiled=compiled)
    except PrefillOutOfMemory as stopped:
        return stopped.request
    return None


def _assert_the_same_outcome(compiled: _Outcome, python: _Outcome) -> None:
    assert compiled[0].tolist() == python[0].tolist()
    assert [h.tolist() for h in compiled[1]] == [h.tolist() for h in python[1]]
    assert compiled[2] == python[2]
    for mine, theirs in zip(compiled[3], python[3], strict=True):
        assert mine.key.tolist() == theirs.key.tolist()
        assert mine.request.tolist() == theirs.request.tolist()
        assert mine.last_use_request.tolist() == theirs.last_use_request.tolist()


@pytest.mark.parametrize("policy", list(TierPolicy)[2:])
@pytest.mark.parametrize(("seed", "page", "pool_pages", "host_pages"), [
    (1, 1, 300, 200), (2, 2, 200, 150), (3, 1, 500, 1500),
])
def test_the_hosts_books_balance_under_every_policy(policy: TierPolicy, seed: int, page: int,
                                                    pool_pages: int, host_pages: int) -> None:
    # GIVEN random prompts over shared documents and a host that fills
    from yaotu_trace.prefix.tiers.sglang_tree import HiCacheTree

    chains, rules = _random_chains(seed, page, pool_pages)
    refused = refused_requests(chains, rules)
    tree = HiCacheTree(chains.ids, page, pool_pages, host_pages, policy, None)
    # WHEN the tree replays them, and the compiled pass too
    for i in range(chains.num_requests):
        if not refused[i]:
            tree.now = i
            start = int(chains.offsets[i])
            tree.request(start, int(chains.offsets[i + 1]) - start,
                         int(chains.max_hit_blocks[i]), int(chains.prompt_tokens[i]))
    _, _, (counters,), _ = replay_hicache_tree(chains, refused, (_host(host_pages * page, page),),
                                               policy, pool_pages)
    # THEN what the host took in less what it evicted and released is what it holds (write_back
    # releases the host copies of nodes also on the GPU: nothing is lost, nothing evicted), and
    # the compiled pass counts the same
    held = host_pages - tree.host_free
    assert tree.stored - tree.evicted - tree.released == held
    assert (counters.stored_chunks, counters.evicted_chunks, counters.released_chunks) == (
        tree.stored, tree.evicted, tree.released)
    assert (tree.released > 0) == (policy is TierPolicy.SGLANG_WRITE_BACK)
