"""vLLM's CPU offload tier compiled: the rules of `vllm_native.py` in one numba loop.

The same connector and manager, request by request (`vllm_native.py` has the rules and their
sources; `tests/prefix/test_tiers_vllm_golden.py` checks this kernel against vLLM itself and
`tests/prefix/test_tiers.py` against the Python model). Keys are chain ids (dense), so the
manager's dicts become one 4-byte owner word per key, sixteen to a cache line (the request
whose group holds it, below; −1: not resident), whose two high bits say what transfer of this
step holds it (a load pins it, a store leaves it pending until the step ends, when the step's
keys, still in the cache, are cleared), written only in a step where another call can meet
them (`_MARKS`: without tiers below, a failed offer made again; none on the Mooncake
conversation trace, whose steps end with no pass over their keys). A key's last use, which
only the evictions' records name, is an array of its own, kept when they are recorded: the
owner words alone (0.7 MB on the Mooncake conversation trace) stay in a core's 1 MB L2 cache
where the 8-byte records did not. Whether a live request (the one scheduled, and the one
whose finish the connector has not seen yet) has seen a key is kept by the request's chunk
position (`seen_at`, a row per live request): a key appears once in a prompt.

vLLM keeps the evictable keys in a lazy heap of ranks: a request's access or insert gives its
chunk j the rank (R, −j), R the request's counter value given at its first access, and its
finish gives the keys it saw, tail to head, counter values above every rank yet. Here no heap
and no rank: the keys of one rank's first part are one request's, so a request's keys are a
group, ordered by chunk, tail first, both while it is live and once finished, and the groups
are a queue in rank order (`groups`, int32 requests): a request's entry appended when its rank
is given and again at its finish, where the first one dies. A key's rank is its group's (the
`owner`), so a finish is one append, not a pass over the request's keys, and a key that takes
another rank leaves its old group by that one write. Only two requests are live at a time, and
a finish comes one step late, after the next request's first access: the keys the finishing
request saw that a group ranked above its own holds (the request before it, finished after its
rank was given, and the live one after it) join it, and they are chunks of the prompt prefix
the two share (`_claim`). An eviction reads the groups from the queue's head, each from its top
chunk down, passing over chunks its group no longer holds, a key a transfer of this step holds
and the offer's own keys (a key is the id of a whole prefix, so it is chunk j of every request
that has it: the offer's when the offering request's chunk j is that key). A group's top
falls past the chunks above its first key held (past the keys an offer evicts once it does),
and the head moves past the entries of no use. On the Mooncake conversation trace
(`benchmarks/tiers.py`: 276,491 blocks, 143,173 evictions, 229,194 chunks read by the
evictions) the pass takes 2.8–3.0 ms (3.3–3.5 ms with 8-byte records, each step's holds
written and cleared, and the evictions recorded) where a queue of finished keys, each key
ranked anew at its request's finish, took 4.5–4.9 ms. A store threshold counts each offer first
(`offer_counts.py`); a chunk below it is neither stored nor accessed. Tiers below the CPU are
LRU lists (`lru_rows.py`): written through on every store, asked a step late
(`lru_rows.ask_below`, one answer per tier and key), their chunks promoted one at a time and
the lookup run again each step until nothing is pending (`vllm_native._lookup_pass`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.errors import ResourceLimitError
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

# A key's owner word (int32, `st[k]`): −1, not resident; else the request whose group holds
# it, and in its two high bits what transfer of this step holds it.
_HOLD_SHIFT = 29
_REQUEST = (1 << _HOLD_SHIFT) - 1  # the owner word's request; the pass takes fewer requests
_FREE, _PINNED, _PENDING = 0, 1, 2  # what holds a key in this step (the word's high bits)
_HOLDS = 3 << _HOLD_SHIFT
_SEEN0, _SEEN1 = 0, 1  # the live request slots (rows of `seen_at`)
# Slots of the scalars array: counters, the group queue's head and tail, whether the step's
# holds are in the owner words (`_MARKS`), and per live request slot (two) its request (−1:
# none).
(_RESIDENT, _STORED, _EVICTED, _FAILED, _LOADED, _STEP, _HEAD, _TAIL, _MARKS, _LIVE) = range(10)
_SCALARS = _LIVE + 2
# Values of `_MARKS`. Without tiers below, the one call that can meet a key held by another
# call of its step is a failed offer made again at a request's finish, which comes last in
# the step: only then are the step's holds written into the owner words (`_mark_step`), and a
# step without one ends with no pass over its keys (`_end_step`). Tiers below look up and
# promote within steps: their holds are written always.
_UNMARKED, _MARKED, _ALWAYS = 0, 1, 2


@nb.njit(cache=True, inline="always")
def _request_entry(groups, req_entry, sc, req):  # pragma: no cover - compiled
    """The request's group entry, given at its first call: the queue's next place, after
    every group finished before it (its rank, as vLLM's counter gives it)."""
    if req_entry[req] < 0:
        t = sc[_TAIL]
        groups[t] = req
        req_entry[req] = t
        sc[_TAIL] = t + 1
    return req_entry[req]


@nb.njit(cache=True, inline="always")
def _is_live(sc, r):  # pragma: no cover - compiled
    """Whether request r is scheduled or finished unseen (its group may still gain keys)."""
    return sc[_LIVE] == r or sc[_LIVE + 1] == r


@nb.njit(cache=True, inline="always")
def _held(owner):  # pragma: no cover - compiled
    """What holds a resident key in this step, from its owner word: a load (_PINNED), a
    store (_PENDING), or nothing (_FREE)."""
    return owner >> _HOLD_SHIFT


@nb.njit(cache=True, inline="always")
def _hold(st, sc, k, kind):  # pragma: no cover - compiled
    """A transfer of this step holds resident key k until the step ends (`_end_step`): in its
    owner word when the step's holds are written there (`_MARKS`)."""
    if sc[_MARKS] != _UNMARKED:
        st[k] = st[k] | (kind << _HOLD_SHIFT)


@nb.njit(cache=True, inline="always")
def _mark_step(st, sc, step_keys, kind):  # pragma: no cover - compiled
    """The step's holds so far (its keys, every one held by `kind`) written into their owner
    words, and those to come with them, until the step ends."""
    for x in range(sc[_STEP]):
        k = step_keys[x]
        st[k] = st[k] | (kind << _HOLD_SHIFT)
    sc[_MARKS] = _MARKED


@inlined
def _choose(ids, offsets, per_chunk, st, sc, groups, req_entry, req_top, chosen, needed, start,
            lo, hi, protect):  # pragma: no cover - compiled
    """The `needed` least recent evictable keys into `chosen[0]`; returns how many there were,
    and how many groups' tops fall once the offer evicts them (`chosen[2]`, `chosen[3]`: the
    group's request and its new top; `_store` lowers them).

    The order is vLLM's heap's: the groups in rank order, each group's keys tail first. A
    group's keys are the chunks of its request the group holds (their `owner`); a group's
    top is the highest chunk that may hold one, lowered past the chunks found to hold none
    above it (a finished group gains no key, so its top only falls: the head of the queue
    moves past a finished group once it holds none, and past an entry its request left).

    With `protect`, the offer's own keys (chunks lo..hi-1 of the request at `start`) are not
    evictable. A key is a chain id, the id of a whole prefix, so it is chunk j of every
    request that has it: key k met at chunk j is the offer's when j is in lo..hi-1 and the
    offering request's chunk j is k (its ids, just read, are in the cache).
    """
    head = sc[_HEAD]
    tail = sc[_TAIL]
    while head < tail:  # entries of no use any more leave for good
        r = groups[head]
        if req_entry[r] == head and (req_top[r] >= 0 or _is_live(sc, r)):
            break
        head += 1
    sc[_HEAD] = head
    got = 0
    lowered = 0
    p = head
    while p < tail and got < needed:
        r = groups[p]
        if req_entry[r] != p:  # an entry its request left (finished since)
            p += 1
            continue
        r_start = offsets[r]
        j = req_top[r]
        # The chunks above the first key this group keeps hold none: skip them next time
        # (past the keys chosen only once the offer evicts them).
        top = True  # every chunk above j holds no key of the group or one chosen
        took = False  # one chosen
        low = np.int64(-2)
        while j >= 0 and got < needed:
            k = chunk_key(ids, r_start, per_chunk, j)
            o = st[k]
            if o & _REQUEST == r:  # (−1's request bits are no request's)
                if _held(o) == _FREE and not (
                        protect and lo <= j < hi and chunk_key(ids, start, per_chunk, j) == k):
                    chosen[0, got] = k
                    got += 1
                    took = True
                else:
                    top = False
            if top:
                if took:
                    low = j - 1
                else:
                    req_top[r] = j - 1
            j -= 1
        if low > -2:
            chosen[2, lowered] = r
            chosen[3, lowered] = low
            lowered += 1
        p += 1
    return got, lowered


@inlined
def _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st, seen_at, sc,
            groups, req_entry, req_top, counts, threshold, chosen,
            evictions):  # pragma: no cover - compiled
    """`_record_request_cache_access` over chunks lo..hi-1 (resident pending keys skipped: a
    store records only new and ready keys; with `missing_only` every resident key is outside
    the call): keys new to the request join its group when theirs ranks below it, the
    request's entry given at its first new key. The request becomes each key's last use
    (`evictions[3]`) when the pass records its evictions, which name it (`records`). Returns
    the keys not resident (their chunks, in order, in `chosen[1]`: the ones a store writes)
    and the resident ones evictable."""
    e_req = -1
    new = 0
    free = 0
    top = req_top[req]
    recorded = records(evictions)
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        owner = st[k]
        resident = owner >= 0
        if missing_only and resident:
            continue
        if recorded:
            evictions[3][k] = req
        if not resident:
            if not admits(counts, threshold, k):
                continue  # below the store threshold: neither stored nor accessed
            chosen[1, new] = j
            new += 1
        else:
            held = _held(owner)
            if held == _PENDING:
                continue
            if held == _FREE:
                free += 1
        if seen_at[seen, j] == req:
            continue
        seen_at[seen, j] = req
        if e_req < 0:
            e_req = _request_entry(groups, req_entry, sc, req)
        if resident and owner & _REQUEST != req and req_entry[owner & _REQUEST] < e_req:
            st[k] = req | (owner & _HOLDS)
            if j > top:
                top = j
    req_top[req] = top
    return new, free


