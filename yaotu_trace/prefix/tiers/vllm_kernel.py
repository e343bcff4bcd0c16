"""vLLM's CPU offload tier compiled: the rules of `vllm_native.py` in one numba loop.

The same connector and manager, request by request (`vllm_native.py` has the rules and their
sources; `tests/prefix/test_tiers_vllm_golden.py` checks this kernel against vLLM itself and
`tests/prefix/test_tiers.py` against the Python model). Keys are chain ids (dense), so the
manager's dicts become one row per key: its LRU rank (−1: not resident), whether a transfer of
this step holds it (a load pins it, a store leaves it pending until the step ends), and, per
live request (the one scheduled and the one whose finish the connector has not seen yet),
whether that request has seen it. A rank (a, b) is packed as a·2^21 + b: a request's access or
insert gives (R, 2^21 − 2 − j) for its chunk j (the tail below the head, as vLLM's
(R, −position)), its finish (counter, 2^21 − 1).

vLLM keeps the evictable keys in a lazy heap; here they are in rank order without one: one
list of the resident keys, sorted by rank. Every rank's first part is a value of one counter,
and only two requests are live at a time, so only their two ranks hold more than one key: a
finish gives each key a counter value of its own, the highest yet, and puts it on the most
recent end. Each live request's keys lie together (its segment), under a marker row ranked
just above them, put on the most recent end when the request gets its rank and taken out at
its finish, when its segment is empty; a raise moves a key into the segment of the request
that raised it, searched from the segment's lowest row (or from the key raised just before).
An eviction takes keys from the least recent end up, passing over a key a transfer of this
step holds (a load pins it, a store leaves it pending until the step ends) and the markers.
The order is the heap's, with no stale entries to pop, and the memory is the keys' rows:
a list per counter value (a bucket each) cost two words per chunk of the trace, 1 GB on
1e9 tokens. A key's whole state is one 64-byte row, so a chunk touched costs one cache line,
not one per array (the pass is bound by memory). With one allocation for the large arrays
(`vllm_offload_pass`) the pass went from 0.061 s to 0.021 s on the Mooncake conversation
trace, and with one list to 0.011 s (`benchmarks/tiers.py`). A store threshold counts each
offer first (`offer_counts.py`); a chunk below it is neither stored nor accessed. Tiers below
the CPU are LRU lists (`lru_rows.py`): written through on every store, asked a step late
(`lru_rows.ask_below`, one answer per tier and key), their chunks promoted one at a time and
the lookup run again each step until nothing is pending (`vllm_native._lookup_pass`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.prefix import memory
from yaotu_trace.prefix.tiers import lru_rows
from yaotu_trace.prefix.tiers.lru_rows import (
    ASKED,
    NOT_BELOW,
    answer_below,
    chunk_key,
    holder_below,
    lru_state,
    most_chunks,
    pass_ids,
    read_below,
    refcount_free,
    rows,
    split_by_source,
    verdicts,
    write_through,
)
from yaotu_trace.prefix.tiers.offer_counts import admitted, count_offer, tracker

_SHIFT = 21
_M = np.int64(1 << _SHIFT)  # chunks per request are fewer (a 2M-chunk prompt is refused)
# Columns of a key's row.
_RANK, _SEEN0, _SEEN1, _STAMP, _LAST, _NEXT, _PREV, _HELD = range(8)
_FREE, _PINNED, _PENDING = -1, 1, 2  # the values of _HELD
# Slots of the scalars array: counters, the list's ends (least, most recent) and the lowest
# row of each live request's segment (its marker when empty).
(_COUNTER, _RESIDENT, _STORED, _EVICTED, _FAILED, _LOADED, _STEP, _CALL, _BOTTOM, _TOP,
 _LOW) = range(11)
_SCALARS = _LOW + 2


@nb.njit(cache=True, inline="always")
def _unlink(st, sc, k):  # pragma: no cover - compiled
    """Out of the list (its rank not yet changed); a segment it was the lowest row of starts
    at the row above it."""
    p = st[k, _PREV]
    q = st[k, _NEXT]
    if p >= 0:
        st[p, _NEXT] = q
    else:
        sc[_BOTTOM] = q
    if q >= 0:
        st[q, _PREV] = p
    else:
        sc[_TOP] = p
    if sc[_LOW] == k:
        sc[_LOW] = q
    elif sc[_LOW + 1] == k:
        sc[_LOW + 1] = q


@nb.njit(cache=True, inline="always")
def _link_top(st, sc, k):  # pragma: no cover - compiled
    """Onto the most recent end (its rank the highest yet)."""
    t = sc[_TOP]
    st[k, _PREV] = t
    st[k, _NEXT] = -1
    if t >= 0:
        st[t, _NEXT] = k
    else:
        sc[_BOTTOM] = k
    sc[_TOP] = k


@nb.njit(cache=True, inline="always")
def _link(st, sc, k, s, hint):  # pragma: no cover - compiled
    """Into the segment of live request slot s (k's rank is that request's), in rank order.
    `hint`, the key linked just before in the same pass, is where to start when it ranks
    above k (a request's chunks come head to tail, each ranked below the last): one step
    down. Otherwise the search runs up from the segment's lowest row, where a request's next
    chunk goes; it stops at the segment's marker at the latest."""
    r = st[k, _RANK]
    if hint >= 0 and st[hint, _RANK] > r and (st[hint, _RANK] >> _SHIFT) == (r >> _SHIFT):
        q = hint
        p = st[q, _PREV]
        while p >= 0 and st[p, _RANK] > r:
            q = p
            p = st[q, _PREV]
    else:
        q = sc[_LOW + s]
        p = st[q, _PREV]
        while st[q, _RANK] < r:
            p = q
            q = st[q, _NEXT]
    st[k, _PREV] = p
    st[k, _NEXT] = q
    if p >= 0:
        st[p, _NEXT] = k
    else:
        sc[_BOTTOM] = k
    st[q, _PREV] = k
    if q == sc[_LOW + s]:
        sc[_LOW + s] = k


@nb.njit(cache=True, inline="always")
def _rerank(st, sc, k, r, s, hint):  # pragma: no cover - compiled
    """Give resident key k rank r, in the segment of live request slot s."""
    _unlink(st, sc, k)
    st[k, _RANK] = r
    _link(st, sc, k, s, hint)


@nb.njit(cache=True, inline="always")
def _request_rank(req_rank, st, sc, req, s):  # pragma: no cover - compiled
    """The request's rank, given at its first call: the counter's next value, and its
    segment's marker (ranked above every key of that rank) on the most recent end."""
    if req_rank[req] == 0:
        sc[_COUNTER] += 1
        req_rank[req] = sc[_COUNTER]
        z = st.shape[0] - 2 + s
        st[z, _RANK] = sc[_COUNTER] * _M + (_M - 1)
        _link_top(st, sc, z)
        sc[_LOW + s] = z
    return req_rank[req]


@nb.njit(cache=True)
def _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st, sc, req_rank,
            counts, threshold):  # pragma: no cover - compiled
    """`_record_request_cache_access` over chunks lo..hi-1 (resident pending keys skipped: a
    store records only new and ready keys; with `missing_only` every resident key is outside
    the call): keys new to the request raise their rank, the request's own rank given at its
    first new key. The request becomes each key's last use. Returns the keys not resident and
    the resident ones evictable."""
    s = seen - _SEEN0
    r_req = -1
    hint = -1
    new = 0
    free = 0
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        resident = st[k, _RANK] >= 0
        if missing_only and resident:
            continue
        st[k, _LAST] = req
        if not resident:
            if not admitted(counts[0], threshold, k):
                continue  # below the store threshold: neither stored nor accessed
            new += 1
        elif st[k, _HELD] == _PENDING:
            continue
        elif st[k, _HELD] == _FREE:
            free += 1
        if st[k, seen] == req:
            continue
        st[k, seen] = req
        if r_req < 0:
            r_req = _request_rank(req_rank, st, sc, req, s)
        r = r_req * _M + (_M - 2 - j)
        if resident and st[k, _RANK] < r:
            _rerank(st, sc, k, r, s, hint)
            hint = k
    return new, free


