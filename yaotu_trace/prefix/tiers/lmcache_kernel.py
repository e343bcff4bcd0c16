"""LMCache's storage manager compiled: the rules of `lmcache.py` in one numba loop.

The same backends, request by request (`lmcache.py` has the rules and their sources;
`tests/prefix/test_tiers.py` checks this kernel against that Python model). Each backend is an
LRU list threaded through a row per key (chain id): for backend b, columns 4b.. hold the key's
neighbours toward the least and the most recent, its last use and whether the backend holds
it. A touch moves a key to the most recent end and an insert into a full backend evicts the
least recent one, each in constant time, where the Python model's ordered dicts cost a hash
per step: on the Mooncake conversation trace a replay with one CPU backend went from
0.24 s to 0.016 s (`benchmarks/tiers.py --policy lmcache`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions

# Columns of a key's row, per backend (offset 4·b); its ends: least, most recent.
_LESS, _MORE, _LAST, _HELD = range(4)
_OLDEST, _NEWEST = 0, 1
# Counters per backend.
_STORED, _EVICTED, _LOADED = range(3)


@nb.njit(cache=True, inline="always")
def _key(ids, start, per_chunk, j):  # pragma: no cover - compiled
    """The key of chunk j: the chain id of its last block."""
    return ids[start + (j + 1) * per_chunk - 1]


@nb.njit(cache=True, inline="always")
def _touch(st, ends, b, k, now):  # pragma: no cover - compiled
    """Key k (held) becomes backend b's most recent, used by request `now`."""
    c = 4 * b
    newest = ends[b, _NEWEST]
    if newest != k:
        less = st[k, c + _LESS]
        more = st[k, c + _MORE]  # there is one: k is not the newest
        if less >= 0:
            st[less, c + _MORE] = more
        else:
            ends[b, _OLDEST] = more
        st[more, c + _LESS] = less
        st[k, c + _LESS] = newest
        st[k, c + _MORE] = -1
        st[newest, c + _MORE] = k
        ends[b, _NEWEST] = k
    st[k, c + _LAST] = now


@nb.njit(cache=True, inline="always")
def _put(st, ends, size, capacity, counters, evictions, b, k, now):  # pragma: no cover
    """Insert k as backend b's most recent unless it holds k already (no touch then), the
    least recent evicted when full and recorded (key, request, its last use)."""
    c = 4 * b
    if st[k, c + _HELD] == 1:
        return
    if size[b] >= capacity[b]:
        gone = ends[b, _OLDEST]
        more = st[gone, c + _MORE]
        ends[b, _OLDEST] = more
        if more >= 0:
            st[more, c + _LESS] = -1
        else:
            ends[b, _NEWEST] = -1
        st[gone, c + _HELD] = 0
        e = counters[b, _EVICTED]
        evictions[b, 0, e] = gone
        evictions[b, 1, e] = now
        evictions[b, 2, e] = st[gone, c + _LAST]
        counters[b, _EVICTED] += 1
        size[b] -= 1
    newest = ends[b, _NEWEST]
    st[k, c + _LESS] = newest
    st[k, c + _MORE] = -1
    if newest >= 0:
        st[newest, c + _MORE] = k
    else:
        ends[b, _OLDEST] = k
    ends[b, _NEWEST] = k
    st[k, c + _HELD] = 1
    st[k, c + _LAST] = now
    size[b] += 1
    counters[b, _STORED] += 1