@inlined
def _store(ids, offsets, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st,
           seen_at, sc, groups, req_entry, req_top, chosen, step_keys, evictions, counts,
           threshold):  # pragma: no cover - compiled
    """`prepare_store` of chunks lo..hi-1 (only those the CPU tier lacks when
    `missing_only`): False when the offer fails whole. Each eviction is recorded, when the
    pass records them, in the columns of `evictions`: the key, the offering request, the key's
    last use (`evictions[3]`). The chunks stored are the step's last keys
    (`lru_rows.write_through` takes them to the tiers below). It writes the chunks `_access`
    found missing (`chosen[1]`) without reading the others again: none of them is evicted
    (the offer's own keys are not evictable, and a missing key is not resident), so they are
    the ones the manager stores."""
    if counts is not None:  # a store threshold's offer counts (`offer_counts.tracker`)
        count_offer(ids, start, per_chunk, lo, hi, counts[0], counts[1])
    new, protected = _access(ids, start, per_chunk, lo, hi, missing_only, req, seen, st,
                             seen_at, sc, groups, req_entry, req_top, counts, threshold, chosen,
                             evictions)
    if new == 0:
        return True
    needed = new - (capacity - sc[_RESIDENT])
    # Fail fast, as the manager does, when the evictable keys outside the offer are too few
    # (every resident key is evictable but this step's loads and stores).
    if needed > 0 and needed > sc[_RESIDENT] - sc[_STEP] - protected:
        sc[_FAILED] += 1
        return False
    if needed > 0:
        # The least recent evictable keys outside the offer (a resident key of a partial
        # offer is outside it).
        got, lowered = _choose(ids, offsets, per_chunk, st, sc, groups, req_entry, req_top,
                               chosen, needed, start, lo, hi, not missing_only)
        if got < needed:
            sc[_FAILED] += 1
            return False
        for x in range(lowered):
            req_top[chosen[2, x]] = chosen[3, x]
        recorded = records(evictions)
        for c in range(got):
            k = chosen[0, c]
            st[k] = -1
            if recorded:
                e = sc[_EVICTED] + c
                evictions[0][e] = k
                evictions[1][e] = req
                evictions[2][e] = evictions[3][k]
        sc[_RESIDENT] -= got
        sc[_EVICTED] += got
    _request_entry(groups, req_entry, sc, req)
    step = sc[_STEP]
    pending = (_PENDING << _HOLD_SHIFT) if sc[_MARKS] != _UNMARKED else 0
    for f in range(new):
        j = chosen[1, f]
        k = chunk_key(ids, start, per_chunk, j)
        st[k] = req | pending
        step_keys[step] = k
        step += 1
    if chosen[1, new - 1] > req_top[req]:
        req_top[req] = chosen[1, new - 1]
    sc[_RESIDENT] += new
    sc[_STORED] += new
    sc[_STEP] = step
    return True


