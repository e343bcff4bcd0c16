"""vLLM's CPU offload tier compiled: the rules of `vllm_native.py` in one numba loop.

The same connector and manager, request by request (`vllm_native.py` has the rules and their
sources; `tests/prefix/test_tiers_vllm_golden.py` checks this kernel against vLLM itself and
`tests/prefix/test_tiers.py` against the Python model). Keys are chain ids (dense), so the
manager's dicts become one 16-byte record per key, four to a cache line: its LRU rank (−1: not
resident), its last use and its place in the finished queue; and an `aux` row read only while a
transfer holds keys or an offer is stamped: what holds it in which step (a load pins it, a store
leaves it pending until the step ends: a step's end is one counter's increment, not a pass over
its keys) and the stamp of the offer that must not evict it. Whether a live request (the one
scheduled, and the one whose finish the connector has not seen yet) has seen a key is kept by
the request's chunk position (`seen_at`, a row per live request): a key appears once in a
prompt. A rank (a, b) is packed as a·2^21 + b: a request's access or insert gives (R, 2^21 − 2 −
j) for its chunk j (the tail below the head, as vLLM's (R, −position)), its finish (counter,
2^21 − 1).

vLLM keeps the evictable keys in a lazy heap; here no heap is needed. Every rank's first part is
a value of one counter, and only two requests are live at a time, so only their two ranks hold
more than one key. A finish gives each key a counter value of its own, the highest yet: the
finished keys are a queue (int32 keys) in rank order, appended at its tail, an entry marked dead
where it sits when its key takes another rank (the key's record knows the place). A live
request's rank falls between the keys finished before it was given and those after: its mark,
the queue's tail at that moment. Its own keys are found among its chunks, tail first, by their
rank. An eviction takes the queue's entries before the first live request's mark, then that
request's chunks, the entries before the other's mark, its chunks, and the rest of the queue,
passing over a key a transfer of this step holds and the offer's own keys. Those are stamped
only when the scan gets past the queue's first part (none of them is there: a key the offering
request saw took its rank then, or was held). Dead entries leave at the front, and the queue is
compacted when its end is reached (its live entries are at most the resident keys; the array is
eight times that, so compactions are rare). On the Mooncake conversation trace
(`benchmarks/tiers.py`: 276,491 blocks, 143,173 evictions) the pass takes about 3.3 ms where a
list threaded through 64-byte rows in rank order took 4.8 ms (it read two neighbours' rows at
every move, and every stale check read a cold row); on 1e9 tokens (62 million blocks) about 0.6
s where it took 0.90 s (16-byte records: 6 % less than 32-byte ones at both sizes). A store
threshold counts each offer first (`offer_counts.py`); a chunk below it is neither stored nor
accessed. Tiers below the CPU are LRU lists (`lru_rows.py`): written through on every store,
asked a step late (`lru_rows.ask_below`, one answer per tier and key), their chunks promoted one
at a time and the lookup run again each step until nothing is pending
(`vllm_native._lookup_pass`).
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
    inlined,
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
from yaotu_trace.prefix.tiers.offer_counts import admits, count_offer, tracker

_SHIFT = 21
_M = np.int64(1 << _SHIFT)  # chunks per request are fewer (a 2M-chunk prompt is refused)
# A key's record.
_ROW = np.dtype([("rank", np.int64), ("last", np.int32), ("qpos", np.int32)],
                align=True)  # 16 bytes: four keys a cache line
# What a key's `aux` row holds, rarely read: the step and kind of a transfer holding it
# (step·4 + kind, the step's id modulo 2^29: two steps 2^29 apart, 5e8 steps, are one), and
# the stamp of the offer that must not evict it.
_HELD_CODE, _STAMP = 0, 1
_STEP_MASK = (1 << 29) - 1
_SEEN0, _SEEN1 = 0, 1  # the live request slots (rows of `seen_at`)
_FREE, _PINNED, _PENDING = -1, 1, 2  # what holds a key in this step
# Slots of the scalars array: counters, the finished queue's head and tail, the step's id,
# and per live request slot (two each) its request (−1: none), its first block, the highest
# chunk that may hold a key of its rank, and its mark in the queue.
(_COUNTER, _RESIDENT, _STORED, _EVICTED, _FAILED, _LOADED, _STEP, _CALL, _HEAD, _TAIL,
 _STEP_ID, _LIVE, _START, _TOPJ, _MARK) = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17)
_SCALARS = _MARK + 2


@nb.njit(cache=True, inline="always")
def _finished_rank(c):  # pragma: no cover - compiled
    """The rank a finish gives: counter value c, above every chunk rank of the same value."""
    return c * _M + (_M - 1)


@nb.njit(cache=True, inline="always")
def _leave_queue(st, queue, k):  # pragma: no cover - compiled
    """Before resident key k takes another rank (or none): its queue entry, if its rank is a
    finish's, is dead from now (marked there, so scans of the queue read the queue alone)."""
    if (st[k].rank & (_M - 1)) == _M - 1:
        queue[st[k].qpos] = -1


