"""SGLang 0.5's hierarchical cache (HiCache) behind its GPU radix tree, request by request.

The rules (kv-tiers.md §3; `mem_cache/unified_radix_cache.py`, `unified_cache/
unified_tree_core.py`, `components/full.py`, `hybrid_cache/hybrid_cache_controller.py`):

- Pages of the chunk's tokens (one GPU page by default), keyed by their prefix.
- GPU → host: `write_through` backs a page up when it is inserted (hit count 1),
  `write_through_selective` at its second insert (hit count 2), `write_back` only when the GPU
  evicts it. A hit count lives on the radix node (`_inc_hit_count_and_check`): a page that was
  neither on the GPU nor on the host is a new node and counts from one again.
- The host tier is inclusive (a page still on the GPU keeps its host copy) and evicts
  host-only leaves least recently used first; a lookup refreshes the whole matched path.
- Lookup: the GPU prefix, then the host's continuation; it is loaded back only when it holds
  at least 10 tokens (`load_back_threshold`); the last-token rule caps it as it caps the GPU.
- Storage (disk or remote): every host backup is written on (a page already stored is
  refreshed, as `HiCacheFile.set` does); a request prefetches the pages past GPU and host when
  they are at least 256 tokens (`prefetch_threshold`), into the host.

Where it runs: SGLang's own finite pool replays HiCache, storage included, as its one tree
(`sglang_tree.py`, exact against SGLang 0.5.23); this pass runs elsewhere (another accounting,
an unlimited pool, a chunk of several pages). Its storage leaves out what the tree has: a
prefetch needs the host to make room for it and a backed-up node to hang from, and what it
fetches enters the host.
What it assumes: the host is an LRU over pages by last use, touched tail to head (leaves go
first), of which the pages on the GPU are the most recent, so inclusion holds by itself when
the host is at least as large as the GPU pool (SGLang's default `--hicache-ratio 2`); under
`write_back` the GPU and host together hold the most recent pages (an LRU of both sizes, the
host serving what the GPU pool lost). Storage evicts least recently written first. Against
SGLang's own pool this pass was optimistic by up to 42 % of reused tokens with a host no larger
than the GPU pool (SGLang refuses backups the host cannot make room for, evicts whole leaves,
and its load-backs move GPU hits: docs/replay.md, "SGLang HiCache").
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions
from yaotu_trace.prefix.tiers.spec import (
    SGLANG_LOAD_BACK_MIN_TOKENS,
    SGLANG_PREFETCH_MIN_TOKENS,
    TierPolicy,
    TierSpec,
)


class PageLru:
    """An LRU of page keys (last = most recent) with the tier's counters: the approximate
    pass's tiers, and the storage below the one tree (`sglang_tree.py`)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: OrderedDict[int, int] = OrderedDict()  # key -> request that used it last
        self.stored = self.evicted = self.loaded = 0
        self.now = -1  # the request being replayed
        self.records: list[tuple[int, int, int]] = []  # (key, evicting request, last use)

    def use(self, key: int) -> None:
        """Refresh, or insert as most recent (evicting the least recent when full)."""
        if key in self.keys:
            self.refresh(key)
            return
        if len(self.keys) >= self.capacity:
            gone, last = self.keys.popitem(last=False)
            self.records.append((gone, self.now, last))
            self.evicted += 1
        self.keys[key] = self.now
        self.stored += 1

    def refresh(self, key: int) -> None:
        """Most recent, used by the request being replayed."""
        self.keys.move_to_end(key)
        self.keys[key] = self.now

    def counters(self) -> TierCounters:
        return TierCounters(stored_chunks=self.stored, evicted_chunks=self.evicted,
                            failed_stores=0, loaded_chunks=self.loaded)


