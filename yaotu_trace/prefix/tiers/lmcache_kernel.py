"""LMCache's storage manager compiled: the rules of `lmcache.py` in one numba loop.

The same backends, request by request (`lmcache.py` has the rules and their sources;
`tests/prefix/test_tiers.py` checks this kernel against that Python model). Each backend is an
LRU list threaded through a row per key (`lru_rows.py`): a touch moves a key to the most
recent end and an insert into a full backend evicts the least recent one, each in constant
time, where the Python model's ordered dicts cost a hash per step: on the Mooncake
conversation trace a replay with one CPU backend went from 0.24 s to 0.016 s
(`benchmarks/tiers.py --policy lmcache`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.lru_rows import (
    FAILED,
    LOADED,
    chunk_key,
    evict_oldest,
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
def _pass(offsets, ids, prompt, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block,
          capacity, cpu, disk, remote, st, evictions, ends, size, counters, hits, runs,
          source, admitted):  # pragma: no cover - compiled
    """Fills the hit tokens per backend and request, the backends' counters, each request's
    run (the tokens the backends hold from token 0) and `evictions[b]`; `source` (each
    chunk's backend) and `admitted` (a save's disk writes in flight) are a request's room.
    Returns (-1, 0, False), or where a load outgrows the CPU backend: (the request, the chunks
    it holds in CPU memory at once, whether it read from the disk; `lmcache.WaitsForCpuRoom`,
    `lmcache.LoadOutgrowsCpu`)."""
    n = offsets.size - 1
    backends = len(capacity)
    for i in range(n):
        if refused[i]:
            continue
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        run = 0
        for b in range(backends):
            run_start = run
            while run < chunks and held(st, b, chunk_key(ids, start, per_chunk, run)):
                source[run] = b
                run += 1
            if b == remote:  # asked head to tail
                for j in range(run_start, run):
                    touch(st, ends, b, chunk_key(ids, start, per_chunk, j), i)
            else:
                for j in range(run - 1, run_start - 1, -1):
                    touch(st, ends, b, chunk_key(ids, start, per_chunk, j), i)
        run_tokens = run * chunk_tokens
        runs[i] = run_tokens
        g = gpu_hit_blocks[i] * block
        load = run_tokens - g
        if run_tokens == prompt[i]:
            load -= 1
        if load > 0 and cpu >= 0 and backends > 1:
            holding, read, from_disk = _held_at_load(source, run, g // chunk_tokens, cpu, disk)
            if read > 0 and holding > capacity[cpu]:
                return i, holding, from_disk > 0
        if load > 0:
            end = g + load
            if cpu >= 0:  # each chunk read from below takes CPU memory first (`lmcache.py`)
                reads = 0
                for j in range(g // chunk_tokens, run):
                    if source[j] != cpu:
                        reads += 1
                for _ in range(max(0, min(size[cpu], size[cpu] + reads - capacity[cpu]))):
                    evict_oldest(st, ends, size, counters, evictions, cpu, i)
            for j in range(g // chunk_tokens, run):
                b = source[j]
                hits[b, i] += min((j + 1) * chunk_tokens, end) - max(j * chunk_tokens, g)
                counters[b, LOADED] += 1
                k = chunk_key(ids, start, per_chunk, j)
                if b == disk:  # a disk read refreshes the chunk
                    touch(st, ends, disk, k, i)
                if cpu >= 0 and b != cpu and not held(st, cpu, k):
                    insert(st, ends, size, capacity, counters, evictions, cpu, k, i)
        stop = chunks
        if cpu >= 0 and chunks > run:
            stop = run + _allocate(st, ends, size, capacity, counters, evictions, cpu,
                                   chunks - run, i)
        for b in range(backends):
            if b == disk:
                _write_disk(st, ends, size, capacity, counters, evictions, disk, ids, start,
                            per_chunk, run, stop, admitted, i)
                continue
            for j in range(run, stop):
                k = chunk_key(ids, start, per_chunk, j)
                if not held(st, b, k):
                    insert(st, ends, size, capacity, counters, evictions, b, k, i)
                elif b == remote:  # the CPU skips a key it has; the remote store refreshes it
                    touch(st, ends, b, k, i)
    return -1, 0, False


@nb.njit(cache=True, inline="always")
def _held_at_load(source, run, first, cpu, disk):  # pragma: no cover - compiled
    """What a load holds in CPU memory at once (`lmcache.py`'s docstring): the run's chunks in
    the CPU backend (the lookup pinned them) and those read from below it into CPU memory
    (from chunk `first` on); how many were read from below, and of them from the disk."""
    pinned = 0
    read = 0
    from_disk = 0
    for j in range(run):
        if source[j] == cpu:
            pinned += 1
        elif j >= first:
            read += 1
            if source[j] == disk:
                from_disk += 1
    return pinned + read, read, from_disk


@nb.njit(cache=True, inline="always")
def _write_disk(st, ends, size, capacity, counters, evictions, d, ids, start, per_chunk, first,
                stop, admitted, now):  # pragma: no cover - compiled
    """A save's chunks `first .. stop − 1` into the disk backend d (`lmcache.py`,
    `_Backend.write`): a held chunk refreshed, another admitted while the save's writes in
    flight leave room (the least recent written chunks evicted for it), the admitted ones
    landing in order once the save is done."""
    n = 0
    for j in range(first, stop):
        k = chunk_key(ids, start, per_chunk, j)
        if held(st, d, k):
            touch(st, ends, d, k, now)
        elif n < capacity[d]:
            while size[d] + n >= capacity[d]:
                evict_oldest(st, ends, size, counters, evictions, d, now)
            admitted[n] = k
            n += 1
    for a in range(n):
        insert(st, ends, size, capacity, counters, evictions, d, admitted[a], now)


@nb.njit(cache=True, inline="always")
def _allocate(st, ends, size, capacity, counters, evictions, cpu, wanted,
              now):  # pragma: no cover - compiled
    """How many of a store's `wanted` chunks get CPU memory (`lmcache.py`, the store): one
    page each, a chunk the backend already holds included, the least recent chunks evicted
    for them; the store keeps its head when the backend cannot take it all."""
    over = min(size[cpu], size[cpu] + wanted - capacity[cpu])
    for _ in range(over):
        evict_oldest(st, ends, size, counters, evictions, cpu, now)
    if wanted > capacity[cpu]:
        counters[cpu, FAILED] += 1
        return capacity[cpu]
    return wanted


def lmcache_pass(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                 capacity_chunks: tuple[int, ...], chunk_tokens: int, cpu: int, disk: int = -1,
                 remote: int = -1, *, lacking: np.ndarray | None = None
                 ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                            tuple[TierEvictions, ...], tuple[int, int, bool] | None]:
    """Hit tokens per backend (in the order of `capacity_chunks`), their counters and
    evictions; `cpu` is the index of the CPU backend (−1: none), which a read from a lower
    backend fills, `disk` the local disk's (−1: none), which refreshes what it is read or
    asked to save again, `remote` the remote store's (−1: none), asked head to tail and
    refreshing what it is asked to save again. `lacking`, when given, is filled per request
    with the first chunk the backends did not hold from token 0 (−1: none, or refused).
    Last, where a load outgrows the CPU backend (the pass stops there): (the request, the
    chunks its load holds in CPU memory, whether LMCache waits there for ever: it read from
    the disk), else None."""
    hits, (counters, evictions), runs, waits = _passed(
        chains, gpu_hit_blocks, refused, capacity_chunks, chunk_tokens, cpu, disk, remote)
    if lacking is not None:
        chunks = np.diff(np.asarray(chains.offsets, dtype=np.int64)) // (
            chunk_tokens // int(chains.block_size_tokens))
        held = runs // chunk_tokens
        lacking[:] = np.where(np.asarray(refused, dtype=bool) | (held >= chunks), -1, held)
    out_counters, out_evictions = outcome(counters, evictions)
    return tuple(h.copy() for h in hits), out_counters, out_evictions, waits


def lmcache_run_tokens(chains: BlockChains, refused: np.ndarray, capacity_chunks: int,
                       chunk_tokens: int, *, backend: str = "cpu") -> np.ndarray:
    """The tokens one backend (`cpu` or `remote`) holds from each request's token 0 when it
    looks up (0 for a refused request). With one such backend nothing the GPU pool does
    changes what it holds, so one pass serves every GPU pool size: `lmcache_hits` turns it
    into the tier's hits."""
    n = chains.num_requests
    _, _, runs, _ = _passed(chains, np.zeros(n, dtype=np.int64), refused, (capacity_chunks,),
                         chunk_tokens, 0 if backend == "cpu" else -1, -1,
                         0 if backend == "remote" else -1)
    return runs