@nb.njit(cache=True, inline="always")
def _raise(st, sc, queue, k, r, s, j):  # pragma: no cover - compiled
    """Key k takes rank r of live slot s's request, whose chunk j it is."""
    if st[k].rank >= 0:
        _leave_queue(st, queue, k)
    st[k].rank = r
    if j > sc[_TOPJ + s]:
        sc[_TOPJ + s] = j


@nb.njit(cache=True, inline="always")
def _request_rank(req_rank, sc, req, s):  # pragma: no cover - compiled
    """The request's rank, given at its first call: the counter's next value, so every key
    finished before it lies in the queue before the queue's tail of now (its mark)."""
    if req_rank[req] == 0:
        sc[_COUNTER] += 1
        req_rank[req] = sc[_COUNTER]
        sc[_MARK + s] = sc[_TAIL]
    return req_rank[req]


@nb.njit(cache=True, inline="always")
def _held(aux, sc, k):  # pragma: no cover - compiled
    """What holds key k in this step: a load (_PINNED), a store (_PENDING), or nothing (and
    nothing at all before this step's first transfer, without reading the key's row)."""
    if sc[_STEP] == 0:
        return _FREE
    code = aux[k, _HELD_CODE]
    return code & 3 if code >> 2 == (sc[_STEP_ID] & _STEP_MASK) else _FREE


@nb.njit(cache=True, inline="always")
def _hold(aux, sc, k, kind):  # pragma: no cover - compiled
    """A transfer of this step holds key k until the step ends."""
    aux[k, _HELD_CODE] = (sc[_STEP_ID] & _STEP_MASK) * 4 + kind


@nb.njit(cache=True, inline="always")
def _evictable(aux, sc, k, call, stamped):  # pragma: no cover - compiled
    """Outside the offer (its stamp, when the offer is stamped) and held by no transfer of
    this step."""
    return not (stamped and aux[k, _STAMP] == call) and _held(aux, sc, k) == _FREE


@inlined
def _choose(ids, per_chunk, st, aux, sc, queue, req_rank, chosen, needed, call, start, lo, hi,
            stamp):  # pragma: no cover - compiled
    """The `needed` least recent evictable keys into `chosen[0]`; returns how many there were.

    The order is vLLM's heap's: the finished keys (the queue, oldest first; an entry marked
    dead, its key ranked anew since, is passed over) with the live requests' chunks between
    them, each live request's below every key finished after its rank was given (its mark),
    tail first.

    The offer's own keys (chunks lo..hi-1 of the request at `start`) are not evictable: with
    `stamp` they take the offer's stamp `call`, only when the scan passes the keys finished
    before the live requests' ranks. None of those is the offer's and evictable: a key the
    offering request saw took its rank then, or was held, and finishes after it. So most
    offers never stamp.
    """
    while sc[_HEAD] < sc[_TAIL] and queue[sc[_HEAD]] < 0:  # dead entries leave for good
        sc[_HEAD] += 1
    got = 0
    pos = sc[_HEAD]
    # The live slots in rank order (the one ranked first comes first), then none.
    s0 = -1
    s1 = -1
    r0 = np.int64(0)
    r1 = np.int64(0)
    for s in range(2):
        q = sc[_LIVE + s]
        if q >= 0 and req_rank[q] > 0:
            if s0 < 0:
                s0 = s
                r0 = req_rank[q]
            elif req_rank[q] < r0:
                s1, r1 = s0, r0
                s0 = s
                r0 = req_rank[q]
            else:
                s1 = s
                r1 = req_rank[q]
    stamped = False
    for phase in range(3):
        s = s0 if phase == 0 else (s1 if phase == 1 else -1)
        bound = sc[_MARK + s] if s >= 0 else sc[_TAIL]  # the keys finished before that rank
        while pos < bound and got < needed:
            k = queue[pos]
            if k >= 0 and _evictable(aux, sc, k, call, stamped):
                chosen[0, got] = k
                got += 1
            pos += 1
        if got >= needed or s < 0:
            continue
        if stamp and not stamped:
            for j in range(lo, hi):
                aux[chunk_key(ids, start, per_chunk, j), _STAMP] = call
            stamped = True
        live_start = sc[_START + s]
        base = (r0 if phase == 0 else r1) * _M + (_M - 2)
        j = sc[_TOPJ + s]
        top = True  # the chunks above the first one of this rank hold none: skip them next time
        while j >= 0 and got < needed:
            k = chunk_key(ids, live_start, per_chunk, j)
            if st[k].rank == base - j:
                top = False
                if _evictable(aux, sc, k, call, stamped):
                    chosen[0, got] = k
                    got += 1
            elif top:
                sc[_TOPJ + s] = j - 1
            j -= 1
        if got >= needed:
            break
    return got


