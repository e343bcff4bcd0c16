"""`--eviction optimal`: Belady's MIN over block touches, the upper bound of every eviction policy.

When the cache is over its capacity, the block that leaves is the cached one whose next use is
farthest in the future (never used again: infinitely far). Offline, so it sees the whole trace;
no engine can run it, but it says how much of a finite cache's loss a better eviction policy
could still win back.

**The model it is the optimum of.** Demand caching, as the other policies replay it: a request
looks up the leading run of its cached blocks (capped, spec §3), then touches its blocks, each
cached when touched (a missing one is inserted, evicting some other block when full); the
cache holds at most C blocks. Hits count at lookups only, so a *use* of a block is a later
lookup that can hit it: a prompt block below the request's hit cap. A touch that cannot hit (an
output block under `--cache-outputs`, the last block the last-token rule recomputes) inserts the
block but protects nothing; the later prompt that reads it back is its use. Next use is counted
in requests (`_next_uses`: the next request whose lookup can hit the block), not in touches.
Within one request no lookup sees the cache, so all that matters is the set the request leaves
behind: any C of the cached and touched blocks that include the block touched last (it is cached
when touched, and nothing comes after). MIN keeps the C with the nearest next uses, the last
touched one included.

**Chained ids.** A block's id is its whole prefix, so any request that uses block k uses blocks
1..k-1 too: `next_use(parent) <= next_use(child)`. Ties go to the deeper block, so a parent never
leaves before its cached child and the cache stays prefix-closed: at a lookup, the request's
cached blocks are a leading run and its hit blocks are its cached usable blocks, the quantity
MIN maximises. Touched last first (tail-first) the block that must stay is block 1, which keeps
the cache closed; head-first it is the request's deepest block, which MIN evicts next when its
parent did not stay (it cannot hit without it).

**Where it is exact.** Tail-first, when no request has more blocks than the cache, its hit
blocks equal the optimum of the model, and so do its hit tokens when every block is B tokens:
`tests/prefix/test_optimal.py` checks this against an exhaustive search of every eviction
choice, with the last-token rule, partial blocks and outputs. Head-first it can fall short
even then: the deepest block must stay, and when its parent has the farthest next use MIN
drops the parent, leaving the deepest block of no use, where dropping a nearer block would
have kept both (a hand-checked case there: 5 blocks against 6). A request
longer than the cache forces what it leaves behind, and a cleverer schedule can then do slightly
better (by letting a later touch that cannot hit bring a block back); there it is a close bound,
which the tests check is never below LRU, FIFO or LFU on random traces at every capacity. A
cached partial block (`--cache-partial-blocks`, the mooncake preset) is worth fewer tokens than
a full one and MIN does not weigh blocks: there it is optimal in hit blocks, and another policy
can hit more *tokens* (keeping a full block where MIN kept a shorter partial one); the
waterfall's policy step is then a gain.

**Caches.** One global cache, or one per instance when every request's instance is known before
the replay (the trace's column, round-robin, random, least-loaded): each instance's requests
are replayed through its own cache with its own future. Prefix-affinity routes by the cache
contents, which depend on the policy, so `rules.py` refuses that combination.

**Cost.** Next uses in one compiled reverse pass over the touches, then O(log n) per touch: a
max-heap keyed by (next use, depth) with lazy deletion (an entry is live while its key is the
block's current key), compacted when it reaches twice the cache size plus one request.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace._lists import heap_pop, heap_push
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import BlockChains


def optimal_replay(chains: BlockChains, codes: np.ndarray, num_caches: int, capacity: int,
                   head_first: bool) -> tuple[np.ndarray, int, int]:
    """Belady replay of `chains`; request i uses cache `codes[i]` of `num_caches`, each of
    `capacity` blocks (< 0: unlimited). Returns (hit_blocks, evicted, inserted)."""
    out_offsets = chains.output_offsets
    out_ids = chains.output_ids
    if out_offsets is None or out_ids is None:
        out_offsets = np.zeros(chains.num_requests + 1, dtype=np.int64)
        out_ids = np.zeros(0, dtype=np.int32)
    d = max(chains.num_distinct, 1)
    nodes = num_caches * d
    touches = len(chains.ids) + len(out_ids)
    depth = int(max(np.diff(chains.offsets).max(initial=0)
                    + np.diff(out_offsets).max(initial=0), 1)) + 1
    memory.require(nodes * 14 + touches * 4 + 32 * min(nodes, max(capacity, 0) + depth),
                   f"an optimal-eviction replay of {touches:,} block touches",
                   "use fewer instances or a larger --block-size")
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    n = chains.num_requests
    # The kernels' arrays are made here: one allocated in compiled code compiles numba's own
    # `np.full` or `np.zeros` with it on a first run (docs/performance.md, "First runs that
    # compile").
    use_p = np.empty(len(chains.ids), dtype=np.int32)
    use_o = np.empty(len(out_ids), dtype=np.int32)
    _next_uses(chains.offsets, chains.ids, chains.max_hit_blocks, out_offsets, out_ids, codes,
               np.int64(d), np.full(nodes, n, dtype=np.int32), use_p, use_o)
    order = np.argsort(codes, kind="stable").astype(np.int64)
    limit = nodes + 1 if capacity < 0 else min(capacity, nodes + 1)
    # Heap room when the caches are bounded: every cached block and one request's, twice.
    heap_len = (min(nodes, limit) + depth) * 2 + 16 if limit <= nodes else 1
    flags = np.zeros((2, nodes), dtype=np.uint8)  # in a cache; marked by `_compact`
    hit = np.zeros(n, dtype=np.int64)
    evicted, inserted = _belady(chains.offsets, chains.ids, chains.max_hit_blocks, out_offsets,
                                out_ids, use_p, use_o, codes, order, np.int64(d),
                                np.int64(limit), np.int64(depth), head_first, flags[0],
                                flags[1], np.zeros(nodes, dtype=np.int64),
                                np.empty((3, heap_len), dtype=np.int64), hit)
    return hit, int(evicted), int(inserted)


@nb.njit(cache=True, nogil=True)
def _next_uses(offsets, ids, max_hit, out_offsets, out_ids, codes, d, last, use_p, use_o):
    """Per touch, the next request (after the touching one) whose lookup can hit the same block
    in the same cache; n when there is none (`last` starts at n for every block; `use_p` and
    `use_o` receive them). One pass over the requests, last to first."""
    n = len(offsets) - 1
    for i in range(n - 1, -1, -1):
        base = codes[i] * d
        for j in range(out_offsets[i], out_offsets[i + 1]):
            use_o[j] = last[base + out_ids[j]]
        start = offsets[i]
        for j in range(start, offsets[i + 1]):
            x = base + ids[j]
            use_p[j] = last[x]
            if j - start < max_hit[i]:
                last[x] = i  # a chain id occurs once per request: no touch of i reads it


@nb.njit(cache=True, inline="always")
def _key(use, position, depth):
    """Heap order: farthest next use first, then the deeper block (negated for the min-heap)."""
    return -(np.int64(use) * depth + position)


@nb.njit(cache=True)
def _compact(heap_k, heap_v, size, in_cache, cur_key, mark):
    """Drop dead and duplicate entries (at most one live entry per cached block remains)."""
    kept = 0
    for j in range(size):
        x = heap_v[j]
        if in_cache[x] != 0 and heap_k[j] == cur_key[x] and mark[x] == 0:
            mark[x] = 1
            heap_k[kept] = heap_k[j]
            heap_v[kept] = x
            kept += 1
    for j in range(kept):
        mark[heap_v[j]] = 0
    # The kept entries pushed again in order, in place: the heap of the first j is entries
    # 0..j-1, so entry j is read before its push writes there (no copy to compile).
    size = np.int64(0)  # not a literal 0: numba would compile heap_push once more for it
    for j in range(kept):
        size = heap_push(heap_k, heap_v, size, heap_k[j], heap_v[j])
    return size


@nb.njit(cache=True)
def _compact_dead(dead_v, size, in_cache, cur_key, mark, dead_key):
    """The never-used-again stack without evicted blocks and duplicates."""
    kept = 0
    for j in range(size):
        x = dead_v[j]
        if in_cache[x] != 0 and cur_key[x] == dead_key and mark[x] == 0:
            mark[x] = 1
            dead_v[kept] = x
            kept += 1
    for j in range(kept):
        mark[dead_v[j]] = 0
    return kept


@nb.njit(cache=True)
def _set_key(x, key, dead_key, heap_k, heap_v, heap_n, dead_v, dead_n, in_cache, cur_key, mark):
    """Give cached block x a new key: a heap entry, or a place on the stack of blocks never
    used again (they go first, in any order: no heap work for most blocks of a trace).
    Returns the heap's and the stack's sizes."""
    if cur_key[x] == key:
        return heap_n, dead_n
    cur_key[x] = key
    if key == dead_key:
        if dead_n == len(dead_v):
            dead_n = _compact_dead(dead_v, dead_n, in_cache, cur_key, mark, dead_key)
        dead_v[dead_n] = x
        return heap_n, dead_n + 1
    if heap_n == len(heap_k):
        heap_n = _compact(heap_k, heap_v, heap_n, in_cache, cur_key, mark)
    return heap_push(heap_k, heap_v, heap_n, key, x), dead_n


@nb.njit(cache=True)
def _victim(dead_key, heap_k, heap_v, heap_n, dead_v, dead_n, in_cache, cur_key):
    """The live block to evict: one never used again, else the heap's top.
    Returns (victim, heap size, stack size)."""
    while dead_n > 0:
        dead_n -= 1
        v = dead_v[dead_n]
        if in_cache[v] != 0 and cur_key[v] == dead_key:
            return v, heap_n, dead_n
    while True:
        v = heap_v[0]
        live = in_cache[v] != 0 and heap_k[0] == cur_key[v]
        heap_n = heap_pop(heap_k, heap_v, heap_n)
        if live:
            return v, heap_n, dead_n


@nb.njit(cache=True, inline="always")
def _evict_to(capacity, size, i, last, x_last, parent, depth, dead_key, heap_k, heap_v, heap_n,
              dead_v, dead_n, in_cache, cur_key, mark):
    """Evict down to `capacity` blocks, `x_last` (touched last, at position `last` of request
    i) excepted; afterwards it keeps its key unless `parent` (the block before it, -1 for
    none) is gone: without it it cannot hit, so it goes next. Returns (size, evicted, heap
    size, stack size)."""
    final_key = cur_key[x_last]
    heap_n, dead_n = _set_key(x_last, _key(i, last, depth), dead_key, heap_k, heap_v, heap_n,
                              dead_v, dead_n, in_cache, cur_key, mark)
    evicted = 0
    while size > capacity:
        v, heap_n, dead_n = _victim(dead_key, heap_k, heap_v, heap_n, dead_v, dead_n,
                                    in_cache, cur_key)
        in_cache[v] = 0
        size -= 1
        evicted += 1
    if parent >= 0 and in_cache[parent] == 0:
        final_key = dead_key
    heap_n, dead_n = _set_key(x_last, final_key, dead_key, heap_k, heap_v, heap_n, dead_v,
                              dead_n, in_cache, cur_key, mark)
    return size, evicted, heap_n, dead_n


@nb.njit(cache=True, nogil=True)
def _belady(offsets, ids, max_hit, out_offsets, out_ids, use_p, use_o, codes, order, d,
            capacity, depth, head_first, in_cache, mark, cur_key, heaps, hit_blocks):
    """The replay, one cache after another (requests of a cache in order): look up, admit the
    request's blocks with their next uses as keys, then evict the live heap top while the cache
    holds more than `capacity`, the last block touched excepted. Fills `hit_blocks`; returns
    (evicted, inserted). Per block of every cache its flags and key (zeros), and the heap's
    keys, values and dead values (`heaps`, rows of room for what a bounded cache holds) come
    from the caller."""
    n = len(offsets) - 1
    bounded = capacity <= in_cache.size
    heap_k = heaps[0]
    heap_v = heaps[1]
    dead_v = heaps[2]
    dead_key = _key(n, depth - 1, depth)  # every next use is at most n (none), every depth less
    # np.int64, not a literal: numba compiles a helper once per literal value it is given.
    size = 0
    heap_n = np.int64(0)
    dead_n = np.int64(0)
    evicted = 0
    inserted = 0
    cache = -1
    for r in range(n):
        i = order[r]
        if codes[i] != cache:  # the next cache starts empty
            cache = codes[i]
            size = 0
            heap_n = np.int64(0)
            dead_n = np.int64(0)
        base = cache * d
        start = offsets[i]
        length = offsets[i + 1] - start
        o_start = out_offsets[i]
        total = length + out_offsets[i + 1] - o_start
        h = 0
        cap = max_hit[i]
        while h < cap and in_cache[base + ids[start + h]] != 0:
            h += 1
        hit_blocks[i] = h
        for pos in range(total):
            if pos < length:
                x = base + ids[start + pos]
                use = use_p[start + pos]
            else:
                x = base + out_ids[o_start + pos - length]
                use = use_o[o_start + pos - length]
            if in_cache[x] == 0:
                in_cache[x] = 1
                size += 1
                inserted += 1
                cur_key[x] = 1  # no key is positive: the next `_set_key` always pushes
            if bounded:
                key = dead_key if use == n else _key(use, pos, depth)
                heap_n, dead_n = _set_key(x, key, dead_key, heap_k, heap_v, heap_n, dead_v, dead_n,
                                          in_cache, cur_key, mark)
        if size <= capacity or total == 0:
            continue
        # The block touched last stays (it is cached when touched, and nothing comes after).
        last = total - 1 if head_first else 0
        x_last = base + (ids[start + last] if last < length
                         else out_ids[o_start + last - length])
        parent = -1
        if last > 0:  # head first: the block before it, which it cannot hit without
            p = last - 1
            parent = base + (ids[start + p] if p < length else out_ids[o_start + p - length])
        size, gone, heap_n, dead_n = _evict_to(
            capacity, size, i, last, x_last, parent, depth, dead_key, heap_k, heap_v, heap_n,
            dead_v, dead_n, in_cache, cur_key, mark)
        evicted += gone
    return evicted, inserted