@nb.njit(cache=True)
def _store(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, sc,
           req_rank, chosen, step_keys, evictions, counts, threshold):  # pragma: no cover
    """`prepare_store` of chunks lo..hi-1 (only those the CPU tier lacks when
    `missing_only`): False when the offer fails whole. Each eviction is recorded in a column of
    `evictions`: the key, the offering request, the key's last use. The chunks stored are the
    step's last keys (`lru_rows.write_through` takes them to the tiers below)."""
    if threshold >= 2:
        count_offer(ids, start, per_chunk, lo, hi, counts[0], counts[1])
    new, protected = _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st, sc,
                             req_rank, counts, threshold)
    if new == 0:
        return True
    needed = new - (capacity - sc[_RESIDENT])
    # Fail fast, as the manager does, when the evictable keys outside the offer are too few
    # (every resident key is evictable but this step's loads and stores).
    if needed > 0 and needed > sc[_RESIDENT] - sc[_STEP] - protected:
        sc[_FAILED] += 1
        return False
    call = 0  # the offer's stamp, when keys outside it can go: evictions, or a partial offer
    if missing_only or needed > 0:
        sc[_CALL] += 1
        call = sc[_CALL]
        for j in range(lo, hi):
            k = chunk_key(ids, start, per_chunk, j)
            if not missing_only or st[k, _RANK] < 0:
                st[k, _STAMP] = call
    if needed > 0:
        # The least recent evictable keys outside the offer (a marker is never free).
        got = 0
        k = sc[_BOTTOM]
        while k >= 0 and got < needed:
            if st[k, _STAMP] != call and st[k, _HELD] == _FREE:
                chosen[got] = k
                got += 1
            k = st[k, _NEXT]
        if got < needed:
            sc[_FAILED] += 1
            return False
        for c in range(got):
            k = chosen[c]
            _unlink(st, sc, k)
            st[k, _RANK] = -1
            e = sc[_EVICTED] + c
            evictions[0, e] = k
            evictions[1, e] = req
            evictions[2, e] = st[k, _LAST]
        sc[_RESIDENT] -= got
        sc[_EVICTED] += got
    s = seen - _SEEN0
    r_req = _request_rank(req_rank, st, sc, req, s)
    hint = -1
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        if (st[k, _RANK] < 0 and (call == 0 or st[k, _STAMP] == call)
                and admitted(counts[0], threshold, k)):
            st[k, _RANK] = r_req * _M + (_M - 2 - j)
            _link(st, sc, k, s, hint)
            hint = k
            st[k, _HELD] = _PENDING
            step_keys[sc[_STEP]] = k
            sc[_STEP] += 1
            sc[_RESIDENT] += 1
            sc[_STORED] += 1
    return True