@inlined
def _enqueue_room(st, sc, queue, more):  # pragma: no cover - compiled
    """Room at the queue's tail for `more` entries: the live ones moved to its start when the
    array's end is near (they are at most the resident keys, so the room is amortised)."""
    if sc[_TAIL] + more <= queue.size:
        return
    w = 0
    for p in range(sc[_HEAD], sc[_TAIL]):
        for s in range(2):  # a live request's mark moves with the entries before it (with one
            # request at a time it is the tail when a finish compacts; this holds for any order)
            if sc[_MARK + s] == p:
                sc[_MARK + s] = w
        k = queue[p]
        if k >= 0:
            queue[w] = k
            st[k].qpos = w
            w += 1
    for s in range(2):
        if sc[_MARK + s] >= sc[_TAIL]:
            sc[_MARK + s] = w
        elif sc[_MARK + s] < sc[_HEAD]:
            sc[_MARK + s] = 0
    sc[_HEAD] = 0
    sc[_TAIL] = w


@inlined
def _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st, aux, seen_at, sc, queue,
            req_rank, counts, threshold, chosen):  # pragma: no cover - compiled
    """`_record_request_cache_access` over chunks lo..hi-1 (resident pending keys skipped: a
    store records only new and ready keys; with `missing_only` every resident key is outside
    the call): keys new to the request raise their rank, the request's own rank given at its
    first new key. The request becomes each key's last use. Returns the keys not resident
    (their chunks, in order, in `chosen[1]`: the ones a store writes) and the resident ones
    evictable."""
    s = seen - _SEEN0
    r_req = -1
    new = 0
    free = 0
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        resident = st[k].rank >= 0
        if missing_only and resident:
            continue
        st[k].last = req
        if not resident:
            if not admits(counts, threshold, k):
                continue  # below the store threshold: neither stored nor accessed
            chosen[1, new] = j
            new += 1
        else:
            held = _held(aux, sc, k)
            if held == _PENDING:
                continue
            if held == _FREE:
                free += 1
        if seen_at[seen, j] == req:
            continue
        seen_at[seen, j] = req
        if r_req < 0:
            r_req = _request_rank(req_rank, sc, req, s)
        r = r_req * _M + (_M - 2 - j)
        if resident and st[k].rank < r:
            _raise(st, sc, queue, k, r, s, j)
    return new, free