def lmcache_hits(run_tokens: np.ndarray, gpu_hit_blocks: np.ndarray, block_tokens: int,
                 prompt_tokens: np.ndarray) -> np.ndarray:
    """One backend's hit tokens per request from its runs (`lmcache_run_tokens`) behind a
    GPU pool's hits: the run beyond the GPU hit, one token less for a whole prompt, as the
    pass counts them."""
    run = np.asarray(run_tokens, dtype=np.int64)
    load = (run - np.asarray(gpu_hit_blocks, dtype=np.int64) * block_tokens
            - (run == np.asarray(prompt_tokens, dtype=np.int64)))
    return np.where(load > 0, load, 0)


def _passed(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
            capacity_chunks: tuple[int, ...], chunk_tokens: int, cpu: int, disk: int,
            remote: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray,
                                  tuple[int, int, bool] | None]:
    """The pass on its arrays: hits, (counters, evictions), runs, and where a load outgrows
    the CPU backend (`lmcache_pass`; `lmcache_run_tokens`'s one backend never does)."""
    offsets = np.asarray(chains.offsets, dtype=np.int64)
    block = int(chains.block_size_tokens)
    per_chunk = chunk_tokens // block
    keys = int(chains.num_distinct)
    # The rows are touched whole; the evictions' room only as far as the backends evict.
    with memory.reserved(8 * 4 * len(capacity_chunks) * max(keys, 1),
                         f"LMCache's backends over {keys:,} chunk keys",
                         "use a larger --block-size or --tier-chunk (or fewer --jobs)"):
        # A backend's inserts: the chunks after each run, and (the CPU's) each chunk read
        # below.
        st, evictions = rows(keys, len(capacity_chunks), 0, 2 * (int(offsets[-1]) // per_chunk))
        ends, size, counters, hits = lru_state(len(capacity_chunks), offsets.size - 1)
        runs = np.zeros(offsets.size - 1, dtype=np.int64)
        longest = most_chunks(offsets, per_chunk)
        waits, holding, for_ever = _pass(offsets, pass_ids(chains.ids),
              np.asarray(chains.prompt_tokens, dtype=np.int64),
              np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
              np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
              # A tuple, so that each count of backends compiles its own loop (one backend,
              # the common case, runs 13 % faster than over an array of one).
              tuple(int(c) for c in capacity_chunks), np.int64(cpu), np.int64(disk),
              np.int64(remote), st, evictions, ends, size, counters, hits, runs,
              np.empty(longest, dtype=np.int64), np.empty(longest, dtype=np.int64))
    return hits, (counters, evictions), runs, (
        None if waits < 0 else (int(waits), int(holding), bool(for_ever)))