@nb.njit(cache=True, nogil=True)
def _pass(offsets, ids, prompt, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block,
          capacity, cpu, st, evictions):  # pragma: no cover - compiled
    """Hit tokens per backend and request, the backends' counters; `evictions[b]` filled."""
    n = offsets.size - 1
    backends = capacity.size
    ends = np.full((backends, 2), -1, dtype=np.int64)
    size = np.zeros(backends, dtype=np.int64)
    counters = np.zeros((backends, 3), dtype=np.int64)
    hits = np.zeros((backends, n), dtype=np.int64)
    max_chunks = 1
    for i in range(n):
        max_chunks = max(max_chunks, (offsets[i + 1] - offsets[i]) // per_chunk)
    source = np.empty(max_chunks, dtype=np.int64)  # the backend of each chunk of the run
    for i in range(n):
        if refused[i]:
            continue
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        run = 0
        for b in range(backends):
            run_start = run
            while run < chunks and st[_key(ids, start, per_chunk, run), 4 * b + _HELD] == 1:
                source[run] = b
                run += 1
            for j in range(run - 1, run_start - 1, -1):
                _touch(st, ends, b, _key(ids, start, per_chunk, j), i)
        run_tokens = run * chunk_tokens
        g = gpu_hit_blocks[i] * block
        load = run_tokens - g
        if run_tokens == prompt[i]:
            load -= 1
        if load > 0:
            end = g + load
            for j in range(g // chunk_tokens, run):
                b = source[j]
                hits[b, i] += min((j + 1) * chunk_tokens, end) - max(j * chunk_tokens, g)
                counters[b, _LOADED] += 1
                if cpu >= 0 and b != cpu:
                    _put(st, ends, size, capacity, counters, evictions, cpu,
                         _key(ids, start, per_chunk, j), i)
        for b in range(backends):
            for j in range(run, chunks):
                _put(st, ends, size, capacity, counters, evictions, b,
                     _key(ids, start, per_chunk, j), i)
    return hits, counters


def lmcache_pass(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                 capacity_chunks: tuple[int, ...], chunk_tokens: int, cpu: int
                 ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                            tuple[TierEvictions, ...]]:
    """Hit tokens per backend (in the order of `capacity_chunks`), their counters and
    evictions; `cpu` is the index of the CPU backend (−1: none), which a read from a lower
    backend fills.

    The rows and the room for evictions are one numpy array (as in `vllm_kernel.py`: numpy
    asks for huge pages, separate allocations fault page by page each pass)."""
    offsets = np.asarray(chains.offsets, dtype=np.int64)
    block = int(chains.block_size_tokens)
    per_chunk = chunk_tokens // block
    backends = len(capacity_chunks)
    keys = max(int(chains.num_distinct), 1)
    # A backend's inserts: the chunks after each run, and (the CPU's) each chunk read below.
    room = 2 * (int(offsets[-1]) // per_chunk) + 1
    work = np.empty(4 * backends * keys + backends * 3 * room, dtype=np.int64)
    st = work[:4 * backends * keys].reshape(keys, 4 * backends)
    st.fill(-1)
    st[:, _HELD::4] = 0
    evictions = work[4 * backends * keys:].reshape(backends, 3, room)
    hits, counters = _pass(offsets, np.asarray(chains.ids, dtype=np.int64),
                           np.asarray(chains.prompt_tokens, dtype=np.int64),
                           np.asarray(gpu_hit_blocks, dtype=np.int64),
                           np.asarray(refused, dtype=np.bool_), np.int64(per_chunk),
                           np.int64(chunk_tokens), np.int64(block),
                           np.asarray(capacity_chunks, dtype=np.int64), np.int64(cpu), st,
                           evictions)
    out_counters = tuple(
        TierCounters(stored_chunks=int(counters[b, _STORED]),
                     evicted_chunks=int(counters[b, _EVICTED]), failed_stores=0,
                     loaded_chunks=int(counters[b, _LOADED])) for b in range(backends))
    out_evictions = tuple(
        TierEvictions(key=evictions[b, 0, :e].copy(), request=evictions[b, 1, :e].copy(),
                      last_use_request=evictions[b, 2, :e].copy())
        for b, e in enumerate(int(counters[b, _EVICTED]) for b in range(backends)))
    return tuple(hits[b].copy() for b in range(backends)), out_counters, out_evictions
