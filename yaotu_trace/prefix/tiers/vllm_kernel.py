"""vLLM's CPU offload tier compiled: the rules of `vllm_native.py` in one numba loop.

The same connector and manager, request by request (`vllm_native.py` has the rules and their
sources; `tests/prefix/test_tiers_vllm_golden.py` checks this kernel against vLLM itself and
`tests/prefix/test_tiers.py` against the Python model). Keys are chain ids (dense), so the
manager's dicts become arrays over them: the LRU rank (−1: not resident), pinned (a load of
this step) and pending (a store of this step, not ready) flags, and, per live request (the one
scheduled and the one whose finish the connector has not seen yet), which keys it has seen.
A rank (a, b) is packed as a·2^21 + b: a request's access or insert gives (R, 2^21 − 2 − j) for
its chunk j (the tail below the head, as vLLM's (R, −position)), its finish (counter, 2^21 − 1).
The eviction heap is lazy, as vLLM's: an entry counts only while its rank is the key's and the
key is evictable; every evictable key keeps at least one current entry.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_M = np.int64(1 << 21)  # chunks per request are fewer (a 2M-chunk prompt is refused)
# Slots of the scalars array.
_COUNTER, _HEAP, _RESIDENT, _STORED, _EVICTED, _FAILED, _LOADED, _STEP, _CALL = range(9)


@nb.njit(cache=True)
def _push(hr, hk, sc, rank, pinned, pending, r, k):  # pragma: no cover - compiled
    """Push (r, k); compact the heap to its current entries when stale ones make up half of it
    (as vLLM's `_maybe_compact_heap`). An eviction pops through the stale entries, and a
    compaction costs the heap's size, not the key space's: at three quarters, scanning every
    key, the pass took 1.2–1.5× as long on the Mooncake conversation trace."""
    size = sc[_HEAP]
    if size == hr.size or size >= max(1024, 2 * sc[_RESIDENT]):
        # The current entries, each key once: a kept key is marked pinned (2) meanwhile.
        kept = 0
        for e in range(size):
            key = hk[e]
            if hr[e] == rank[key] and pinned[key] == 0 and pending[key] == 0:
                pinned[key] = 2
                hr[kept] = hr[e]
                hk[kept] = key
                kept += 1
        for e in range(kept):
            pinned[hk[e]] = 0
        size = kept
        for start in range(size // 2 - 1, -1, -1):
            _sift_down(hr, hk, size, start)
        if size == hr.size:
            return
    hr[size] = r
    hk[size] = k
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if hr[parent] <= hr[i]:
            break
        hr[parent], hr[i] = hr[i], hr[parent]
        hk[parent], hk[i] = hk[i], hk[parent]
        i = parent
    sc[_HEAP] = size + 1


@nb.njit(cache=True)
def _sift_down(hr, hk, size, i):  # pragma: no cover - compiled
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        small = left
        if left + 1 < size and hr[left + 1] < hr[left]:
            small = left + 1
        if hr[i] <= hr[small]:
            return
        hr[small], hr[i] = hr[i], hr[small]
        hk[small], hk[i] = hk[i], hk[small]
        i = small


@nb.njit(cache=True)
def _pop(hr, hk, sc):  # pragma: no cover - compiled
    size = sc[_HEAP] - 1
    r = hr[0]
    k = hk[0]
    hr[0] = hr[size]
    hk[0] = hk[size]
    sc[_HEAP] = size
    _sift_down(hr, hk, size, 0)
    return r, k


@nb.njit(cache=True)
def _request_rank(req_rank, sc, req):  # pragma: no cover - compiled
    if req_rank[req] == 0:
        sc[_COUNTER] += 1
        req_rank[req] = sc[_COUNTER]
    return req_rank[req]


@nb.njit(cache=True)
def _access(ids, start, per_chunk, lo, hi, skip_pending, req, slot, seen, req_rank, rank,
            pinned, pending, hr, hk, sc, last_use):  # pragma: no cover - compiled
    """`_record_request_cache_access` over chunks lo..hi-1 (resident pending keys skipped when
    `skip_pending`: a store records only new and ready keys); `last_use` notes the request."""
    for j in range(lo, hi):
        last_use[ids[start + (j + 1) * per_chunk - 1]] = req
    any_new = False
    for j in range(lo, hi):
        k = ids[start + (j + 1) * per_chunk - 1]
        if skip_pending and rank[k] >= 0 and pending[k] != 0:
            continue
        if seen[slot, k] != req:
            any_new = True
            break
    if not any_new:
        return
    r_req = _request_rank(req_rank, sc, req)
    for j in range(lo, hi):
        k = ids[start + (j + 1) * per_chunk - 1]
        if skip_pending and rank[k] >= 0 and pending[k] != 0:
            continue
        if seen[slot, k] == req:
            continue
        seen[slot, k] = req
        if rank[k] >= 0:
            r = r_req * _M + (_M - 2 - j)
            if rank[k] < r:
                rank[k] = r
                if pinned[k] == 0 and pending[k] == 0:
                    _push(hr, hk, sc, rank, pinned, pending, r, k)


@nb.njit(cache=True)
def _store(ids, start, per_chunk, lo, hi, req, slot, capacity, seen, req_rank, rank, pinned,
           pending, stamp, chosen, chosen_buf, step_buf, hr, hk, sc, last_use, ev_key, ev_req,
           ev_last):  # pragma: no cover - compiled
    """`prepare_store` of chunks lo..hi-1; False when the offer fails whole. Each eviction
    is recorded: the key, the offering request, the key's last use."""
    new = 0
    for j in range(lo, hi):
        if rank[ids[start + (j + 1) * per_chunk - 1]] < 0:
            new += 1
    _access(ids, start, per_chunk, lo, hi, True, req, slot, seen, req_rank, rank, pinned,
            pending, hr, hk, sc, last_use)
    if new == 0:
        return True
    needed = new - (capacity - sc[_RESIDENT])
    if needed > 0:
        # Fail fast, as the manager does, when the evictable keys outside the offer are too
        # few (every resident key is evictable but this step's loads and stores).
        protected = 0
        for j in range(lo, hi):
            k = ids[start + (j + 1) * per_chunk - 1]
            if rank[k] >= 0 and pinned[k] == 0 and pending[k] == 0:
                protected += 1
        if needed > sc[_RESIDENT] - sc[_STEP] - protected:
            sc[_FAILED] += 1
            return False
        sc[_CALL] += 1
        call = sc[_CALL]
        for j in range(lo, hi):
            stamp[ids[start + (j + 1) * per_chunk - 1]] = call
        got = 0
        while sc[_HEAP] > 0 and got < needed:
            r, k = _pop(hr, hk, sc)
            if rank[k] != r or pinned[k] != 0 or pending[k] != 0 or chosen[k] == call:
                continue
            if stamp[k] == call:
                continue  # in the offer: pushed back below
            chosen[k] = call
            chosen_buf[got] = k
            got += 1
        if got < needed:
            for c in range(got):
                k = chosen_buf[c]
                _push(hr, hk, sc, rank, pinned, pending, rank[k], k)
        else:
            for c in range(got):
                k = chosen_buf[c]
                rank[k] = -1
                e = sc[_EVICTED] + c
                ev_key[e] = k
                ev_req[e] = req
                ev_last[e] = last_use[k]
            sc[_RESIDENT] -= got
            sc[_EVICTED] += got
        for j in range(lo, hi):
            k = ids[start + (j + 1) * per_chunk - 1]
            if rank[k] >= 0 and pinned[k] == 0 and pending[k] == 0:
                _push(hr, hk, sc, rank, pinned, pending, rank[k], k)
        if got < needed:
            sc[_FAILED] += 1
            return False
    r_req = _request_rank(req_rank, sc, req)
    for j in range(lo, hi):
        k = ids[start + (j + 1) * per_chunk - 1]
        if rank[k] < 0:
            rank[k] = r_req * _M + (_M - 2 - j)
            pending[k] = 1
            step_buf[sc[_STEP]] = k
            sc[_STEP] += 1
            sc[_RESIDENT] += 1
            sc[_STORED] += 1
    return True


@nb.njit(cache=True)
def _finish(ids, start, per_chunk, chunks, req, slot, seen, rank, pinned, pending, hr, hk,
            sc):  # pragma: no cover - compiled
    """`on_request_finished`: every key the request saw, tail to head, most recent."""
    for j in range(chunks - 1, -1, -1):
        k = ids[start + (j + 1) * per_chunk - 1]
        if seen[slot, k] == req and rank[k] >= 0:
            sc[_COUNTER] += 1
            rank[k] = sc[_COUNTER] * _M + (_M - 1)
            if pinned[k] == 0 and pending[k] == 0:
                _push(hr, hk, sc, rank, pinned, pending, rank[k], k)


@nb.njit(cache=True)
def _end_step(step_buf, rank, pinned, pending, hr, hk, sc):  # pragma: no cover - compiled
    """Every transfer of the step completes: loads unpin, stores become ready."""
    for s in range(sc[_STEP]):
        k = step_buf[s]
        pinned[k] = 0
        pending[k] = 0
    for s in range(sc[_STEP]):
        k = step_buf[s]
        if rank[k] >= 0:
            _push(hr, hk, sc, rank, pinned, pending, rank[k], k)
    sc[_STEP] = 0


@nb.njit(cache=True, nogil=True)
def vllm_cpu_pass(offsets, ids, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block,
                  capacity, num_keys):  # pragma: no cover - compiled
    """CPU hit tokens per request; stored, evicted, failed offers and loaded chunks; and per
    eviction the key (chain id of the chunk's last block), the request whose offer evicted it
    and the request that used it last."""
    n = offsets.size - 1
    rank = np.full(num_keys, -1, dtype=np.int64)
    pinned = np.zeros(num_keys, dtype=np.uint8)
    pending = np.zeros(num_keys, dtype=np.uint8)
    seen = np.full((2, num_keys), -1, dtype=np.int64)
    stamp = np.full(num_keys, -1, dtype=np.int64)
    chosen = np.full(num_keys, -1, dtype=np.int64)
    max_chunks = 1
    for i in range(n):
        c = (offsets[i + 1] - offsets[i]) // per_chunk
        max_chunks = max(max_chunks, c)
    chosen_buf = np.empty(max_chunks + 1, dtype=np.int64)
    step_buf = np.empty(3 * max_chunks + 3, dtype=np.int64)
    heap_size = 4 * num_keys + 1024
    hr = np.empty(heap_size, dtype=np.int64)
    hk = np.empty(heap_size, dtype=np.int64)
    sc = np.zeros(9, dtype=np.int64)
    req_rank = np.zeros(n, dtype=np.int64)
    req_next = np.zeros(n, dtype=np.int64)
    req_failed = np.zeros(n, dtype=np.uint8)
    cpu_hit = np.zeros(n, dtype=np.int64)
    last_use = np.full(num_keys, -1, dtype=np.int64)
    most = offsets[n] // per_chunk + 1  # evictions never outnumber the chunks offered
    ev_key = np.empty(most, dtype=np.int64)
    ev_req = np.empty(most, dtype=np.int64)
    ev_last = np.empty(most, dtype=np.int64)
    prev = -1
    prev_slot = 1
    for i in range(n):
        if refused[i]:
            continue
        slot = 1 - prev_slot
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        g = gpu_hit_blocks[i] * block
        first = g // chunk_tokens
        run = 0
        while first + run < chunks and rank[ids[start + (first + run + 1) * per_chunk - 1]] >= 0:
            run += 1
        loaded = chunk_tokens * (first + run) - g
        if loaded < chunk_tokens:
            loaded = 0
        if loaded > 0:
            for j in range(first, first + run):
                k = ids[start + (j + 1) * per_chunk - 1]
                pinned[k] = 1
                step_buf[sc[_STEP]] = k
                sc[_STEP] += 1
            _access(ids, start, per_chunk, first, first + run, False, i, slot, seen, req_rank,
                    rank, pinned, pending, hr, hk, sc, last_use)
            sc[_LOADED] += run
            req_next[i] = first + run
        elif chunks > 0:
            ok = _store(ids, start, per_chunk, 0, chunks, i, slot, capacity, seen, req_rank,
                        rank, pinned, pending, stamp, chosen, chosen_buf, step_buf, hr, hk, sc,
                        last_use, ev_key, ev_req, ev_last)
            req_failed[i] = 0 if ok else 1
            if ok:
                req_next[i] = chunks
        if prev >= 0:
            p_start = offsets[prev]
            p_chunks = (offsets[prev + 1] - p_start) // per_chunk
            if req_failed[prev] != 0 and req_next[prev] < p_chunks:
                _store(ids, p_start, per_chunk, req_next[prev], p_chunks, prev, prev_slot,
                       capacity, seen, req_rank, rank, pinned, pending, stamp, chosen,
                       chosen_buf, step_buf, hr, hk, sc, last_use, ev_key, ev_req, ev_last)
            _finish(ids, p_start, per_chunk, p_chunks, prev, prev_slot, seen, rank, pinned,
                    pending, hr, hk, sc)
        _end_step(step_buf, rank, pinned, pending, hr, hk, sc)
        if loaded > 0:
            if req_next[i] < chunks:
                ok = _store(ids, start, per_chunk, req_next[i], chunks, i, slot, capacity,
                            seen, req_rank, rank, pinned, pending, stamp, chosen, chosen_buf,
                            step_buf, hr, hk, sc, last_use, ev_key, ev_req, ev_last)
                req_failed[i] = 0 if ok else 1
                if ok:
                    req_next[i] = chunks
            _end_step(step_buf, rank, pinned, pending, hr, hk, sc)
        cpu_hit[i] = loaded
        prev = i
        prev_slot = slot
    e = sc[_EVICTED]
    return (cpu_hit, sc[_STORED], e, sc[_FAILED], sc[_LOADED], ev_key[:e].copy(),
            ev_req[:e].copy(), ev_last[:e].copy())