def replay_hicache_tiers(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                         tiers: tuple[TierSpec, ...], policy: TierPolicy,
                         gpu_capacity_blocks: int | None = None,
                         ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                    tuple[TierEvictions, ...]]:
    """Hit tokens per tier (host first, then storage), the tiers' counters and evictions
    under HiCache's `policy` (`write_through`, `write_through_selective` or `write_back`):
    the compiled pass (`sglang_kernel.py`) of the rules `replay_hicache_model` states."""
    from yaotu_trace.prefix.tiers.sglang_kernel import hicache_pass

    per_chunk = int(tiers[0].chunk_tokens) // int(chains.block_size_tokens)
    host_capacity = int(tiers[0].capacity_chunks)
    if policy is TierPolicy.SGLANG_WRITE_BACK and gpu_capacity_blocks is not None:
        host_capacity += gpu_capacity_blocks // per_chunk  # the host serves what the GPU lost
    return hicache_pass(
        chains, gpu_hit_blocks, refused,
        (host_capacity, *(int(t.capacity_chunks) for t in tiers[1:])),
        int(tiers[0].chunk_tokens), 2 if policy is TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE else 1,
        not (policy is TierPolicy.SGLANG_WRITE_BACK and gpu_capacity_blocks is None),
        SGLANG_LOAD_BACK_MIN_TOKENS, SGLANG_PREFETCH_MIN_TOKENS)


def replay_hicache_model(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                         tiers: tuple[TierSpec, ...], policy: TierPolicy,
                         gpu_capacity_blocks: int | None = None,
                         ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                    tuple[TierEvictions, ...]]:
    """`replay_hicache_tiers` in Python, rule by rule: the reference its kernel is held to."""
    block = int(chains.block_size_tokens)
    chunk = int(tiers[0].chunk_tokens)
    per_chunk = chunk // block
    host_capacity = int(tiers[0].capacity_chunks)
    if policy is TierPolicy.SGLANG_WRITE_BACK:
        # The GPU pool and the host together: the host serves the pages the pool evicted.
        gpu_chunks = 0 if gpu_capacity_blocks is None else gpu_capacity_blocks // per_chunk
        host_capacity += gpu_chunks if gpu_capacity_blocks is not None else 0
    host = PageLru(host_capacity)
    storage = [PageLru(int(t.capacity_chunks)) for t in tiers[1:]]
    uses: dict[int, int] = {}
    threshold = 2 if policy is TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE else 1
    write_back_unlimited_gpu = (policy is TierPolicy.SGLANG_WRITE_BACK
                                and gpu_capacity_blocks is None)
    offsets = chains.offsets
    ids = chains.ids
    n = chains.num_requests
    hits = [np.zeros(n, dtype=np.int64) for _ in tiers]
    for i in range(n):
        if refused[i]:
            continue
        for tier_lru in (host, *storage):
            tier_lru.now = i
        start = int(offsets[i])
        chunks = (int(offsets[i + 1]) - start) // per_chunk
        keys = ids[start + per_chunk - 1: start + chunks * per_chunk: per_chunk].tolist()
        cap_chunks = int(chains.max_hit_blocks[i]) // per_chunk
        g = int(gpu_hit_blocks[i]) * block
        first = -(-g // chunk)
        j = first
        while j < cap_chunks and keys[j] in host.keys:
            j += 1
        loaded = j * chunk - g if j > first else 0
        if loaded < SGLANG_LOAD_BACK_MIN_TOKENS:
            j = first
            loaded = 0
        hits[0][i] = loaded
        host.loaded += j - first
        for k in range(min(j, chunks) - 1, first - 1, -1):
            host.refresh(keys[k])
        # Storage: the pages past GPU and host, prefetched into the host when long enough.
        s_end = j
        for t, tier in enumerate(storage):
            k = s_end
            while k < cap_chunks and keys[k] in tier.keys:
                k += 1
            if (k - s_end) * chunk >= SGLANG_PREFETCH_MIN_TOKENS:
                hits[t + 1][i] = (k - s_end) * chunk
                tier.loaded += k - s_end
                for m in range(s_end, k):
                    tier.refresh(keys[m])
                s_end = k
        # Backups after the prefill: the host (and storage behind it) take the pages whose use
        # count reaches the policy's threshold, tail to head so the head ends most recent.
        backed: list[int] = []
        gpu_chunks = g // chunk
        for k in range(chunks - 1, -1, -1):
            key = keys[k]
            # A node's hit count lives while it is in the tree: a page that was neither on
            # the GPU nor on the host is a new node, counted from one again.
            count = uses.get(key, 0) + 1 if k < gpu_chunks or first <= k < j else 1
            uses[key] = count
            if write_back_unlimited_gpu:
                continue
            if count >= threshold or key in host.keys:
                host.use(key)
                backed.append(key)
        for tier in storage:
            for key in backed:
                tier.use(key)
    return (tuple(hits), (host.counters(), *(t.counters() for t in storage)),
            tuple(TierEvictions.of(t.records) for t in (host, *storage)))

