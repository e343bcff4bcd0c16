"""vLLM's CPU offload under ARC compiled: `vllm_native.py::_ArcCpuTier` in one numba loop.

The same connector (lookup from the chunk of the GPU hit, a load a step before its prefill, a
failed offer again at the finish one step later) over the manager with `eviction_policy: arc`
and, when given, `store_threshold` (`offer_counts.py`), or tiers below the CPU (vLLM's
`TieringOffloadingSpec`, which refuses a threshold): every chunk stored in the CPU tier written
through to them, and a lookup that finds chunks there promoting them one by one into the CPU
and looking again a step later, as `vllm_kernel.py` does under LRU (`lru_rows.write_through`,
`ask_below`). Keys are chain ids
(dense), so each of ARC's four ordered dicts (T1, T2 and the ghosts B1, B2) is a linked list
threaded through a row per key (the offer counts have their own); a live request's marks (the keys
it saw, inserted, reused, whose store miss ARC saw) are the request's index in a column of its
slot (two requests are live at a time). `tests/prefix/test_tiers.py` holds it to the Python
model on random traces, which `tests/prefix/test_tiers_vllm_golden.py` holds to vLLM.

A row is 14 int32 columns padded to 16, one 64-byte cache line per key (every value is a key,
a request, a list or a stamp below 2^31; a trace that could pass that gets int64 rows): the
pass is bound by memory, and int64 rows of 112 bytes, two lines a key, took 31 ms on the
Mooncake conversation trace where these take 21 (`benchmarks/tiers.py --policy
vllm-native-arc`).
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
    cut_to,
    eviction_columns,
    holder_below,
    inlined,
    lru_state,
    most_chunks,
    pass_ids,
    read_below,
    records,
    refcount_free,
    rows,
    split_by_source,
    verdicts,
    write_through,
)
from yaotu_trace.prefix.tiers.offer_counts import admits, count_offer, tracker

# Columns of a key's row.
_LIST, _PREV, _NEXT, _HELD, _LAST, _STAMP = range(6)
_SEEN, _INS, _REU, _MISS = 6, 8, 10, 12  # two columns each: slot 0, slot 1
_WIDTH = 16  # 14 columns, padded to a 64-byte row of int32
# Values of _LIST (also the list's index in the ends); 0: in none.
_T1, _T2, _B1, _B2 = 1, 2, 3, 4
_FREE, _PINNED, _PENDING = 0, 1, 2
# Slots of the scalars array.
_STORED, _EVICTED, _FAILED, _LOADED, _STEP, _CALL, _BUSY, _NOW = range(8)


@nb.njit(cache=True, inline="always")
def _out(st, ends, size, b, k, pc, nc):  # pragma: no cover - compiled
    """Key k out of list b, whose links are columns pc (toward the least recent), nc."""
    p = st[k, pc]
    q = st[k, nc]
    if p >= 0:
        st[p, nc] = q
    else:
        ends[b, 0] = q
    if q >= 0:
        st[q, pc] = p
    else:
        ends[b, 1] = p
    size[b] -= 1


@nb.njit(cache=True, inline="always")
def _in(st, ends, size, b, k, pc, nc):  # pragma: no cover - compiled
    """Key k at the most recent end of list b (links in columns pc, nc)."""
    t = ends[b, 1]
    st[k, pc] = t
    st[k, nc] = -1
    if t >= 0:
        st[t, nc] = k
    else:
        ends[b, 0] = k
    ends[b, 1] = k
    size[b] += 1


@nb.njit(cache=True, inline="always")
def _remove(st, ends, size, k):  # pragma: no cover - compiled
    """Out of its list (T1, T2, B1 or B2)."""
    _out(st, ends, size, st[k, _LIST], k, _PREV, _NEXT)
    st[k, _LIST] = 0


@nb.njit(cache=True, inline="always")
def _append(st, ends, size, b, k):  # pragma: no cover - compiled
    """At the most recent end of list b."""
    _in(st, ends, size, b, k, _PREV, _NEXT)
    st[k, _LIST] = b


@nb.njit(cache=True, inline="always")
def _to_end(st, ends, size, k):  # pragma: no cover - compiled
    b = st[k, _LIST]
    if ends[b, 1] != k:
        _remove(st, ends, size, k)
        _append(st, ends, size, b, k)


@nb.njit(cache=True, inline="always")
def _held(st, k):  # pragma: no cover - compiled
    return st[k, _LIST] == _T1 or st[k, _LIST] == _T2


@nb.njit(cache=True, inline="always")
def _ghost_hit(st, ends, size, target, capacity, k):  # pragma: no cover - compiled
    if st[k, _LIST] == _B1:
        target[0] = min(target[0] + max(1.0, size[_B2] / size[_B1]), float(capacity))
        _to_end(st, ends, size, k)
    elif st[k, _LIST] == _B2:
        target[0] = max(target[0] - max(1.0, size[_B1] / size[_B2]), 0.0)
        _to_end(st, ends, size, k)


@nb.njit(cache=True, inline="always")
def _next_free(st, it, call):  # pragma: no cover - compiled
    """The first key from `it` on that is neither the offer's nor held by a transfer; and
    where the walk stopped."""
    while it >= 0:
        k = it
        it = st[k, _NEXT]
        if st[k, _STAMP] != call and st[k, _HELD] == _FREE:
            return k, it
    return -1, it


@inlined
def _evict(st, ends, size, target, capacity, needed, chosen, evictions, sc):  # pragma: no cover
    """ARC's choice of `needed` keys outside the offer stamped `sc[_CALL]`, made whole or not
    at all; each eviction recorded (key, evicting request, last use) when the pass records them."""
    call = sc[_CALL]
    it1 = ends[_T1, 0]
    it2 = ends[_T2, 0]
    t1_size = size[_T1]
    for c in range(needed):
        k = -1
        from_t1 = False
        if t1_size >= int(target[0]):
            k, it1 = _next_free(st, it1, call)
            from_t1 = k >= 0
        if k < 0:
            k, it2 = _next_free(st, it2, call)
        if k < 0:
            k, it1 = _next_free(st, it1, call)
            if k < 0:
                return False
            from_t1 = True
        if from_t1:
            t1_size -= 1
        chosen[c] = k
    for c in range(needed):
        k = chosen[c]
        ghost = _B1 if st[k, _LIST] == _T1 else _B2
        _remove(st, ends, size, k)
        _append(st, ends, size, ghost, k)
        if records(evictions):
            e = sc[_EVICTED]
            evictions[0][e] = k
            evictions[1][e] = sc[_NOW]
            evictions[2][e] = st[k, _LAST]
        sc[_EVICTED] += 1
    for ghost in (_B1, _B2):
        while size[ghost] > capacity:
            _remove(st, ends, size, ends[ghost, 0])
    return True


@inlined
def _store(ids, start, per_chunk, lo, hi, missing_only, req, slot, capacity, threshold, counts,
           st, ends, size, target, sc, chosen, step_keys, evictions, misses):  # pragma: no cover
    """`prepare_store` of chunks lo..hi-1 (`_offered`, then `_ArcCpuTier.store`): False when
    the offer fails whole. With `missing_only` the offer is of the chunks the tier lacks
    alone (a promotion from below): the ones it holds are outside the call."""
    sc[_NOW] = req
    if counts is not None:  # a store threshold's offer counts (`offer_counts.tracker`)
        count_offer(ids, start, per_chunk, lo, hi, counts[0], counts[1])
    to_store = 0
    n_miss = 0
    # One walk: the last use, the misses ARC sees, and the request's access (what it stores,
    # and the ready keys it reuses). The misses' ghost hits come after it, tail first; they
    # move keys within B1 and B2 only, which nothing here reads.
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        held = _held(st, k)
        if not (missing_only and held):
            st[k, _LAST] = req
        if held:
            if missing_only or st[k, _HELD] == _PENDING:
                continue
            if st[k, _INS + slot] != req:
                st[k, _REU + slot] = req
        elif not admits(counts, threshold, k):
            continue
        else:
            to_store += 1
            if st[k, _MISS + slot] != req:
                misses[n_miss] = k
                n_miss += 1
        st[k, _SEEN + slot] = req
    for m in range(n_miss - 1, -1, -1):
        _ghost_hit(st, ends, size, target, capacity, misses[m])
        st[misses[m], _MISS + slot] = req
    if to_store == 0:
        return True
    resident = size[_T1] + size[_T2]
    needed = to_store - (capacity - resident)
    if missing_only or needed > 0:  # the offer's stamp: what no eviction takes, what goes in
        sc[_CALL] += 1
        for j in range(lo, hi):
            k = chunk_key(ids, start, per_chunk, j)
            if not (missing_only and _held(st, k)):
                st[k, _STAMP] = sc[_CALL]
    if needed > 0 and (needed > resident - sc[_BUSY] or not _evict(
            st, ends, size, target, capacity, needed, chosen, evictions, sc)):
        sc[_FAILED] += 1
        return False
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        if _held(st, k) or not admits(counts, threshold, k):
            continue
        if missing_only and st[k, _STAMP] != sc[_CALL]:
            continue  # held when offered, evicted by this very store: not the offer's
        if st[k, _LIST] != 0:  # a ghost: the insert drops it from B1 or B2
            _remove(st, ends, size, k)
        _append(st, ends, size, _T1, k)
        st[k, _HELD] = _PENDING
        sc[_BUSY] += 1
        step_keys[sc[_STEP]] = k
        sc[_STEP] += 1
        st[k, _INS + slot] = req
        sc[_STORED] += 1
    return True


@inlined
def _finish(ids, start, per_chunk, chunks, req, slot, st, ends, size):  # pragma: no cover
    """`on_request_finished`, tail to head: a key only inserted made most recent where it is;
    one reused promoted from T1 to T2, or made most recent in T2."""
    for j in range(chunks - 1, -1, -1):
        k = chunk_key(ids, start, per_chunk, j)
        if st[k, _SEEN + slot] != req:
            continue
        reused = st[k, _REU + slot] == req
        if st[k, _INS + slot] == req and not reused:
            if _held(st, k):
                _to_end(st, ends, size, k)
        elif reused and st[k, _LIST] == _T1:
            _remove(st, ends, size, k)
            _append(st, ends, size, _T2, k)
        elif reused and st[k, _LIST] == _T2:
            _to_end(st, ends, size, k)


@nb.njit(cache=True, inline="always")
def _end_step(step_keys, st, sc):  # pragma: no cover - compiled
    for s in range(sc[_STEP]):
        st[step_keys[s], _HELD] = _FREE
    sc[_STEP] = 0
    sc[_BUSY] = 0


@inlined
def _offer(ids, start, per_chunk, lo, hi, missing_only, req, slot, capacity, threshold, counts,
           st, ends, size, target, sc, chosen, step_keys, evictions, misses,
           lower):  # pragma: no cover - compiled
    """`_store`, then what it stored written through to the tiers below (`lower`: their
    rows, ends, sizes, capacities, counters, evictions; None: none)."""
    stored_from = sc[_STEP]
    ok = _store(ids, start, per_chunk, lo, hi, missing_only, req, slot, capacity, threshold,
                counts, st, ends, size, target, sc, chosen, step_keys, evictions, misses)
    if lower is not None and ok:
        write_through(step_keys, stored_from, sc[_STEP], lower, req)
    return ok


@refcount_free
def _pass(offsets, ids, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block, capacity,
          threshold, st, evictions, counts, lower, answers, stamp_limit, ends, size, target,
          sc, hits, lacking, next_stored, failed, chosen, misses, step_keys,
          source):  # pragma: no cover
    """`vllm_arc_pass` on its arrays: the rows, the evictions' room, the offer counts, the
    lower tiers' rows, sizes, evictions, answers, ends and counters; ARC's list ends and sizes
    (one per list, `_T1` … `_B2`) and its target; the scalars; the hits and first chunks
    lacking it fills; per request the next chunk to offer and whether its offer failed; and a
    request's room (the chunks an offer evicts, its misses, the step's keys, each chunk's
    source). Returns the CPU tier's stored, evicted, failed offers and loaded chunks, and the
    request whose lookup never settles (−1: none; −2: out of room for the evictions; −3: the
    stamps would outgrow the rows)."""
    n = offsets.size - 1
    below = 0
    if lower is not None:  # numba prunes the branches of a None `lower` before typing them
        below = lower[3].size
    # np.int64 and np.bool_, not literals: numba compiles a helper once per literal value it
    # is given (`vllm_kernel._pass` took 12 s to compile with them, 4.6 s without).
    no, zero = np.bool_(False), np.int64(0)
    prev = np.int64(-1)
    prev_slot = np.int64(1)
    step = np.int64(0)  # the steps ended: an answer from below asked in this one is still in flight
    for i in range(n):
        if refused[i]:
            continue
        slot = 1 - prev_slot
        start = offsets[i]
        chunks = (offsets[i + 1] - start) // per_chunk
        g = gpu_hit_blocks[i] * block
        first = g // chunk_tokens
        if below > 0:
            # 0: the CPU tier, t + 1: promoted from tier t (a loop: no slice assignment to compile)
            for j in range(max(chunks - first, 0)):
                source[j] = 0
        p_chunks = 0 if prev < 0 else (offsets[prev + 1] - offsets[prev]) // per_chunk
        if sc[_CALL] + 2 * chunks + p_chunks + 8 > stamp_limit:
            # Stamps would outgrow the rows: run again with wider ones.
            return (sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -3)
        passes = 0
        if below == 0:  # the CPU tier alone: one lookup, nothing to wait for
            passes = 1
            run = 0
            while first + run < chunks and _held(st, chunk_key(ids, start, per_chunk, first + run)):
                run += 1
        if lower is not None:
            # A lookup a step until none is pending (`vllm_native._lookup_pass`).
            while True:
                passes += 1
                if sc[_CALL] + 2 * chunks + p_chunks + 8 > stamp_limit:
                    return (sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -3)
                if (records(evictions)
                        and sc[_EVICTED] + 2 * chunks + p_chunks + 1 > evictions[0].size):
                    # Out of room for the evictions: run again with more.
                    return (sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -2)
                run, deferred = _lookup_below(ids, start, per_chunk, first, chunks, g,
                                              chunk_tokens, i, prev, passes == 1, step, slot,
                                              capacity, counts, st, ends, size, target, sc,
                                              chosen, step_keys, evictions, misses, answers,
                                              source, lower)
                if not deferred:
                    break
                if passes == 1 and prev >= 0:
                    _retire(ids, offsets, per_chunk, prev, prev_slot, capacity, threshold,
                            counts, st, ends, size, target, sc, chosen, step_keys, evictions,
                            misses, lower, failed, next_stored)
                if passes > 4 * (chunks - first) + 8:
                    return (sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], i)
                _end_step(step_keys, st, sc)
                step += 1
        loaded = chunk_tokens * (first + run) - g
        if first + run < chunks:
            lacking[i] = first + run
        if loaded < chunk_tokens:
            loaded = 0
        if loaded > 0:  # `prepare_load`: pinned, seen, reused
            for j in range(first, first + run):
                k = chunk_key(ids, start, per_chunk, j)
                st[k, _LAST] = i
                if st[k, _HELD] == _FREE and _held(st, k):  # (a promotion may have evicted it)
                    sc[_BUSY] += 1
                st[k, _HELD] = _PINNED
                step_keys[sc[_STEP]] = k
                sc[_STEP] += 1
                st[k, _SEEN + slot] = i
                if st[k, _INS + slot] != i:
                    st[k, _REU + slot] = i
            sc[_LOADED] += run
            next_stored[i] = first + run
        elif chunks > 0:
            ok = _offer(ids, start, per_chunk, zero, chunks, no, i, slot, capacity, threshold,
                        counts, st, ends, size, target, sc, chosen, step_keys, evictions,
                        misses, lower)
            failed[i] = not ok
            if ok:
                next_stored[i] = chunks
        if passes == 1 and prev >= 0:  # the request before finishes in this one's first step
            # (`_retire`, written out: the one call a request without tiers below makes)
            p_start = offsets[prev]
            if failed[prev] and next_stored[prev] < p_chunks:
                ok = _offer(ids, p_start, per_chunk, next_stored[prev], p_chunks, no, prev,
                            prev_slot, capacity, threshold, counts, st, ends, size, target, sc,
                            chosen, step_keys, evictions, misses, lower)
                failed[prev] = not ok
                if ok:
                    next_stored[prev] = p_chunks
            _finish(ids, p_start, per_chunk, p_chunks, prev, prev_slot, st, ends, size)
        _end_step(step_keys, st, sc)
        step += 1
        if loaded > 0:
            if next_stored[i] < chunks:
                ok = _offer(ids, start, per_chunk, next_stored[i], chunks, no, i, slot,
                            capacity, threshold, counts, st, ends, size, target, sc, chosen,
                            step_keys, evictions, misses, lower)
                failed[i] = not ok
                if ok:
                    next_stored[i] = chunks
            _end_step(step_keys, st, sc)
            step += 1
            if below == 0:
                hits[0, i] = loaded
            else:
                split_by_source(hits, i, source, first, run, chunk_tokens, g)
        prev = i
        prev_slot = slot
    return (sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -1)


@inlined
def _lookup_below(ids, start, per_chunk, first, chunks, g, chunk_tokens, req, prev, prev_live,
                  step, slot, capacity, counts, st, ends, size, target, sc, chosen, step_keys,
                  evictions, misses, answers, source, lower):  # pragma: no cover - compiled
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
            if not (_held(st, k) or holder_below(lst, below, k) < below):
                break
            run += 1
        return run, False
    for j in range(first, chunks):
        k = chunk_key(ids, start, per_chunk, j)
        if _held(st, k):
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
        if not _store(ids, start, per_chunk, j, j + 1, np.bool_(True), req, slot, capacity,
                      np.int64(0), counts, st, ends, size, target, sc, chosen, step_keys,
                      evictions, misses):
            break
        source[j - first] = t + 1
        read_below(lower, t, k)
        run += 1
        deferred = True  # promoted: ready next step
    return run, deferred


@inlined
def _retire(ids, offsets, per_chunk, prev, prev_slot, capacity, threshold, counts, st, ends,
            size, target, sc, chosen, step_keys, evictions, misses, lower, failed,
            next_stored):  # pragma: no cover - compiled
    """The connector sees request `prev` finish: a failed offer offered again, then
    `_finish`."""
    p_start = offsets[prev]
    p_chunks = (offsets[prev + 1] - p_start) // per_chunk
    if failed[prev] and next_stored[prev] < p_chunks:
        ok = _offer(ids, p_start, per_chunk, next_stored[prev], p_chunks, np.bool_(False),
                    prev, prev_slot, capacity, threshold, counts, st, ends, size, target, sc,
                    chosen, step_keys, evictions, misses, lower)
        failed[prev] = not ok
        if ok:
            next_stored[prev] = p_chunks
    _finish(ids, p_start, per_chunk, p_chunks, prev, prev_slot, st, ends, size)


def stamp_limit(row: type) -> int:
    """The largest stamp a row of dtype `row` holds."""
    return int(np.iinfo(row).max)


def vllm_arc_pass(offsets: np.ndarray, ids: np.ndarray, gpu_hit_blocks: np.ndarray,
                  refused: np.ndarray, per_chunk: int, chunk_tokens: int, block: int,
                  capacity: int, num_keys: int, lower_capacity: tuple[int, ...] = (),
                  store_threshold: int = 0, explain: bool = True) -> tuple:
    """`vllm_kernel.vllm_offload_pass` (the same arguments, the same results) with the CPU
    tier evicting by ARC."""
    offsets = np.asarray(offsets, dtype=np.int64)
    keys = max(num_keys, 1)
    chunks = int(offsets[-1]) // per_chunk
    longest = most_chunks(offsets, per_chunk)
    room = lru_rows.eviction_room(chunks, len(lower_capacity), explain)
    # int32 rows while every value stays below 2^31: keys and requests are, and the pass says
    # when its stamps (a count of store calls) would not be (-3: run again with int64 rows).
    row = np.int32 if max(keys, int(offsets.size)) < 2**31 - 1 else np.int64
    width_bytes = _WIDTH * np.dtype(row).itemsize + (24 if store_threshold >= 2 else 0)
    need = width_bytes * keys + 8 * (3 * room + (7 * len(lower_capacity) * keys
                                                 if lower_capacity else 0))
    with memory.reserved(need, f"vLLM's CPU offload (arc) over {keys:,} chunk keys",
                         "use a larger --block-size or --tier-chunk (or fewer --jobs)"):
        while True:  # promotions again and again can outgrow the evictions' room: more
            st = np.full((keys, _WIDTH), -1, dtype=row)
            st[:, _LIST] = 0
            st[:, _HELD] = _FREE
            evictions = eviction_columns(room)
            lower_rows, lower_evictions = rows(keys if lower_capacity else 1,
                                               len(lower_capacity), 0, room)
            answers = verdicts(len(lower_capacity), keys if lower_capacity else 1)
            n = offsets.size - 1
            below = len(lower_capacity)
            lends, lsize, lcounters, _ = lru_state(below, 0)
            hits = np.zeros((1 + below, n), dtype=np.int64)
            lacking = np.full(n, -1, dtype=np.int64)
            arc_ends = np.full((5, 2), -1, dtype=np.int64)  # per list: least, most recent
            arc_sizes = np.zeros(5, dtype=np.int64)
            arc_target = np.zeros(1, dtype=np.float64)  # ARC's adaptive size of T1
            stored, evicted, failed, loaded, stalled = _pass(
                offsets, pass_ids(ids),
                np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
                np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
                np.int64(capacity), np.int64(store_threshold), st, evictions,
                tracker(keys, store_threshold),
                # None without tiers below: the pass compiled without their code (`_pass`)
                (lower_rows, lends, lsize, np.asarray(lower_capacity, dtype=np.int64),
                 lcounters, lower_evictions) if lower_capacity else None, answers,
                np.int64(stamp_limit(row)), arc_ends, arc_sizes,
                arc_target, np.zeros(8, dtype=np.int64), hits, lacking,
                np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_),
                np.empty(longest + 1, dtype=np.int64), np.empty(longest + 1, dtype=np.int64),
                np.empty(3 * longest + 3, dtype=np.int64), np.empty(longest, dtype=np.int64))
            if stalled == -3:
                row = np.int64
            elif stalled == -2:
                room *= 2
            else:
                break
        e = int(evicted)
        return (hits, int(stored), e, int(failed), int(loaded),
                *cut_to(evictions, e if room else 0), lcounters,
                lower_evictions, lacking, int(stalled))