@inlined
def _store(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, aux, seen_at, sc,
           queue, req_rank, chosen, step_keys, evictions, counts, threshold):  # pragma: no cover
    """`prepare_store` of chunks lo..hi-1 (only those the CPU tier lacks when
    `missing_only`): False when the offer fails whole. Each eviction is recorded in a column of
    `evictions`: the key, the offering request, the key's last use. The chunks stored are the
    step's last keys (`lru_rows.write_through` takes them to the tiers below). It writes the
    chunks `_access` found missing (`chosen[1]`) without reading the others again: none of
    them is evicted (the offer's own keys are not evictable, and a missing key is not
    resident), so they are the ones the manager stores."""
    if counts is not None:  # a store threshold's offer counts (`offer_counts.tracker`)
        count_offer(ids, start, per_chunk, lo, hi, counts[0], counts[1])
    new, protected = _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st, aux,
                             seen_at, sc, queue, req_rank, counts, threshold, chosen)
    if new == 0:
        return True
    needed = new - (capacity - sc[_RESIDENT])
    # Fail fast, as the manager does, when the evictable keys outside the offer are too few
    # (every resident key is evictable but this step's loads and stores).
    if needed > 0 and needed > sc[_RESIDENT] - sc[_STEP] - protected:
        sc[_FAILED] += 1
        return False
    call = 0  # the offer's stamp when it evicts; an evicted key's is −call − 1
    if needed > 0:
        # The least recent evictable keys outside the offer (a resident key of a partial
        # offer is outside it).
        sc[_CALL] += 1
        call = sc[_CALL]
        got = _choose(ids, per_chunk, st, aux, sc, queue, req_rank, chosen, needed, call, start, lo,
                      hi, not missing_only)
        if got < needed:
            sc[_FAILED] += 1
            return False
        for c in range(got):
            k = chosen[0, c]
            _leave_queue(st, queue, k)
            st[k].rank = -1
            if missing_only:  # a resident key outside a partial offer: not stored back
                aux[k, _STAMP] = -call - 1
            e = sc[_EVICTED] + c
            evictions[0, e] = k
            evictions[1, e] = req
            evictions[2, e] = st[k].last
        sc[_RESIDENT] -= got
        sc[_EVICTED] += got
    s = seen - _SEEN0
    r_req = _request_rank(req_rank, sc, req, s)
    step = sc[_STEP]
    for f in range(new):
        j = chosen[1, f]
        k = chunk_key(ids, start, per_chunk, j)
        st[k].rank = r_req * _M + (_M - 2 - j)
        _hold(aux, sc, k, _PENDING)
        step_keys[step] = k
        step += 1
    if chosen[1, new - 1] > sc[_TOPJ + s]:
        sc[_TOPJ + s] = chosen[1, new - 1]
    sc[_RESIDENT] += new
    sc[_STORED] += new
    sc[_STEP] = step
    return True


@inlined
def _offer(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, aux, seen_at, sc,
           queue, req_rank, chosen, step_keys, evictions, lower, counts,
           threshold):  # pragma: no cover - compiled
    """`_store`, then what it stored written through to the tiers below (`lower`: their
    rows, ends, sizes, capacities, counters, evictions; None: none)."""
    stored_from = sc[_STEP]
    ok = _store(ids, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st, aux,
                seen_at, sc, queue, req_rank, chosen, step_keys, evictions, counts, threshold)
    if lower is not None and ok:
        write_through(step_keys, stored_from, sc[_STEP], lower, req)
    return ok


@inlined
def _finish(ids, start, per_chunk, chunks, req, seen, st, seen_at, sc, queue,
            req_rank):  # pragma: no cover - compiled
    """`on_request_finished`: every key the request saw, tail to head, most recent (onto the
    queue's tail). Every key of its rank is one it saw, so none is left with it."""
    _enqueue_room(st, sc, queue, chunks)
    t = sc[_TAIL]
    counter = sc[_COUNTER]  # a local: the array's slot would be reloaded after every store
    for j in range(chunks - 1, -1, -1):
        k = chunk_key(ids, start, per_chunk, j)
        if seen_at[seen, j] == req and st[k].rank >= 0:
            counter += 1
            _leave_queue(st, queue, k)
            st[k].rank = _finished_rank(counter)
            st[k].qpos = t
            queue[t] = k
            t += 1
    sc[_TAIL] = t
    sc[_COUNTER] = counter
    sc[_LIVE + seen - _SEEN0] = -1