@nb.njit(cache=True, inline="always")
def _offer(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, sc, req_rank,
           chosen, step_keys, evictions, lower, counts, threshold):  # pragma: no cover - compiled
    """`_store`, then what it stored written through to the tiers below."""
    stored_from = sc[_STEP]
    ok = _store(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, sc,
                req_rank, chosen, step_keys, evictions, counts, threshold)
    if ok and lower[3].size > 0:  # lower: rows, ends, sizes, capacities, counters, evictions
        write_through(step_keys, stored_from, sc[_STEP], lower, req)
    return ok


@nb.njit(cache=True)
def _finish(ids, start, per_chunk, chunks, req, seen, st, sc, req_rank):  # pragma: no cover
    """`on_request_finished`: every key the request saw, tail to head, most recent. Every key
    of its segment is one it saw, so the segment is left empty and its marker goes."""
    for j in range(chunks - 1, -1, -1):
        k = chunk_key(ids, start, per_chunk, j)
        if st[k, seen] == req and st[k, _RANK] >= 0:
            sc[_COUNTER] += 1
            _unlink(st, sc, k)
            st[k, _RANK] = sc[_COUNTER] * _M + (_M - 1)
            _link_top(st, sc, k)
    if req_rank[req] > 0:
        s = seen - _SEEN0
        _unlink(st, sc, st.shape[0] - 2 + s)
        sc[_LOW + s] = -1


