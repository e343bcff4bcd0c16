"""The LRU capacity curve: hit tokens at every capacity from one pass of LRU stack distances.

LRU is a stack algorithm: at any moment the cache of capacity `C` holds exactly the `C` most
recently touched blocks. So a block is cached at capacity `C` iff its *stack distance* (1 + the
number of distinct blocks touched since its own last touch) is at most `C`, and one pass that
measures every lookup's distance answers every capacity at once.

Per request (replay-spec §3–§4): look its blocks up against the cache as left by earlier
requests, then touch its blocks in touch order. Block `k` is a hit at capacity `C` iff blocks
1..k all are, i.e. iff `m_k = max(d_1..d_k) ≤ C` (the running maximum of the distances along the
prefix). With tail-first touching the distances already grow along the prefix, so the running
maximum changes nothing; with head-first (flat) LRU it is what makes the first miss end the hit.
The hit is capped by the request's `max_hit_blocks` (the last-token rule). Adding each hit
block's tokens at `m_k` to a histogram gives the curve as its cumulative sum:

    hit_tokens(C) = Σ_{d ≤ C} histogram[d]

The distances come from a count of live marks over touch times, one mark per distinct block
(at its last touch): `d = live − count(times ≤ last) + 1`. The marks are a bit vector with a
small Fenwick tree over 512-time superblocks (cache-resident), so a count is one tree walk plus
at most eight popcounts, and blocks touched together (adjacent times) need no count at all. The
time axis is compacted whenever it fills up, so memory stays O(distinct blocks), about 30 bytes
each, not O(touches). With scope `instance` each partition is its own cache of capacity `C`,
replayed on its own; their histograms add up.

The kernels are numba-compiled with `cache=True`; the Python boundary pins dtypes (int64
offsets and per-request arrays, int32 ids) so one compiled specialisation serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numba
import numpy as np

from yaotu_trace.prefix.kernels.chains import segment_ranges
from yaotu_trace.prefix.kernels.curve import (
    DEFAULT_SHARES,
    MAX_INT32_IDS,
    CapacityCurve,
    CurveTerms,
    DistanceHistograms,
    SweepBlocks,
    checked_touch_order,
    curve_from_histograms,
    partition_order,
)
from yaotu_trace.prefix.rules import TouchOrder

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from yaotu_trace.prefix.kernels.chains import BlockChains

# Smallest time axis (touches between compactions); tests lower it to force compaction.
_MIN_TIME_SLOTS = 1024


@numba.njit(cache=True, nogil=True)
def _fenwick_add(tree: Any, i: int, delta: int) -> None:  # pragma: no cover - compiled
    n = tree.shape[0] - 1
    while i <= n:
        tree[i] += delta
        i += i & (-i)


@numba.njit(cache=True, nogil=True)
def _fenwick_prefix(tree: Any, i: int) -> int:  # pragma: no cover - compiled
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    return s


_M1: Final = np.uint64(0x5555555555555555)
_M2: Final = np.uint64(0x3333333333333333)
_M4: Final = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01: Final = np.uint64(0x0101010101010101)
_ONE: Final = np.uint64(1)
_ALL: Final = np.uint64(0xFFFFFFFFFFFFFFFF)
_U1: Final = np.uint64(1)
_U2: Final = np.uint64(2)
_U4: Final = np.uint64(4)
_U56: Final = np.uint64(56)
# Touch times are bits; 512 times (8 words) form a superblock whose count is kept in a small
# Fenwick tree. A count is then one walk of the small (cache-resident) tree plus at most 8
# popcounts, and a mark or unmark flips one bit: about one cache miss per operation, where a
# Fenwick tree over all times would miss at several levels.
_SUPER_SHIFT: Final = 9
_WORDS_PER_SUPER: Final = 8


@numba.njit(cache=True, nogil=True, inline="always")
def _popcount(x: Any) -> int:  # pragma: no cover - compiled
    x = x - ((x >> _U1) & _M1)
    x = (x & _M2) + ((x >> _U2) & _M2)
    x = (x + (x >> _U4)) & _M4
    return int((x * _H01) >> _U56)


@numba.njit(cache=True, nogil=True, inline="always")
def _mark(bits: Any, sup: Any, t: int, delta: int) -> None:  # pragma: no cover - compiled
    bit = _ONE << np.uint64(t & 63)
    if delta > 0:
        bits[t >> 6] |= bit
    else:
        bits[t >> 6] &= ~bit
    _fenwick_add(sup, (t >> _SUPER_SHIFT) + 1, delta)


@numba.njit(cache=True, nogil=True, inline="always")
def _count_upto(bits: Any, sup: Any, t: int) -> int:  # pragma: no cover - compiled
    # Live marks at times <= t.
    c = _fenwick_prefix(sup, t >> _SUPER_SHIFT)
    w = t >> 6
    for i in range((t >> _SUPER_SHIFT) * _WORDS_PER_SUPER, w):
        c += _popcount(bits[i])
    r = t & 63
    mask = _ALL if r == 63 else (_ONE << np.uint64(r + 1)) - _ONE
    return c + _popcount(bits[w] & mask)


@numba.njit(cache=True, nogil=True)
def _rebuild(bits: Any, sup: Any, live: int | np.int64,
             used_words: int) -> None:  # pragma: no cover - compiled
    # Marks exactly at times 1..live; superblock counts rebuilt as a Fenwick tree in O(size).
    for i in range(used_words):
        bits[i] = 0
    for t in range(1, live + 1):
        bits[t >> 6] |= _ONE << np.uint64(t & 63)
    n = sup.shape[0] - 1
    for i in range(n + 1):
        sup[i] = 0
    for i in range(1, n + 1):
        lo = (i - 1) << _SUPER_SHIFT
        hi = lo + (1 << _SUPER_SHIFT) - 1
        if lo <= live:
            sup[i] += min(hi, live) - max(lo, 1) + 1 if hi >= 1 else 0
        j = i + (i & (-i))
        if j <= n:
            sup[j] += sup[i]


@numba.njit(cache=True, nogil=True)
def _compact(bits: Any, sup: Any, owner: Any, last: Any, now: int) -> int:  # pragma: no cover
    # Renumber the live marks (one per distinct block, at its last touch) to times
    # 1..live, in the same order. Typed constants, not literals, throughout: numba compiles
    # a helper once per literal value it is given.
    live = np.int64(0)
    for t in range(1, now):
        b = owner[t]
        if b >= 0 and last[b] == t:
            live += 1
            owner[live] = b
            last[b] = live
    for t in range(live + 1, now):
        owner[t] = -1
    _rebuild(bits, sup, live, (now >> 6) + 1)
    return int(live + 1)


def _stack_state(time_slots: int, n_ids: int) -> tuple[np.ndarray, ...]:
    """`_stack_histograms`' empty state: the live marks' bit words and superblock counts, each
    time slot's block (−1: none), and per block the time of its live mark (0: not cached).
    Made here: an array allocated in compiled code compiles numba's `np.full` or `np.zeros`
    with it on a first run."""
    n_super = (time_slots >> _SUPER_SHIFT) + 1
    return (np.zeros(n_super * _WORDS_PER_SUPER, dtype=np.uint64),
            np.zeros(n_super + 1, dtype=np.int32), np.full(time_slots + 1, -1, dtype=np.int32),
            np.zeros(n_ids, dtype=np.int32))


@numba.njit(cache=True, nogil=True)
def _stack_histograms(  # pragma: no cover - compiled
    offsets: Any,
    ids: Any,
    block: Any,
    last_tokens: Any,
    max_hit_blocks: Any,
    out_offsets: Any,
    out_ids: Any,
    n_ids: int,
    order: Any,
    segment_starts: Any,
    head_first: bool,
    time_slots: int,
    hist: Any,
    bits: Any,
    sup: Any,
    owner: Any,
    last: Any,
) -> None:
    """Per partition, a fresh cache: look up each request's prefix (`_lookup_prefix`), then
    touch its blocks (`_touch_blocks`); `hist[d]` gathers what hits at capacity ≥ d. The
    state comes from the caller (`_stack_state`)."""
    n_segments = segment_starts.shape[0] - 1
    # np.int64, not a literal: numba compiles a helper once per literal value it is given.
    now = np.int64(1)
    for seg in range(n_segments):
        # A fresh cache for each partition: forget the previous partition's blocks
        # (O(its touches) plus the small superblock tree).
        for t in range(1, now):
            b = owner[t]
            if b >= 0 and last[b] == t:
                last[b] = 0
            owner[t] = -1
        if now > 1:
            _rebuild(bits, sup, np.int64(0), int(now >> 6) + 1)
        now = np.int64(1)
        live = np.int64(0)
        for pos in range(segment_starts[seg], segment_starts[seg + 1]):
            r = order[pos]
            _lookup_prefix(r, offsets, ids, block, last_tokens, max_hit_blocks, last, bits, sup,
                           live, hist)
            now, live = _touch_blocks(r, offsets, ids, out_offsets, out_ids, head_first,
                                      time_slots, bits, sup, owner, last, now, live)


@numba.njit(cache=True, nogil=True)
def _lookup_prefix(r, offsets, ids, block, last_tokens, max_hit_blocks, last, bits, sup, live,
                   hist):  # pragma: no cover - compiled
    """Request `r`'s leading cached blocks: block k hits at every capacity ≥ the running
    maximum of the stack distances of blocks 1..k (each worth B tokens, its last block
    `last_tokens[r]`)."""
    start = offsets[r]
    nb = offsets[r + 1] - start
    cap = max_hit_blocks[r]
    if cap > nb:
        cap = nb
    running = 0
    prev_t = 0
    prefix = 0
    for k in range(cap):
        t = last[ids[start + k]]
        if t == 0:
            break
        # Blocks touched together by one request sit at adjacent times; the mark at
        # the previous block's time is live, so the prefix count moves by exactly one.
        if t == prev_t - 1:
            prefix -= 1
        elif t == prev_t + 1 and prev_t > 0:
            prefix += 1
        else:
            prefix = _count_upto(bits, sup, t)
        prev_t = t
        d = live - prefix + 1
        if d > running:
            running = d
        hist[running, 0] += block if k < nb - 1 else last_tokens[r]
        hist[running, 1] += 1


@numba.njit(cache=True, nogil=True)
def _touch_blocks(r, offsets, ids, out_offsets, out_ids, head_first, time_slots, bits, sup,
                  owner, last, now, live):  # pragma: no cover - compiled
    """Touch request `r`'s prompt then output blocks, the last one first unless head-first:
    each moves its live mark to the current time. Returns (time, live marks)."""
    start = offsets[r]
    nb = offsets[r + 1] - start
    o_start = out_offsets[r]
    total = nb + out_offsets[r + 1] - o_start
    for j in range(total):
        k = j if head_first else total - 1 - j
        b = ids[start + k] if k < nb else out_ids[o_start + k - nb]
        if now > time_slots:
            # Before unmarking b: compaction keeps exactly the live marks.
            now = _compact(bits, sup, owner, last, now)
        t = last[b]
        if t != 0:
            _mark(bits, sup, t, np.int64(-1))
        else:
            live += 1
        _mark(bits, sup, now, np.int64(1))
        owner[now] = b
        last[b] = now
        now += 1
    return now, live



def stack_distance_histograms(
    blocks: SweepBlocks,
    *,
    touch_order: TouchOrder | str = "tail-first",
    partitions: NDArray[Any] | None = None,
) -> DistanceHistograms:
    """One LRU pass over `blocks`: the histograms behind every capacity's hits.

    `touch_order` is "tail-first" (block 1 most recent) or "head-first" (flat LRU).
    `partitions` (optional, a code per request; scope instance) makes each partition its own
    cache; the returned histograms are summed over partitions.
    """
    order_name = checked_touch_order(touch_order)
    k = blocks.checked()
    n_requests = k.num_requests
    order, segment_starts = partition_order(partitions, n_requests)
    # Time slots: twice the most live marks, so compaction runs at most once per n_ids touches.
    total_touches = (int(k.offsets[-1] - k.offsets[0])
                     + int(k.output_offsets[-1] - k.output_offsets[0]))
    time_slots = int(min(max(2 * k.n_ids, _MIN_TIME_SLOTS), max(total_touches, 1),
                         MAX_INT32_IDS))
    # One row per distance: (hit tokens, hit blocks) share a cache line.
    hist = np.zeros((k.n_ids + 2, 2), dtype=np.int64)
    if n_requests and total_touches:
        _stack_histograms(
            k.offsets, k.ids, np.int64(k.block_size_tokens), k.last_block_tokens,
            k.max_hit_blocks, k.output_offsets, k.output_ids,
            k.n_ids, order, segment_starts, order_name == "head-first", time_slots, hist,
            *_stack_state(time_slots, k.n_ids),
        )
    return DistanceHistograms(hit_tokens=np.ascontiguousarray(hist[:, 0]),
                              hit_blocks=np.ascontiguousarray(hist[:, 1]))



def _instance_blocks(chains: BlockChains, rows: NDArray[np.int64]) -> SweepBlocks:
    """The blocks of the requests `rows` (in order), ids unchanged."""
    offsets, index = segment_ranges(np.asarray(chains.offsets, dtype=np.int64), rows)
    out_offsets = out_ids = None
    if chains.output_offsets is not None and chains.output_ids is not None:
        out_offsets, out_index = segment_ranges(
            np.asarray(chains.output_offsets, dtype=np.int64), rows)
        out_ids = chains.output_ids[out_index]
    return SweepBlocks(offsets=offsets, ids=chains.ids[index],
                       block_size_tokens=chains.block_size_tokens,
                       last_block_tokens=np.asarray(chains.last_block_tokens)[rows],
                       max_hit_blocks=np.asarray(chains.max_hit_blocks)[rows],
                       n_ids=chains.num_distinct, output_offsets=out_offsets, output_ids=out_ids)


def sweep(
    chains: BlockChains,
    *,
    touch_order: TouchOrder | str = "tail-first",
    instance_codes: NDArray[Any] | None = None,
    kv_bytes_per_token: int | None = None,
    shares: tuple[float, ...] = DEFAULT_SHARES,
    per_instance: bool = False,
) -> CapacityCurve:
    """The LRU capacity curve of `chains` (replay-spec §6), equal to LRU replays at every capacity.

    `instance_codes` (one int per request) splits the requests into per-instance caches of the
    same capacity (scope instance); the curve then sums their hits. Routes whose choice depends
    on the cache contents (prefix-affinity) cannot be swept in one pass; give static codes.
    `per_instance=True` also returns each instance's own curve (one pass per instance).
    """
    order = checked_touch_order(touch_order)
    terms = CurveTerms(block_size_tokens=int(chains.block_size_tokens), touch_order=order,
                       kv_bytes_per_token=kv_bytes_per_token, shares=shares)
    prompt_tokens = np.asarray(chains.prompt_tokens, dtype=np.int64)
    if not per_instance or instance_codes is None:
        hist = stack_distance_histograms(SweepBlocks.of(chains), touch_order=order,
                                         partitions=instance_codes)
        parts = 1 if instance_codes is None else int(np.unique(instance_codes).size)
        return curve_from_histograms(hist, terms, prompt_tokens, partitions=parts)

    codes = np.asarray(instance_codes)
    total_tok = np.zeros(chains.num_distinct + 2, dtype=np.int64)
    total_blk = np.zeros(chains.num_distinct + 2, dtype=np.int64)
    curves: list[CapacityCurve] = []
    uniques = np.unique(codes)
    for code in uniques:
        rows = np.flatnonzero(codes == code).astype(np.int64)
        hist = stack_distance_histograms(_instance_blocks(chains, rows), touch_order=order)
        total_tok += hist.hit_tokens
        total_blk += hist.hit_blocks
        curves.append(curve_from_histograms(hist, terms, prompt_tokens[rows]))
    return curve_from_histograms(DistanceHistograms(hit_tokens=total_tok, hit_blocks=total_blk),
                                 terms, prompt_tokens, partitions=len(uniques),
                                 instance_codes=tuple(int(c) for c in uniques),
                                 instance_curves=tuple(curves))
