"""Block residency: how long cached blocks live, how long they sit idle, who evicts them.

A replay's hits say *that* a request lost its prefix to capacity, not *why*. These passes
follow every block of one replay in order and keep the times a report needs:

- `reuse_distances`: for every lookup slot (a block a request could hit), the time since
  the block was last used in the same cache (seconds, from arrival times) and its LRU stack
  distance (1 + the distinct blocks that cache touched since); NaN and -1 when the cache never
  held it. Independent of capacity: a TTL or any LRU size can be read off it.
- `clean_residency`: the clean model's caches (LRU or FIFO over chain ids, as
  `engine.replay` keeps them) with each block's insertion, last use and eviction, and the
  request whose touch evicted it.
- `vllm_residency`: vLLM's block pool from the physical blocks `exact_vllm` hands out, with
  the lifetime events of vLLM's own `KVCacheMetricsCollector` (`vllm/v1/core/
  kv_cache_metrics.py`, 0.33.0): a physical block is born when the free queue hands it out,
  accessed when a lookup hits it (at most the last 4 accesses are kept), and its eviction
  event is recorded when the queue hands it out again.

Times are the requests' arrival times: the replay serves each request at its arrival.
Compiled with numba (`cache=True`); int64 offsets, int32 ids, float64 times at the boundary.
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

Integer = int | np.integer  # a count as the callers pass it (int or np.int64)
HISTORY = 4  # accesses a block keeps (vLLM's deque(maxlen=4))


@nb.njit(cache=True, nogil=True)
def _fen_add(tree, base, size, i, delta):  # pragma: no cover - compiled
    while i <= size:
        tree[base + i] += delta
        i += i & (-i)


@nb.njit(cache=True, nogil=True)
def _fen_prefix(tree, base, i):  # pragma: no cover - compiled
    s = 0
    while i > 0:
        s += tree[base + i]
        i -= i & (-i)
    return s


def reuse_distances(offsets: np.ndarray, ids: np.ndarray, max_hit: np.ndarray,
                    out_offsets: Any, out_ids: Any, codes: np.ndarray, num_caches: Integer,
                    num_distinct: Integer, arrival_s: np.ndarray, head_first: bool,
                    tree_offsets: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gap seconds, stack distance) of every lookup slot of `ids` (NaN, -1 where the cache
    never held the block or beyond the hit cap).

    `codes[i]` is request i's cache; `tree_offsets[c]..tree_offsets[c+1]` is cache c's share
    of the time axis (its touches + 1); `skip[i]` requests look up but touch nothing (refused
    by an engine pool). Touches follow the replay's touch order. The arrays are made here and
    the pass compiled alone (`_distances`): an array allocated in compiled code compiles
    numba's `np.full` or `np.zeros` with it on a first run.
    """
    nodes = max(int(num_caches) * int(num_distinct), 1)
    gap = np.full(ids.size, np.nan, dtype=np.float64)
    dist = np.full(ids.size, -1, dtype=np.int64)
    _distances(offsets, ids, max_hit, out_offsets, out_ids, codes, num_distinct, arrival_s,
               head_first, tree_offsets, skip, np.full(nodes, -1, dtype=np.int64),
               np.zeros(nodes, dtype=np.float64),
               np.zeros(max(int(tree_offsets[-1]), 1), dtype=np.int32),
               np.zeros((2, int(num_caches)), dtype=np.int64), gap, dist)
    return gap, dist


