"""SGLang's HiCache compiled: the rules of `sglang.py` in one numba loop.

The same host and storage tiers, request by request (`sglang.py` has the rules, their sources
and what they assume; `tests/prefix/test_tiers.py` checks this kernel against that Python
model). Each tier is an LRU list threaded through a row per key (`lru_rows.py`); the row's last
column is the page's hit count.
"""

from __future__ import annotations

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.lru_rows import (
    LOADED,
    chunk_key,
    held,
    insert,
    lru_state,
    most_chunks,
    outcome,
    pass_ids,
    refcount_free,
    rows,
    touch,
)
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions


@refcount_free
def _pass(offsets, ids, max_hit_blocks, gpu_hit_blocks, refused, per_chunk, chunk, block,
          capacity, threshold, back_up, load_back_min, prefetch_min, st, evictions, ends, size,
          counters, hits, backed):  # pragma: no cover - compiled
    """Fills the hit tokens per tier (host first) and request and the tiers' counters;
    `backed` is a request's room (the pages it backs up)."""
    n = offsets.size - 1
    tiers = capacity.size
    uses = 4 * tiers  # the hit count's column
    for i in range(n):
        if refused[i]:
            continue
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        cap_chunks = max_hit_blocks[i] // per_chunk
        g = gpu_hit_blocks[i] * block
        first = (g + chunk - 1) // chunk
        j = first
        while j < cap_chunks and held(st, 0, chunk_key(ids, start, per_chunk, j)):
            j += 1
        loaded = j * chunk - g if j > first else 0
        if loaded < load_back_min:
            j = first
            loaded = 0
        hits[0, i] = loaded
        counters[0, LOADED] += j - first
        for k in range(min(j, chunks) - 1, first - 1, -1):
            touch(st, ends, 0, chunk_key(ids, start, per_chunk, k), i)
        # Storage: the pages past GPU and host, prefetched into the host when long enough.
        s_end = j
        for t in range(1, tiers):
            k = s_end
            while k < cap_chunks and held(st, t, chunk_key(ids, start, per_chunk, k)):
                k += 1
            if (k - s_end) * chunk >= prefetch_min:
                hits[t, i] = (k - s_end) * chunk
                counters[t, LOADED] += k - s_end
                for m in range(s_end, k):
                    touch(st, ends, t, chunk_key(ids, start, per_chunk, m), i)
                s_end = k
        # Backups after the prefill, tail to head so the head ends most recent.
        nbacked = 0
        gpu_chunks = g // chunk
        for k in range(chunks - 1, -1, -1):
            key = chunk_key(ids, start, per_chunk, k)
            # A page neither on the GPU nor on the host is a new node, counted from one.
            count = st[key, uses] + 1 if k < gpu_chunks or first <= k < j else 1
            st[key, uses] = count
            if not back_up:
                continue
            if held(st, 0, key):
                touch(st, ends, 0, key, i)
            elif count >= threshold:
                insert(st, ends, size, capacity, counters, evictions, 0, key, i)
            else:
                continue
            backed[nbacked] = key
            nbacked += 1
        for t in range(1, tiers):  # a page already stored is refreshed (`HiCacheFile.set`)
            for b in range(nbacked):
                if held(st, t, backed[b]):
                    touch(st, ends, t, backed[b], i)
                else:
                    insert(st, ends, size, capacity, counters, evictions, t, backed[b], i)


def hicache_pass(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                 capacity_chunks: tuple[int, ...], chunk_tokens: int, threshold: int,
                 back_up: bool, load_back_min_tokens: int, prefetch_min_tokens: int
                 ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                            tuple[TierEvictions, ...]]:
    """Hit tokens per tier (the host's capacity first), their counters and evictions; a page
    is backed up at `threshold` hits (never when not `back_up`)."""
    offsets = np.asarray(chains.offsets, dtype=np.int64)
    block = int(chains.block_size_tokens)
    per_chunk = chunk_tokens // block
    st, evictions = rows(int(chains.num_distinct), len(capacity_chunks), 1,
                         int(offsets[-1]) // per_chunk)
    ends, size, counters, hits = lru_state(len(capacity_chunks), offsets.size - 1)
    _pass(offsets, pass_ids(chains.ids),
          np.asarray(chains.max_hit_blocks, dtype=np.int64),
          np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
          np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
          np.asarray(capacity_chunks, dtype=np.int64), np.int64(threshold), back_up,
          np.int64(load_back_min_tokens), np.int64(prefetch_min_tokens), st, evictions, ends,
          size, counters, hits, np.empty(most_chunks(offsets, per_chunk), dtype=np.int64))
    out_counters, out_evictions = outcome(counters, evictions)
    return tuple(h.copy() for h in hits), out_counters, out_evictions
