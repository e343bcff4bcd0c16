"""LRU lists threaded through a row per key, for the compiled tier passes.

Keys are chain ids (dense), so an LRU of them needs no hash map: LRU b keeps, in columns
4b.. of key k's row, k's neighbours toward the least and the most recent, its last use (the
request that touched or inserted it) and whether the LRU holds it; `ends[b]` are its least and
most recent keys. A touch, an insert and an eviction are each a few row writes. LMCache's
backends (`lmcache_kernel.py`) and SGLang's host and storage tiers (`sglang_kernel.py`) use
them, and so do vLLM's tiers below its CPU tier (`write_through`, `holder_below`); vLLM's CPU
tier ranks its keys otherwise (`vllm_kernel.py` for LRU, `vllm_arc_kernel.py` for ARC).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions

# Columns of a key's row, per LRU (offset 4·b); its ends: least, most recent.
LESS, MORE, LAST, HELD = range(4)
OLDEST, NEWEST = 0, 1
# Counters per LRU (FAILED: stores cut short for want of room).
STORED, EVICTED, LOADED, FAILED = range(4)


def refcount_free(pass_fn):
    """A tier pass compiled without numba's reference counts (`_nrt=False`).

    Numba counts references to every array a compiled call passes on, with atomic increments
    and decrements at each call of a helper (inlined or not), and its pruning leaves them where
    the loop branches: LMCache's pass over the Mooncake conversation trace took 16.5 ms with
    them and 1.7 ms without, the same hits. Such a pass allocates nothing (that needs the
    counts): its arrays come from the caller, which owns them.
    """
    return nb.njit(cache=True, nogil=True, _nrt=False)(pass_fn)


def inlined(helper):
    """A tier pass's helper compiled to be inlined by LLVM (`forceinline`) where it is called.

    A call of a numba function passes each array as seven or more words: a helper of vLLM's
    CPU tier pass took twenty arrays, and its calls, four or five a request, cost about a
    tenth of the pass (5.9 ms → 5.2 ms on the Mooncake conversation trace, `benchmarks/
    tiers.py`; ARC's 13.2 → 12.2 ms with the GPU replay). Numba's own `inline="always"`
    inlines its IR at every call site instead: as fast, but 30 s to compile where this
    takes 6.
    """
    return nb.njit(cache=True, forceinline=True)(helper)


@nb.njit(cache=True, inline="always")
def chunk_key(ids, start, per_chunk, j):  # pragma: no cover - compiled
    """The key of a request's chunk j: the chain id of its last block (its prefix)."""
    return ids[start + (j + 1) * per_chunk - 1]


def pass_ids(ids: np.ndarray) -> np.ndarray:
    """The chains' dense ids (int32) as a tier pass takes them: the array itself when it is
    already contiguous, writable int32 (one compiled signature), never a widened copy: an
    int64 copy of the 62 million ids of 1e9 tokens was 0.5 GB beside the pass."""
    ids = np.asarray(ids)
    if ids.dtype == np.int32 and ids.flags.c_contiguous and ids.flags.writeable:
        return ids
    return np.array(ids, dtype=np.int32)


def most_chunks(offsets: np.ndarray, per_chunk: int) -> int:
    """The most chunks of any one request (at least 1): the size of a request's buffers."""
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    return max(1, int(lengths.max()) // per_chunk) if lengths.size else 1


def lru_state(lrus: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Empty LRUs' ends, sizes and counters, and their hits per request."""
    return (np.full((lrus, 2), -1, dtype=np.int64), np.zeros(lrus, dtype=np.int64),
            np.zeros((lrus, 4), dtype=np.int64), np.zeros((lrus, n), dtype=np.int64))


def rows(keys: int, lrus: int, extra: int, inserts: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows (`4·lrus + extra` int32 columns, the LRU columns empty, the extra ones zero:
    keys, requests and counts of uses all stay below 2^31, and half the bytes of int64 rows
    is half the cache lines a pass touches) and room for `inserts` evictions per LRU (key,
    request, last use; int64)."""
    width = 4 * lrus + extra
    st = np.full((max(keys, 1), width), -1, dtype=np.int32)
    st[:, HELD:4 * lrus:4] = 0
    st[:, 4 * lrus:] = 0
    evictions = np.empty((lrus, 3, inserts + 1), dtype=np.int64)
    return st, evictions


@nb.njit(cache=True, inline="always")
def touch(st, ends, b, k, now):  # pragma: no cover - compiled
    """Key k (held) becomes LRU b's most recent, used by request `now`."""
    move_newest(st, ends, b, k)
    st[k, 4 * b + LAST] = now


@nb.njit(cache=True, inline="always")
def move_newest(st, ends, b, k):  # pragma: no cover - compiled
    """Key k (held) becomes LRU b's most recent; its last use stays."""
    c = 4 * b
    newest = ends[b, NEWEST]
    if newest != k:
        less = st[k, c + LESS]
        more = st[k, c + MORE]  # there is one: k is not the newest
        if less >= 0:
            st[less, c + MORE] = more
        else:
            ends[b, OLDEST] = more
        st[more, c + LESS] = less
        st[k, c + LESS] = newest
        st[k, c + MORE] = -1
        st[newest, c + MORE] = k
        ends[b, NEWEST] = k


@nb.njit(cache=True, inline="always")
def evict_oldest(st, ends, size, counters, evictions, b, now):  # pragma: no cover - compiled
    """LRU b (not empty) drops its least recent key, recorded (key, request `now`, its last
    use)."""
    c = 4 * b
    gone = ends[b, OLDEST]
    more = st[gone, c + MORE]
    ends[b, OLDEST] = more
    if more >= 0:
        st[more, c + LESS] = -1
    else:
        ends[b, NEWEST] = -1
    st[gone, c + HELD] = 0
    e = counters[b, EVICTED]
    evictions[b, 0, e] = gone
    evictions[b, 1, e] = now
    evictions[b, 2, e] = st[gone, c + LAST]
    counters[b, EVICTED] += 1
    size[b] -= 1


@nb.njit(cache=True, inline="always")
def insert(st, ends, size, capacity, counters, evictions, b, k, now):  # pragma: no cover
    """Key k (not held) becomes LRU b's most recent; when b is full its least recent goes
    first (`evict_oldest`)."""
    c = 4 * b
    if size[b] >= capacity[b]:
        evict_oldest(st, ends, size, counters, evictions, b, now)
    newest = ends[b, NEWEST]
    st[k, c + LESS] = newest
    st[k, c + MORE] = -1
    if newest >= 0:
        st[newest, c + MORE] = k
    else:
        ends[b, OLDEST] = k
    ends[b, NEWEST] = k
    st[k, c + HELD] = 1
    st[k, c + LAST] = now
    size[b] += 1
    counters[b, STORED] += 1


@nb.njit(cache=True, inline="always")
def held(st, b, k):  # pragma: no cover - compiled
    """Whether LRU b holds key k."""
    return st[k, 4 * b + HELD] == 1


@nb.njit(cache=True, inline="always")
def holder_below(st, below, k):  # pragma: no cover - compiled
    """The first of the `below` LRUs (vLLM's tiers below the CPU, in order) that holds key
    k, or `below` when none does."""
    t = 0
    while t < below and not held(st, t, k):
        t += 1
    return t


@nb.njit(cache=True)
def write_through(keys, lo, hi, lower, now):  # pragma: no cover - compiled
    """`keys[lo:hi]`, just stored in vLLM's CPU tier by request `now`, written to every tier
    below it in turn (`lower`: rows, ends, sizes, capacities, counters, evictions); a key a
    tier holds already is refreshed there."""
    st, ends, size, capacity, counters, evictions = lower
    for b in range(capacity.size):
        for s in range(lo, hi):
            k = keys[s]
            if held(st, b, k):
                touch(st, ends, b, k, now)
            else:
                insert(st, ends, size, capacity, counters, evictions, b, k, now)


@nb.njit(cache=True, inline="always")
def promoted_loaded(ids, start, per_chunk, first, run, source, lower):  # pragma: no cover
    """A promotion's chunks (`source[j]` > 0: found in lower tier `source[j]` − 1) loaded
    from the tier that held them: each made most recent there and counted as loaded."""
    st, ends, _, _, counters, _ = lower
    for j in range(run):
        if source[j] > 0:
            k = chunk_key(ids, start, per_chunk, first + j)
            if held(st, source[j] - 1, k):
                move_newest(st, ends, source[j] - 1, k)
            counters[source[j] - 1, LOADED] += 1


def first_room(chunks: int, lrus: int) -> int:
    """Room for the CPU tier's evictions, first try: each chunk of the trace stored once (and
    once more promoted from below). Promoted again and again, a lookup can need more: the
    pass then stops and runs again with twice the room."""
    return (2 if lrus else 1) * chunks + 1


def eviction_room(chunks: int, lrus: int, explain: bool) -> int:
    """Room for the CPU tier's eviction records, first try (`first_room`); none (0: counted
    only, `records`) without `explain` and without tiers below, whose rows and room checks
    record every eviction of theirs and of the CPU tier's."""
    return first_room(chunks, lrus) if explain or lrus else 0


def eviction_columns(room: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Room for `room` evictions of vLLM's CPU tier: its key, the request whose offer evicted
    it, the request that used it last, a column each (`evictions[c][e]` in a pass). A
    column of its own, not a view: `cut_to` shrinks it in place once the pass is done. No
    room (0) is a pass that counts its evictions without recording them (`records`)."""
    return (np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64),
            np.empty(room, dtype=np.int64))


@nb.njit(cache=True, inline="always")
def records(evictions):  # pragma: no cover - compiled
    """Whether a pass records each eviction of vLLM's CPU tier in `evictions`
    (`eviction_columns`): only the capacity-miss explanation reads them, and writing them is
    a tenth of the pass (0.3 of 3.4 ms on the Mooncake conversation trace)."""
    return evictions[0].size > 0


def cut_to(columns: tuple[np.ndarray, ...], used: int) -> tuple[np.ndarray, ...]:
    """`columns` cut to their first `used` entries where they lie (`ndarray.resize`: a
    realloc that gives the rest back, no copy). The copies they replace read and wrote 3.4 MB
    again for the 143,173 evictions of vLLM's CPU tier on the Mooncake conversation trace (0.1
    to 0.2 ms of a 3.5 ms pass), and about 1 ms a pass over a tier curve's sizes, the small
    ones evicting most."""
    for column in columns:
        column.resize(used, refcheck=False)
    return columns


def verdicts(lrus: int, keys: int) -> np.ndarray:
    """What each tier below vLLM's CPU tier last answered for each key, as `ask_below` keeps
    it: the answer (−1: none kept), the last request that asked, the step it was asked in."""
    return np.full((3, max(lrus, 1), max(keys, 1)), -1, dtype=np.int64)


@nb.njit(cache=True, inline="always")
def ask_below(answers, t, k, req, prev, prev_live, step, holds):  # pragma: no cover - compiled
    """Tier t below vLLM's CPU tier asked whether it holds key k (`AsyncLookupManager`,
    `vllm_native._Verdicts`): −1 while the answer is in flight (asked this step), else the
    answer kept: what the tier held when first asked, kept while a request that asked is
    unfinished (request `req`, or `prev` while its finish is not yet seen: `prev_live`)."""
    who = answers[1, t, k]
    if not (answers[0, t, k] >= 0 and (who == req or (prev_live and who == prev))):
        answers[0, t, k] = 1 if holds else 0
        answers[2, t, k] = step
    answers[1, t, k] = req
    if answers[2, t, k] == step:
        return -1
    return answers[0, t, k]


ASKED, NOT_BELOW = -1, -2  # what `answer_below` says when no tier below holds a key


@nb.njit(cache=True, inline="always")
def answer_below(answers, lst, k, req, prev, prev_live, step):  # pragma: no cover - compiled
    """The tiers below vLLM's CPU tier asked in order whether they hold key k
    (`TieringOffloadingManager.lookup`): the first tier whose kept answer is "held", else
    `ASKED` when one has not answered yet, else `NOT_BELOW`."""
    asked = False
    for t in range(answers.shape[1]):
        a = ask_below(answers, t, k, req, prev, prev_live, step, held(lst, t, k))
        if a == 1:
            return t
        asked |= a < 0
    return ASKED if asked else NOT_BELOW


@nb.njit(cache=True, inline="always")
def read_below(lower, t, k):  # pragma: no cover - compiled
    """A promotion read key k from tier t below the CPU tier: most recent there, loaded."""
    st, ends, _, _, counters, _ = lower
    move_newest(st, ends, t, k)
    counters[t, LOADED] += 1


@nb.njit(cache=True, inline="always")
def split_by_source(hits, i, source, first, run, chunk_tokens, gpu_tokens):  # pragma: no cover
    """Request i's load of chunks first .. first + run − 1 beyond its GPU hit, its tokens
    added to the row of the tier each chunk came from (`source`)."""
    for j in range(run):
        hits[source[j], i] += (first + j + 1) * chunk_tokens - max(
            (first + j) * chunk_tokens, gpu_tokens)


def outcome(counters: np.ndarray, evictions: np.ndarray
            ) -> tuple[tuple[TierCounters, ...], tuple[TierEvictions, ...]]:
    """The counters and the evictions of each LRU, as the replay reports them."""
    lrus = counters.shape[0]
    out_counters = tuple(
        TierCounters(stored_chunks=int(counters[b, STORED]),
                     evicted_chunks=int(counters[b, EVICTED]),
                     failed_stores=int(counters[b, FAILED]),
                     loaded_chunks=int(counters[b, LOADED])) for b in range(lrus))
    out_evictions = []
    for b in range(lrus):
        e = int(counters[b, EVICTED])
        out_evictions.append(TierEvictions(key=evictions[b, 0, :e].copy(),
                                           request=evictions[b, 1, :e].copy(),
                                           last_use_request=evictions[b, 2, :e].copy()))
    return out_counters, tuple(out_evictions)