@nb.njit(cache=True, inline="always")
def _end_step(sc):  # pragma: no cover - compiled
    """Every transfer of the step completes: loads unpin, stores become ready (evictable), as
    the held keys' step is over."""
    sc[_STEP_ID] += 1
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
    # The finished queue (int32 keys) holds at most the resident keys live; eight times that
    # and a request's chunks leave room for its dead entries between compactions.
    queue_words = (8 * min(max(int(capacity), 1), keys) + 2 * max_chunks + 16) // 2
    # The rows are touched whole; the evictions' room only as far as the tier evicts.
    need = 8 * (3 * keys + queue_words
                + (7 * len(lower_capacity) * keys if lower_capacity else 0)
                + (3 * keys if store_threshold >= 2 else 0))
    with memory.reserved(need, f"vLLM's CPU offload over {keys:,} chunk keys",
                         "use a larger --block-size or --tier-chunk (or fewer --jobs)"):
        while True:  # promotions again and again can outgrow the evictions' room: more
            rows_end = 3 * keys  # a record is two int64 words, its aux row one
            work = np.empty(rows_end + queue_words + 3 * room, dtype=np.int64)
            work[:rows_end].fill(-1)  # not resident, not held, never stamped
            st = work[:2 * keys].view(_ROW)
            aux = work[2 * keys:rows_end].view(np.int32).reshape(keys, 2)
            seen_at = np.full((2, max(max_chunks, 1)), -1, dtype=np.int32)
            queue = work[rows_end:rows_end + queue_words].view(np.int32)
            evictions = work[rows_end + queue_words:].reshape(3, room)
            lower_rows, lower_evictions = rows(keys if lower_capacity else 1,
                                               len(lower_capacity), 0, room)
            answers = verdicts(len(lower_capacity), keys if lower_capacity else 1)
            lends, lsize, lcounters, _ = lru_state(len(lower_capacity), 0)
            hits = np.zeros((1 + len(lower_capacity), n), dtype=np.int64)
            lacking = np.full(n, -1, dtype=np.int64)  # the first chunk no tier held at lookup
            sc = np.zeros(_SCALARS, dtype=np.int64)
            sc[_LIVE:_LIVE + 2] = -1  # no live request
            per_request = np.zeros((3, n), dtype=np.int64)
            stored, evicted, failed, loaded, stalled = _pass(
                offsets, pass_ids(ids),
                np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
                np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
                np.int64(capacity), st, aux, seen_at, queue, evictions,
                # None without tiers below: the pass compiled without their code (`_pass`)
                (lower_rows, lends, lsize, np.asarray(lower_capacity, dtype=np.int64),
                 lcounters, lower_evictions) if lower_capacity else None, answers,
                tracker(keys, store_threshold), np.int64(store_threshold),
                hits, lacking, sc, per_request[0], per_request[1], per_request[2],
                np.empty((2, max_chunks + 1), dtype=np.int64),
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
          aux, seen_at, queue, evictions, lower, answers, counts, threshold, hits, lacking, sc,
          req_rank, req_next, req_failed, chosen, step_keys, source):  # pragma: no cover
    """`vllm_offload_pass` on its arrays: a row per key, the finished queue, a column per
    eviction, the lower tiers' rows, sizes, evictions and answers (`lru_rows.ask_below`), the
    offer counts of a store threshold (`offer_counts.py`), the lower tiers' ends, sizes and
    counters, the hits and first chunks lacking it fills, the scalars, three arrays per request
    (its rank, its next chunk to offer, whether its offer failed) and a request's room (the
    keys an offer evicts and the chunks it stores, the step's keys, each chunk's source).
    Returns the CPU tier's stored, evicted, failed offers and loaded chunks, and the request
    whose lookup never settles (−1: none; the pass stops there; −2: out of room for the
    evictions)."""
    n = offsets.size - 1
    below = 0
    if lower is not None:  # numba prunes the branches of a None `lower` before typing them
        below = lower[3].size
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
        s = seen - _SEEN0  # the request takes this live slot (its last one finished)
        sc[_LIVE + s] = i
        sc[_START + s] = start
        sc[_TOPJ + s] = -1
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
                   and st[chunk_key(ids, start, per_chunk, first + run)].rank >= 0):
                run += 1
        if lower is not None:
            # A lookup a step until none is pending (`vllm_native._lookup_pass`).
            while True:
                passes += 1
                if sc[_EVICTED] + 2 * chunks + p_chunks + 1 > evictions.shape[1]:
                    # Out of room for the evictions: run again with more.
                    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -2
                run, deferred = _lookup_below(ids, start, per_chunk, first, chunks, g,
                                              chunk_tokens, i, prev, passes == 1, step, seen,
                                              capacity, st, aux, seen_at, sc, queue, req_rank,
                                              chosen, step_keys, evictions, counts, answers,
                                              source, lower)
                if not deferred:
                    break
                if passes == 1 and prev >= 0:
                    _retire(ids, offsets, per_chunk, prev, prev_seen, capacity, st, aux, seen_at,
                            sc, queue, req_rank, req_next, req_failed, chosen, step_keys,
                            evictions, lower, counts, threshold)
                if passes > 4 * (chunks - first) + 8:
                    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], i
                _end_step(sc)
                step += 1
        loaded = chunk_tokens * (first + run) - g
        if first + run < chunks:
            lacking[i] = first + run
        if loaded < chunk_tokens:
            loaded = 0
        if loaded > 0:
            for j in range(first, first + run):
                k = chunk_key(ids, start, per_chunk, j)
                _hold(aux, sc, k, _PINNED)
                step_keys[sc[_STEP]] = k
                sc[_STEP] += 1
            _access(ids, start, per_chunk, first, first + run, no, i, seen, st, aux, seen_at, sc,
                    queue, req_rank, counts, zero, chosen)
            sc[_LOADED] += run
            req_next[i] = first + run
        elif chunks > 0:
            ok = _offer(ids, start, per_chunk, zero, chunks, no, i, seen, capacity, st, aux,
                        seen_at, sc, queue, req_rank, chosen, step_keys, evictions, lower, counts,
                        threshold)
            req_failed[i] = 0 if ok else 1
            if ok:
                req_next[i] = chunks
        if passes == 1 and prev >= 0:  # the request before finishes in this one's first step
            # (`_retire`, written out: the one call a request without tiers below makes)
            p_start = offsets[prev]
            if req_failed[prev] != 0 and req_next[prev] < p_chunks:
                _offer(ids, p_start, per_chunk, req_next[prev], p_chunks, no, prev,
                       prev_seen, capacity, st, aux, seen_at, sc, queue, req_rank, chosen,
                       step_keys, evictions, lower, counts, threshold)
            _finish(ids, p_start, per_chunk, p_chunks, prev, prev_seen, st, seen_at, sc, queue,
                    req_rank)
        _end_step(sc)
        step += 1
        if loaded > 0:
            if req_next[i] < chunks:
                ok = _offer(ids, start, per_chunk, req_next[i], chunks, no, i, seen,
                            capacity, st, aux, seen_at, sc, queue, req_rank, chosen, step_keys,
                            evictions, lower, counts, threshold)
                req_failed[i] = 0 if ok else 1
                if ok:
                    req_next[i] = chunks
            _end_step(sc)
            step += 1
            if below == 0:
                hits[0, i] = loaded
            else:
                split_by_source(hits, i, source, first, run, chunk_tokens, g)
        prev = i
        prev_seen = seen
    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -1