@inlined
def _offer(ids, offsets, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st,
           seen_at, sc, groups, req_entry, req_top, chosen, step_keys, evictions, lower, counts,
           threshold):  # pragma: no cover - compiled
    """`_store`, then what it stored written through to the tiers below (`lower`: their
    rows, ends, sizes, capacities, counters, evictions; None: none)."""
    stored_from = sc[_STEP]
    ok = _store(ids, offsets, start, per_chunk, lo, hi, missing_only, req, seen, capacity, st,
                seen_at, sc, groups, req_entry, req_top, chosen, step_keys, evictions,
                counts, threshold)
    if lower is not None and ok:
        write_through(step_keys, stored_from, sc[_STEP], lower, req)
    return ok


@inlined
def _claim(ids, offsets, per_chunk, req, start, chunks, seen, seen_at, other, st,
           top):  # pragma: no cover - compiled
    """The keys request `req` saw that request `other`'s group holds, into `req`'s group;
    returns its top. They are chunks of both, so of the prompt prefix the two share."""
    if other < 0:
        return top
    o_start = offsets[other]
    for j in range(min(chunks, (offsets[other + 1] - o_start) // per_chunk)):
        k = chunk_key(ids, start, per_chunk, j)
        if k != chunk_key(ids, o_start, per_chunk, j):
            break
        owner = st[k]
        if seen_at[seen, j] == req and owner & _REQUEST == other:
            st[k] = req | (owner & _HOLDS)
            if j > top:
                top = j
    return top


@inlined
def _finish(ids, offsets, per_chunk, req, seen, before, st, seen_at, sc, groups, req_entry,
            req_top):  # pragma: no cover - compiled
    """`on_request_finished`: every key the request saw, tail to head, most recent: its group
    moves to the queue's tail. The keys it saw that a group ranked above its own holds join
    it: those of the request before it (`before`, whose finish came after this one's rank)
    and of the live one after it (ranked after this one); both share a prefix with it."""
    start = offsets[req]
    chunks = (offsets[req + 1] - start) // per_chunk
    s = seen - _SEEN0
    top = _claim(ids, offsets, per_chunk, req, start, chunks, seen, seen_at, before, st,
                 req_top[req])
    top = _claim(ids, offsets, per_chunk, req, start, chunks, seen, seen_at, sc[_LIVE + 1 - s],
                 st, top)
    req_top[req] = top
    if req_entry[req] >= 0:
        t = sc[_TAIL]
        groups[t] = req
        req_entry[req] = t
        sc[_TAIL] = t + 1
    sc[_LIVE + s] = -1


@nb.njit(cache=True, inline="always")
def _end_step(st, sc, step_keys):  # pragma: no cover - compiled
    """Every transfer of the step completes: loads unpin, stores become ready (evictable).
    The step's keys (held, so still resident) are the ones whose owner words say so, when
    the holds were written there (`_MARKS`)."""
    if sc[_MARKS] != _UNMARKED:
        for x in range(sc[_STEP]):
            k = step_keys[x]
            st[k] = st[k] & _REQUEST
        if sc[_MARKS] == _MARKED:
            sc[_MARKS] = _UNMARKED
    sc[_STEP] = 0


def vllm_offload_pass(offsets: np.ndarray, ids: np.ndarray, gpu_hit_blocks: np.ndarray,
                      refused: np.ndarray, per_chunk: int, chunk_tokens: int, block: int,
                      capacity: int, num_keys: int, lower_capacity: tuple[int, ...] = (),
                      store_threshold: int = 0, explain: bool = True) -> tuple:
    """Hit tokens per tier and request (the CPU tier's row first, then the tiers below it in
    the order of `lower_capacity`); the CPU tier's stored, evicted, failed offers and loaded
    chunks; per CPU eviction the key (chain id of the chunk's last block), the request whose
    offer evicted it and the request that used it last; and the lower tiers' counters and
    evictions (`lru_rows.outcome`'s arrays); last, per request, the first chunk (from the
    prompt's start) no tier held at its lookup (−1: none, or never looked up). Without
    `explain` the CPU tier's evictions are counted, not recorded (their columns empty).

    The owner words, the group queue and the per-request arrays are views of one numpy
    array: numpy asks the kernel for huge pages for it, while numba's own allocations (or
    several numpy ones) fault page by page and glibc hands them back after each pass (3,769
    faults, 9 ms a pass on the Mooncake conversation trace; one array: none). The evictions'
    columns are arrays of their own, cut in place to the evictions made (`lru_rows.cut_to`).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    if n >= _REQUEST:  # a key's owner word has 29 bits for its request
        raise ResourceLimitError(f"{n:,} requests exceed the {_REQUEST - 1:,} that the replay "
                                 "of vLLM's CPU offload takes; replay the trace in parts")
    keys = max(num_keys, 1)
    chunks = int(offsets[n]) // per_chunk
    max_chunks = most_chunks(offsets, per_chunk)
    room = lru_rows.eviction_room(chunks, len(lower_capacity), explain)
    # The group queue (int32 requests): each request's entry at its rank and at its finish.
    group_words = (2 * n + 3) // 2
    # The owner words (int32, two to an int64 word of `work`) are touched whole, as are the
    # last uses when the evictions are recorded; their room only as far as the tier evicts.
    owner_words = (keys + 1) // 2
    need = (8 * (owner_words + group_words + 4 * n
                 + (7 * len(lower_capacity) * keys if lower_capacity else 0)
                 + (3 * keys if store_threshold >= 2 else 0))
            + (4 * keys if room else 0))
    with memory.reserved(need, f"vLLM's CPU offload over {keys:,} chunk keys",
                         "use a larger --block-size or --tier-chunk (or fewer --jobs)"):
        while True:  # promotions again and again can outgrow the evictions' room: more
            work = np.empty(owner_words + group_words + 4 * n, dtype=np.int64)
            st = work[:owner_words].view(np.int32)[:keys]
            st.fill(-1)  # not resident
            seen_at = np.full((2, max(max_chunks, 1)), -1, dtype=np.int32)
            groups = work[owner_words:owner_words + group_words].view(np.int32)
            per_request = work[owner_words + group_words:].reshape(4, n)
            per_request[0].fill(-1)  # no entry yet
            per_request[1:].fill(0)
            # The three columns, and each key's last use (−1: never) that the third records.
            evictions = (*eviction_columns(room),
                         np.full(keys if room else 0, -1, dtype=np.int32))
            lower_rows, lower_evictions = rows(keys if lower_capacity else 1,
                                               len(lower_capacity), 0, room)
            answers = verdicts(len(lower_capacity), keys if lower_capacity else 1)
            lends, lsize, lcounters, _ = lru_state(len(lower_capacity), 0)
            hits = np.zeros((1 + len(lower_capacity), n), dtype=np.int64)
            lacking = np.full(n, -1, dtype=np.int64)  # the first chunk no tier held at lookup
            sc = np.zeros(_SCALARS, dtype=np.int64)
            sc[_LIVE:_LIVE + 2] = -1  # no live request
            stored, evicted, failed, loaded, stalled = _pass(
                offsets, pass_ids(ids),
                np.asarray(gpu_hit_blocks, dtype=np.int64), np.asarray(refused, dtype=np.bool_),
                np.int64(per_chunk), np.int64(chunk_tokens), np.int64(block),
                np.int64(capacity), st, seen_at, groups, evictions,
                # None without tiers below: the pass compiled without their code (`_pass`)
                (lower_rows, lends, lsize, np.asarray(lower_capacity, dtype=np.int64),
                 lcounters, lower_evictions) if lower_capacity else None, answers,
                tracker(keys, store_threshold), np.int64(store_threshold),
                hits, lacking, sc, per_request[0], per_request[1], per_request[2],
                per_request[3], np.empty((4, max_chunks + 1), dtype=np.int64),
                np.empty(3 * max_chunks + 3, dtype=np.int64),
                np.empty(max_chunks, dtype=np.int64))
            if stalled != -2:
                break
            room *= 2
        e = int(evicted)
        return (hits, int(stored), e, int(failed), int(loaded),
                *cut_to(evictions[:3], e if room else 0), lcounters,
                lower_evictions, lacking, int(stalled))


@refcount_free
def _pass(offsets, ids, gpu_hit_blocks, refused, per_chunk, chunk_tokens, block, capacity, st,
          seen_at, groups, evictions, lower, answers, counts, threshold, hits, lacking, sc,
          req_entry, req_top, req_next, req_failed, chosen, step_keys,
          source):  # pragma: no cover - compiled
    """`vllm_offload_pass` on its arrays: an owner word per key, the group queue, the
    evictions' three columns and each key's last use (all empty when they are not recorded:
    `records`), the lower tiers' rows, sizes, evictions and answers (`lru_rows.ask_below`), the
    offer counts of a store threshold (`offer_counts.py`), the lower tiers' ends, sizes and
    counters, the hits and first chunks lacking it fills, the scalars, four arrays per request
    (its group entry, its group's top chunk, its next chunk to offer, whether its offer
    failed) and a request's room (the keys an offer evicts and the chunks it stores, the
    step's keys, each chunk's source). Returns the CPU tier's stored, evicted, failed offers
    and loaded chunks, and the request whose lookup never settles (−1: none; the pass stops
    there; −2: out of room for the evictions)."""
    n = offsets.size - 1
    below = 0
    if lower is not None:  # numba prunes the branches of a None `lower` before typing them
        below = lower[3].size
    sc[_MARKS] = _ALWAYS if below > 0 else _UNMARKED
    # np.int64 and np.bool_, not literals: numba compiles a helper once per literal value it
    # is given (the pass took 12 s to compile on a first run with them, 4.6 s without).
    no, zero = np.bool_(False), np.int64(0)
    prev = np.int64(-1)
    before = np.int64(-1)  # the request before `prev`
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
        req_top[i] = -1
        g = gpu_hit_blocks[i] * block
        first = g // chunk_tokens
        if below > 0:
            # 0: the CPU tier, t + 1: promoted from tier t (a loop: no slice assignment to compile)
            for j in range(max(chunks - first, 0)):
                source[j] = 0
        p_chunks = 0 if prev < 0 else (offsets[prev + 1] - offsets[prev]) // per_chunk
        passes = 0
        if below == 0:  # the CPU tier alone: one lookup, nothing to wait for
            passes = 1
            run = 0
            while (first + run < chunks
                   and st[chunk_key(ids, start, per_chunk, first + run)] >= 0):
                run += 1
        if lower is not None:
            # A lookup a step until none is pending (`vllm_native._lookup_pass`).
            while True:
                passes += 1
                if (records(evictions)
                        and sc[_EVICTED] + 2 * chunks + p_chunks + 1 > evictions[0].size):
                    # Out of room for the evictions: run again with more.
                    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -2
                run, deferred = _lookup_below(ids, offsets, start, per_chunk, first, chunks, g,
                                              chunk_tokens, i, prev, passes == 1, step, seen,
                                              capacity, st, seen_at, sc, groups, req_entry,
                                              req_top, chosen, step_keys, evictions, counts,
                                              answers, source, lower)
                if not deferred:
                    break
                if passes == 1 and prev >= 0:
                    _retire(ids, offsets, per_chunk, prev, prev_seen, before, capacity, st,
                            seen_at, sc, groups, req_entry, req_top, req_next, req_failed,
                            chosen, step_keys, evictions, lower, counts, threshold)
                if passes > 4 * (chunks - first) + 8:
                    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], i
                _end_step(st, sc, step_keys)
                step += 1
        loaded = chunk_tokens * (first + run) - g
        if first + run < chunks:
            lacking[i] = first + run
        if loaded < chunk_tokens:
            loaded = 0
        if loaded > 0:
            for j in range(first, first + run):
                k = chunk_key(ids, start, per_chunk, j)
                _hold(st, sc, k, _PINNED)
                step_keys[sc[_STEP]] = k
                sc[_STEP] += 1
            _access(ids, start, per_chunk, first, first + run, no, i, seen, st, seen_at, sc,
                    groups, req_entry, req_top, counts, zero, chosen, evictions)
            sc[_LOADED] += run
            req_next[i] = first + run
        elif chunks > 0:
            ok = _offer(ids, offsets, start, per_chunk, zero, chunks, no, i, seen, capacity, st,
                        seen_at, sc, groups, req_entry, req_top, chosen, step_keys,
                        evictions, lower, counts, threshold)
            req_failed[i] = 0 if ok else 1
            if ok:
                req_next[i] = chunks
        if passes == 1 and prev >= 0:  # the request before finishes in this one's first step
            # (`_retire`, written out: the one call a request without tiers below makes)
            if req_failed[prev] != 0 and req_next[prev] < p_chunks:
                if sc[_MARKS] == _UNMARKED:  # the step so far held its loads or its stores
                    _mark_step(st, sc, step_keys, _PINNED if loaded > 0 else _PENDING)
                _offer(ids, offsets, offsets[prev], per_chunk, req_next[prev], p_chunks, no,
                       prev, prev_seen, capacity, st, seen_at, sc, groups, req_entry,
                       req_top, chosen, step_keys, evictions, lower, counts, threshold)
            _finish(ids, offsets, per_chunk, prev, prev_seen, before, st, seen_at, sc, groups,
                    req_entry, req_top)
        _end_step(st, sc, step_keys)
        step += 1
        if loaded > 0:
            if req_next[i] < chunks:
                ok = _offer(ids, offsets, start, per_chunk, req_next[i], chunks, no, i, seen,
                            capacity, st, seen_at, sc, groups, req_entry, req_top, chosen,
                            step_keys, evictions, lower, counts, threshold)
                req_failed[i] = 0 if ok else 1
                if ok:
                    req_next[i] = chunks
            _end_step(st, sc, step_keys)
            step += 1
            if below == 0:
                hits[0, i] = loaded
            else:
                split_by_source(hits, i, source, first, run, chunk_tokens, g)
        before = prev
        prev = i
        prev_seen = seen
    return sc[_STORED], sc[_EVICTED], sc[_FAILED], sc[_LOADED], -1


@inlined
def _lookup_below(ids, offsets, start, per_chunk, first, chunks, g, chunk_tokens, req, prev,
                  prev_live, step, seen, capacity, st, seen_at, sc, groups, req_entry,
                  req_top, chosen, step_keys, evictions, counts, answers, source,
                  lower):  # pragma: no cover - compiled
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
            if not (st[k] >= 0 or holder_below(lst, below, k) < below):
                break
            run += 1
        return run, False
    for j in range(first, chunks):
        k = chunk_key(ids, start, per_chunk, j)
        if st[k] >= 0:
            run += 1
            if _held(st[k]) == _PENDING:
                deferred = True
            continue
        t = answer_below(answers, lst, k, req, prev, prev_live, step)
        if t == NOT_BELOW:
            break
        if t == ASKED:  # the answer comes next step
            deferred = True
            continue
        if not _store(ids, offsets, start, per_chunk, j, j + 1, np.bool_(True), req, seen,
                      capacity, st, seen_at, sc, groups, req_entry, req_top, chosen,
                      step_keys, evictions, counts, np.int64(0)):
            break
        source[j - first] = t + 1
        read_below(lower, t, k)
        run += 1
        deferred = True  # promoted: ready next step
    return run, deferred


@inlined
def _retire(ids, offsets, per_chunk, prev, prev_seen, before, capacity, st, seen_at, sc,
            groups, req_entry, req_top, req_next, req_failed, chosen, step_keys, evictions, lower,
            counts, threshold):  # pragma: no cover - compiled
    """The connector sees request `prev` finish: a failed offer offered again, then its keys
    ranked (`_finish`)."""
    p_chunks = (offsets[prev + 1] - offsets[prev]) // per_chunk
    if req_failed[prev] != 0 and req_next[prev] < p_chunks:
        _offer(ids, offsets, offsets[prev], per_chunk, req_next[prev], p_chunks, np.bool_(False),
               prev, prev_seen, capacity, st, seen_at, sc, groups, req_entry, req_top,
               chosen, step_keys, evictions, lower, counts, threshold)
    _finish(ids, offsets, per_chunk, prev, prev_seen, before, st, seen_at, sc, groups, req_entry,
            req_top)