@nb.njit(cache=True, nogil=True)
def _distances(offsets, ids, max_hit, out_offsets, out_ids, codes, num_distinct, arrival_s,
               head_first, tree_offsets, skip, last_time, last_s, tree, counts, gap,
               dist):  # pragma: no cover - compiled
    """`reuse_distances` on its arrays: per block of every cache its last touch's time slot
    (−1: none) and seconds, the caches' Fenwick trees, per cache its clock and live count
    (`counts` rows), and the gaps and distances it fills."""
    n = len(offsets) - 1
    d = num_distinct
    clock = counts[0]
    live = counts[1]
    for i in range(n):
        c = codes[i]
        base = c * d
        tb = tree_offsets[c]
        size = tree_offsets[c + 1] - tb - 1
        start = offsets[i]
        length = offsets[i + 1] - start
        for j in range(max_hit[i]):
            x = base + ids[start + j]
            lt = last_time[x]
            if lt < 0:
                break  # chained ids: a block never held means no deeper one was
            gap[start + j] = arrival_s[i] - last_s[x]
            dist[start + j] = live[c] - _fen_prefix(tree, tb, lt) + 1
        if skip[i]:
            continue
        o_start = out_offsets[i]
        total = length + out_offsets[i + 1] - o_start
        for step in range(total):
            pos = step if head_first else total - 1 - step
            x = base + (ids[start + pos] if pos < length else out_ids[o_start + pos - length])
            lt = last_time[x]
            if lt >= 0:
                _fen_add(tree, tb, size, lt, np.int64(-1))
            else:
                live[c] += 1
            clock[c] += 1
            t = clock[c]
            _fen_add(tree, tb, size, t, np.int64(1))
            last_time[x] = t
            last_s[x] = arrival_s[i]


@nb.njit(cache=True, nogil=True)
def _grow(a, need):  # pragma: no cover - compiled
    """`a` with room for `need` (itself when it has it). The copy is an element loop: a slice
    assignment compiles numba's broadcasting and its shape-mismatch message (2 s of a first
    run)."""
    if need <= a.size:
        return a
    b = np.empty(max(need, 2 * a.size), dtype=a.dtype)
    for k in range(a.size):
        b[k] = a[k]
    return b


@nb.njit(cache=True, nogil=True)
def _access(x, t, hist, hist_n, last_use):  # pragma: no cover - compiled
    """A use of block x at t: kept in its ring of the last HISTORY uses."""
    k = hist_n[x]
    if k < HISTORY:
        hist[x * HISTORY + k] = t
        hist_n[x] = k + 1
    else:
        for m in range(HISTORY - 1):
            hist[x * HISTORY + m] = hist[x * HISTORY + m + 1]
        hist[x * HISTORY + HISTORY - 1] = t
    last_use[x] = t


def clean_residency(offsets: np.ndarray, ids: np.ndarray, max_hit: np.ndarray,
                    out_offsets: Any, out_ids: Any, codes: np.ndarray,
                    num_caches: Integer, num_distinct: Integer, capacity: Integer, fifo: bool,
                    head_first: bool, arrival_s: np.ndarray) -> tuple[np.ndarray, ...]:
    """The clean model's caches (LRU, or FIFO when `fifo`) with every block's residency.

    Returns (hit_blocks, miss_evicted_s, miss_idle_s, miss_by, life, idle, gaps): for each
    request whose hit stops at a block its cache once held, when that block was evicted,
    how long it had been idle then and the request whose touch evicted it (NaN, NaN, -1
    otherwise); and one (lifetime, idle) per eviction with the reuse gaps of its last uses.
    A use is a touch of a cached block; a block is born when inserted. The arrays are made
    here and the pass compiled alone (`_clean_events`), as in `vllm_residency`.
    """
    n = len(offsets) - 1
    caches = int(num_caches)
    nodes = max(caches * int(num_distinct), 1)
    flags = np.zeros((3, nodes), dtype=np.uint8)  # in a cache; ever held; accesses kept
    links = np.empty((2, nodes), dtype=np.int64)
    ends = np.full((2, caches), -1, dtype=np.int64)  # each cache's list head and tail
    times = np.zeros((2, nodes), dtype=np.float64)  # birth, last use
    gone = np.full((2, nodes), np.nan, dtype=np.float64)  # evicted at, idle then
    hit_blocks = np.zeros(n, dtype=np.int64)
    miss_s = np.full(n, np.nan, dtype=np.float64)
    miss_idle = np.full(n, np.nan, dtype=np.float64)
    miss_by = np.full(n, -1, dtype=np.int64)
    life, idle, gaps, n_ev, n_gap = _clean_events(
        offsets, ids, max_hit, out_offsets, out_ids, codes, num_distinct, capacity, fifo,
        head_first, arrival_s, flags[0], flags[1], links[0], links[1], ends[0], ends[1],
        np.zeros(caches, dtype=np.int64), times[0], times[1],
        np.zeros(nodes * HISTORY, dtype=np.float64), flags[2], gone[0], gone[1],
        np.full(nodes, -1, dtype=np.int64), hit_blocks, miss_s, miss_idle, miss_by,
        np.empty((3, 1024), dtype=np.float64))
    return (hit_blocks, miss_s, miss_idle, miss_by, life[:n_ev], idle[:n_ev],
            gaps[:n_gap])