@inlined
def _lookup_below(ids, start, per_chunk, first, chunks, g, chunk_tokens, req, prev, prev_live,
                  step, seen, capacity, st, aux, seen_at, sc, queue, req_rank, chosen, step_keys,
                  evictions, counts, answers, source, lower):  # pragma: no cover - compiled
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
            if not (st[k].rank >= 0 or holder_below(lst, below, k) < below):
                break
            run += 1
        return run, False
    for j in range(first, chunks):
        k = chunk_key(ids, start, per_chunk, j)
        if st[k].rank >= 0:
            run += 1
            if _held(aux, sc, k) == _PENDING:
                deferred = True
            continue
        t = answer_below(answers, lst, k, req, prev, prev_live, step)
        if t == NOT_BELOW:
            break
        if t == ASKED:  # the answer comes next step
            deferred = True
            continue
        if not _store(ids, start, per_chunk, j, j + 1, np.bool_(True), req, seen, capacity, st,
                      aux, seen_at, sc, queue, req_rank, chosen, step_keys, evictions, counts,
                      np.int64(0)):
            break
        source[j - first] = t + 1
        read_below(lower, t, k)
        run += 1
        deferred = True  # promoted: ready next step
    return run, deferred


@inlined
def _retire(ids, offsets, per_chunk, prev, prev_seen, capacity, st, aux, seen_at, sc, queue,
            req_rank, req_next, req_failed, chosen, step_keys, evictions, lower, counts,
            threshold):  # pragma: no cover - compiled
    """The connector sees request `prev` finish: a failed offer offered again, then its keys
    ranked (`_finish`)."""
    p_start = offsets[prev]
    p_chunks = (offsets[prev + 1] - p_start) // per_chunk
    if req_failed[prev] != 0 and req_next[prev] < p_chunks:
        _offer(ids, p_start, per_chunk, req_next[prev], p_chunks, np.bool_(False), prev, prev_seen,
               capacity, st, aux, seen_at, sc, queue, req_rank, chosen, step_keys, evictions, lower,
               counts, threshold)
    _finish(ids, p_start, per_chunk, p_chunks, prev, prev_seen, st, seen_at, sc, queue,
            req_rank)