@nb.njit(cache=True)
def _end_step(step_keys, st, sc):  # pragma: no cover - compiled
    """Every transfer of the step completes: loads unpin, stores become ready (evictable)."""
    for s in range(sc[_STEP]):
        st[step_keys[s], _HELD] = _FREE
    sc[_STEP] = 0


def vllm_offload_pass(offsets: np.ndarray, ids: np.ndarray, gpu_hit_blocks: np.ndarray,
                      refused: np.ndarray, per_chunk: int, chunk_tokens: int, block: int,
                      capacity: int, num_keys: int, lower_capacity: tuple[int, ...] = (),
                      store_threshold: int = 0) -> tuple:
    """Hit tokens per tier and request (the CPU tier's row first, then the tiers below it in
    the order of `lower_capacity`); the CPU tier's stored, evicted, failed offers and loaded
    chunks; per CPU eviction the key (chain id of the chunk's last block), the request whose
    offer evicted it and the request that used it last; and the lower tiers' counters and
    evictions (`lru_rows.outcome`'s arrays); last, per request, the first chunk (from the
    prompt's start) no tier held at its lookup (−1: none, or never looked up).

    The large arrays are views of one numpy array: numpy asks the kernel for huge pages for
    it, while numba's own allocations (or several numpy ones) fault page by page and glibc hands
    them back after each pass (3,769 faults, 9 ms a pass on the Mooncake conversation trace;
    one array: none).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    keys = max(num_keys, 1)
    chunks = int(offsets[n]) // per_chunk
    max_chunks = most_chunks(offsets, per_chunk)
    room = lru_rows.first_room(chunks, len(lower_capacity))
    rows_st = keys + 2  # the keys' rows, then the two live requests' markers
    # The rows are touched whole; the evictions' room only as far as the tier evicts.
    need = 8 * (8 * rows_st + (7 * len(lower_capacity) * keys if lower_capacity else 0)
                + (3 * keys if store_threshold >= 2 else 0))
    with memory.reserved(need, f"vLLM's CPU offload over {keys:,} chunk keys",
                         "use a larger --block-size or --tier-chunk (or fewer --jobs)"):
        while True:  # promotions again and again can outgrow the evictions' room: more
            work = np.empty(8 * rows_st + 3 * room, dtype=np.int64)
            st = work[:8 * rows_st].reshape(rows_st, 8)
            st.fill(-1)  # not resident, not held, never seen
            st[keys:, _HELD] = _PINNED  # a marker is never evicted
            evictions = work[8 * rows_st:].reshape(3, room)
            lower_rows, lower_evictions = rows(keys if lower_capacity else 1,
                                               len(lower_capacity), 0, room)
            answers = verdicts(len(lower_capacity), keys if lower_capacity else 1)
            lends, lsize, lcounters, _ = lru_state(len(lower_capacity), 0)
            hits = np.zeros((1 + len(lower_capacity), n), dtype=np.int64)
            lacking = np.full(n, -1, dtype=np.int64)  # the first chunk no tier held at lookup
            sc = np.zeros(_SCALARS, dtype=np.int64)
            sc[_BOTTOM:] = -1  # the list and the segments empty
            per_request = np.zeros((3, n), dtype=np.int64)
            stored, evicted, failed, loaded, stalled = _pass(
                offsets, pass_ids(ids),
                np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
                np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
                np.int64(capacity), st, evictions, lower_rows,
                np.asarray(lower_capacity, dtype=np.int64), lower_evictions, answers,
                tracker(keys, store_threshold), np.int64(store_threshold), lends, lsize,
                lcounters, hits, lacking, sc, per_request[0], per_request[1], per_request[2],
                np.empty(max_chunks + 1, dtype=np.int64),
                np.empty(3 * max_chunks + 3, dtype=np.int64),
                np.empty(max_chunks, dtype=np.int64))
            if stalled != -2:
                break
            room *= 2
        e = int(evicted)
        return (hits, int(stored), e, int(failed), int(loaded), evictions[0, :e].copy(),
                evictions[1, :e].copy(), evictions[2, :e].copy(), lcounters,
                lower_evictions, lacking, int(stalled))


@refcount_free
def _pass(offsets, ids, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block, capacity, st,
          evictions, lst, lcapacity, levictions, answers, counts, threshold, lends, lsize,
          lcounters, hits, lacking, sc, req_rank, req_next, req_failed, chosen, step_keys,
          source):  # pragma: no cover - compiled
    """`vllm_offload_pass` on its arrays: a row per key and two markers, a column per
    eviction, the lower tiers' rows, sizes, evictions and answers (`lru_rows.ask_below`), the
    offer counts of a store threshold (`offer_counts.py`), the lower tiers' ends, sizes and
    counters, the hits and first chunks lacking it fills, the scalars, three arrays per request
    (its rank, its next chunk to offer, whether its offer failed) and a request's room (the
    chunks an offer evicts, the step's keys, each chunk's source). Returns the CPU tier's
    stored, evicted, failed offers and loaded chunks, and the request whose lookup never
    settles (−1: none; the pass stops there; −2: out of room for the evictions)."""
    n = offsets.size - 1
    below = lcapacity.size
    lower = (lst, lends, lsize, lcapacity, lcounters, levictions)
    # np.int64 and np.bool_, not literals: numba compiles a helper once per literal value it
    # is given (the pass took 12 s to compile on a first run with them, 4.6 s without).
    no, zero = np.bool_(False), np.int64(0)
    prev = np.int64(-1)
    prev_seen = np.int64(_SEEN1)
    step = np.int64(0)  # the steps ended: an answer from below asked in this one is still in flight
    for i in range(n):
        if refused[i]:
            continue
        seen = _SEEN0 if prev_seen == _SEEN1 else _SEEN1
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        g = gpu_hit_blocks[i] * block
        first = g // chunk_tokens
        if below > 0:
            source[:max(chunks - first, 0)] = 0  # 0: the CPU tier, t + 1: promoted from tier t
        p_chunks = 0 if prev < 0 else (offsets[prev + 1] - offsets[prev]) // per_chunk
        passes = 0
        if below == 0:  # the CPU tier alone: one lookup, nothing to wait for
            passes = 1
            run = 0
            while (first + run < chunks
                   and st[chunk_key(ids, start, per_chunk, first + run), _RANK] >= 0):
                run += 1
        while below > 0:  # a lookup a step until none is pending (`vllm_native._lookup_pass`)
            passes += 1
            if sc[_EVICTED] + 2 * chunks + p_chunks + 1 > evictions.shape[1]:
                # Out of room for the evictions: run again with more.
                return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -2
            run, deferred = _lookup_below(ids, start, per_chunk, first, chunks, g, chunk_tokens,
                                          i, prev, passes == 1, step, seen, capacity, st, sc,
                                          req_rank, chosen, step_keys, evictions, counts,
                                          answers, source, lower)
            if not deferred:
                break
            if passes == 1 and prev >= 0:
                _retire(ids, offsets, per_chunk, prev, prev_seen, capacity, st, sc, req_rank,
                        req_next, req_failed, chosen, step_keys, evictions, lower, counts,
                        threshold)
            if passes > 4 * (chunks - first) + 8:
                return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], i
            _end_step(step_keys, st, sc)
            step += 1
        loaded = chunk_tokens * (first + run) - g
        if first + run < chunks:
            lacking[i] = first + run
        if loaded < chunk_tokens:
            loaded = 0
        if loaded > 0:
            for j in range(first, first + run):
                k = chunk_key(ids, start, per_chunk, j)
                st[k, _HELD] = _PINNED
                step_keys[sc[_STEP]] = k
                sc[_STEP] += 1
            _access(ids, start, per_chunk, first, first + run, no, i, seen, st, sc,
                    req_rank, counts, zero)
            sc[_LOADED] += run
            req_next[i] = first + run
        elif chunks > 0:
            ok = _offer(ids, start, per_chunk, zero, chunks, no, i, seen, capacity, st, sc,
                        req_rank, chosen, step_keys, evictions, lower, counts, threshold)
            req_failed[i] = 0 if ok else 1
            if ok:
                req_next[i] = chunks
        if passes == 1 and prev >= 0:  # the request before finishes in this one's first step
            # (`_retire`, written out: the one call a request without tiers below makes)
            p_start = offsets[prev]
            if req_failed[prev] != 0 and req_next[prev] < p_chunks:
                _offer(ids, p_start, per_chunk, req_next[prev], p_chunks, no, prev,
                       prev_seen, capacity, st, sc, req_rank, chosen, step_keys,
                       evictions, lower, counts, threshold)
            _finish(ids, p_start, per_chunk, p_chunks, prev, prev_seen, st, sc, req_rank)
        _end_step(step_keys, st, sc)
        step += 1
        if loaded > 0:
            if req_next[i] < chunks:
                ok = _offer(ids, start, per_chunk, req_next[i], chunks, no, i, seen,
                            capacity, st, sc, req_rank, chosen, step_keys,
                            evictions, lower, counts, threshold)
                req_failed[i] = 0 if ok else 1
                if ok:
                    req_next[i] = chunks
            _end_step(step_keys, st, sc)
            step += 1
            if below == 0:
                hits[0, i] = loaded
            else:
                split_by_source(hits, i, source, first, run, chunk_tokens, g)
        prev = i
        prev_seen = seen
    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -1


@nb.njit(cache=True)
def _lookup_below(ids, start, per_chunk, first, chunks, g, chunk_tokens, req, prev, prev_live,
                  step, seen, capacity, st, sc, req_rank, chosen, step_keys, evictions, counts,
                  answers, source, lower):  # pragma: no cover - compiled
    """One lookup of request `req` with tiers below the CPU (`vllm_native._lookup_pass`):
    its run, and whether a chunk is pending (the lookup runs again next step)."""
    lst = lower[0]
    below = lower[3].size
    run = 0
    deferred = False
    if chunks * chunk_tokens - g < chunk_tokens:
        # Less than a chunk to load: no lookup at all (OS `_lookup_complete_chunks`); what a
        # tier holds, for `lacking`.
        while first + run < chunks:
            k = chunk_key(ids, start, per_chunk, first + run)
            if not (st[k, _RANK] >= 0 or holder_below(lst, below, k) < below):
                break
            run += 1
        return run, False
    for j in range(first, chunks):
        k = chunk_key(ids, start, per_chunk, j)
        if st[k, _RANK] >= 0:
            run += 1
            if st[k, _HELD] == _PENDING:
                deferred = True
            continue
        t = answer_below(answers, lst, k, req, prev, prev_live, step)
        if t == NOT_BELOW:
            break
        if t == ASKED:  # the answer comes next step
            deferred = True
            continue
        if not _store(ids, start, per_chunk, j, j + 1, np.bool_(True), req, seen, capacity, st,
                      sc, req_rank, chosen, step_keys, evictions, counts, np.int64(0)):
            break
        source[j - first] = t + 1
        read_below(lower, t, k)
        run += 1
        deferred = True  # promoted: ready next step
    return run, deferred


@nb.njit(cache=True)
def _retire(ids, offsets, per_chunk, prev, prev_seen, capacity, st, sc, req_rank, req_next,
            req_failed, chosen, step_keys, evictions, lower, counts,
            threshold):  # pragma: no cover - compiled
    """The connector sees request `prev` finish: a failed offer offered again, then its keys
    ranked (`_finish`)."""
    p_start = offsets[prev]
    p_chunks = (offsets[prev + 1] - p_start) // per_chunk
    if req_failed[prev] != 0 and req_next[prev] < p_chunks:
        _offer(ids, p_start, per_chunk, req_next[prev], p_chunks, np.bool_(False), prev, prev_seen,
               capacity, st, sc, req_rank, chosen, step_keys, evictions, lower, counts,
               threshold)
    _finish(ids, p_start, per_chunk, p_chunks, prev, prev_seen, st, sc, req_rank)