@nb.njit(cache=True, nogil=True)
def _clean_events(offsets, ids, max_hit, out_offsets, out_ids, codes, num_distinct, capacity,
                  fifo, head_first, arrival_s, in_cache, held, prev, nxt, head, tail, size,
                  birth, last_use, hist, hist_n, gone_s, gone_idle, gone_by, hit_blocks, miss_s,
                  miss_idle, miss_by, room):  # pragma: no cover - compiled
    """`clean_residency` on its arrays; returns the lifetimes, idle times and gaps grown as
    they filled, and how many events and gaps they hold."""
    n = len(offsets) - 1
    d = num_distinct
    life = room[0]
    idle = room[1]
    gaps = room[2]
    n_ev = 0
    n_gap = 0
    for i in range(n):
        c = codes[i]
        base = c * d
        t = arrival_s[i]
        start = offsets[i]
        length = offsets[i + 1] - start
        h = 0
        while h < max_hit[i] and in_cache[base + ids[start + h]] != 0:
            h += 1
        hit_blocks[i] = h
        if h < max_hit[i]:
            x = base + ids[start + h]
            if held[x] != 0:
                miss_s[i] = gone_s[x]
                miss_idle[i] = gone_idle[x]
                miss_by[i] = gone_by[x]
        o_start = out_offsets[i]
        total = length + out_offsets[i + 1] - o_start
        for step in range(total):
            pos = step if head_first else total - 1 - step
            x = base + (ids[start + pos] if pos < length else out_ids[o_start + pos - length])
            if in_cache[x] != 0:
                _access(x, t, hist, hist_n, last_use)
                if not fifo:
                    p = prev[x]
                    q = nxt[x]
                    if p >= 0:
                        nxt[p] = q
                    else:
                        head[c] = q
                    if q >= 0:
                        prev[q] = p
                    else:
                        tail[c] = p
                else:
                    continue
            else:
                if capacity >= 0 and size[c] >= capacity:
                    v = head[c]
                    w = nxt[v]
                    head[c] = w
                    if w >= 0:
                        prev[w] = -1
                    else:
                        tail[c] = -1
                    in_cache[v] = 0
                    size[c] -= 1
                    if n_ev == life.size:
                        life = _grow(life, n_ev + 1)
                        idle = _grow(idle, n_ev + 1)
                    if n_gap + HISTORY > gaps.size:
                        gaps = _grow(gaps, n_gap + HISTORY)
                    life[n_ev] = t - birth[v]
                    idle[n_ev] = t - last_use[v]
                    n_ev += 1
                    for m in range(1, hist_n[v]):
                        gaps[n_gap] = hist[v * HISTORY + m] - hist[v * HISTORY + m - 1]
                        n_gap += 1
                    gone_s[v] = t
                    gone_idle[v] = t - last_use[v]
                    gone_by[v] = i
                in_cache[x] = 1
                held[x] = 1
                size[c] += 1
                birth[x] = t
                last_use[x] = t
                hist_n[x] = 0
            tl = tail[c]
            prev[x] = tl
            nxt[x] = -1
            if tl >= 0:
                nxt[tl] = x
            else:
                head[c] = x
            tail[c] = x
    return life, idle, gaps, n_ev, n_gap


def vllm_residency(offsets: np.ndarray, ids: np.ndarray, max_hit: np.ndarray,
                   hit_blocks: np.ndarray, physical: np.ndarray, phys_offsets: np.ndarray,
                   num_nodes: Integer, num_distinct: Integer, arrival_s: np.ndarray
                   ) -> tuple[np.ndarray, ...]:
    """vLLM's residency events from the physical blocks of its pool (`exact_vllm`).

    `physical[phys_offsets[i]:phys_offsets[i+1]]` are request i's blocks in order (its hit
    blocks first), empty when the pool refused it. Returns (miss_evicted_s, miss_idle_s,
    miss_by, life, idle, gaps) as `clean_residency`; a chain id counts as evicted when its
    last cached copy loses its hash, idle since the last request that used it. The arrays are
    made here and the pass compiled alone (`_vllm_events`): an array allocated in compiled
    code compiles numba's `np.full` or `np.zeros` with it on a first run.
    """
    n = len(offsets) - 1
    nodes = max(int(num_nodes), 1)
    dd = max(int(num_distinct), 1)
    # per physical block: its times (birth, last access) and access history
    times = np.zeros((2, nodes), dtype=np.float64)
    flags = np.zeros((2, nodes), dtype=np.uint8)  # has a state; accesses kept
    chain = np.zeros((2, dd), dtype=np.int64)  # per chain id: copies; request that evicted it
    chain[1] = -1
    chain_s = np.full((3, dd), np.nan, dtype=np.float64)  # last use, eviction s, idle then
    chain_s[0] = 0.0
    miss_s = np.full(n, np.nan, dtype=np.float64)
    miss_idle = np.full(n, np.nan, dtype=np.float64)
    miss_by = np.full(n, -1, dtype=np.int64)
    life, idle, gaps, n_ev, n_gap = _vllm_events(
        offsets, ids, max_hit, hit_blocks, physical, phys_offsets, arrival_s, times[0],
        times[1], np.zeros(nodes * HISTORY, dtype=np.float64), flags[0], flags[1],
        np.full(nodes, -1, dtype=np.int64), chain[0], np.zeros(dd, dtype=np.uint8), chain_s[0],
        chain_s[1], chain_s[2], chain[1], miss_s, miss_idle, miss_by,
        np.empty((3, 1024), dtype=np.float64))
    return miss_s, miss_idle, miss_by, life[:n_ev], idle[:n_ev], gaps[:n_gap]


@nb.njit(cache=True, nogil=True)
def _vllm_events(offsets, ids, max_hit, hit_blocks, physical, phys_offsets, arrival_s, birth,
                 last_access, hist, has_state, hist_n, block_hash, copies, held, chain_use,
                 gone_s, gone_idle, gone_by, miss_s, miss_idle, miss_by,
                 room):  # pragma: no cover - compiled
    """`vllm_residency` on its arrays (per physical block, per chain id, per request, and the
    first room for the events, `room`'s rows); returns the lifetimes, idle times and gaps
    grown as they filled, and how many events and gaps they hold."""
    n = len(offsets) - 1
    life = room[0]
    idle = room[1]
    gaps = room[2]
    n_ev = 0
    n_gap = 0
    for i in range(n):
        t = arrival_s[i]
        start = offsets[i]
        full = offsets[i + 1] - start
        h = hit_blocks[i]
        if h < max_hit[i]:
            cid = ids[start + h]
            if held[cid] != 0:
                miss_s[i] = gone_s[cid]
                miss_idle[i] = gone_idle[cid]
                miss_by[i] = gone_by[cid]
        ps = phys_offsets[i]
        total = phys_offsets[i + 1] - ps
        if total == 0 or physical[ps] < 0:
            continue  # refused: nothing allocated, nothing touched
        for k in range(total):
            p = physical[ps + k]
            if k < h:  # a hit: vLLM's touch() records an access
                _access(p, t, hist, hist_n, last_access)
                chain_use[ids[start + k]] = t
                continue
            if has_state[p] != 0:  # handed out again: the eviction event
                if n_ev == life.size:
                    life = _grow(life, n_ev + 1)
                    idle = _grow(idle, n_ev + 1)
                if n_gap + HISTORY > gaps.size:
                    gaps = _grow(gaps, n_gap + HISTORY)
                life[n_ev] = t - birth[p]
                idle[n_ev] = t - last_access[p]
                n_ev += 1
                for m in range(1, hist_n[p]):
                    gaps[n_gap] = hist[p * HISTORY + m] - hist[p * HISTORY + m - 1]
                    n_gap += 1
            old = block_hash[p]
            if old >= 0:
                copies[old] -= 1
                if copies[old] == 0:
                    gone_s[old] = t
                    gone_idle[old] = t - chain_use[old]
                    gone_by[old] = i
                block_hash[p] = -1
            has_state[p] = 1
            birth[p] = t
            last_access[p] = t
            hist_n[p] = 0
            if k < full:
                cid = ids[start + k]
                block_hash[p] = cid
                copies[cid] += 1
                held[cid] = 1
                chain_use[cid] = t
    return life, idle, gaps, n_ev, n_gap
