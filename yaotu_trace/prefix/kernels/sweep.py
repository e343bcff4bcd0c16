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

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.curve import _MAX_INT32_IDS as _MAX_INT32_IDS
from yaotu_trace.prefix.kernels.curve import DEFAULT_SHARES as DEFAULT_SHARES
from yaotu_trace.prefix.kernels.curve import TOUCH_ORDERS as TOUCH_ORDERS
from yaotu_trace.prefix.kernels.curve import CapacityCurve as CapacityCurve
from yaotu_trace.prefix.kernels.curve import DistanceHistograms as DistanceHistograms
from yaotu_trace.prefix.kernels.curve import TouchOrder as TouchOrder
from yaotu_trace.prefix.kernels.curve import _kernel_inputs, _partition_order
from yaotu_trace.prefix.kernels.curve import curve_from_histograms as curve_from_histograms

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from yaotu_trace.prefix.kernels.blocks import BlockChains

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
def _rebuild(bits: Any, sup: Any, live: int, used_words: int) -> None:  # pragma: no cover
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
    # 1..live, in the same order.
    live = 0
    for t in range(1, now):
        b = owner[t]
        if b >= 0 and last[b] == t:
            live += 1
            owner[live] = b
            last[b] = live
    for t in range(live + 1, now):
        owner[t] = -1
    _rebuild(bits, sup, live, (now >> 6) + 1)
    return live + 1


@numba.njit(cache=True, nogil=True)
def _stack_histograms(  # pragma: no cover - compiled
    offsets: Any,
    ids: Any,
    block_tokens: Any,
    max_hit_blocks: Any,
    out_offsets: Any,
    out_ids: Any,
    n_ids: int,
    order: Any,
    segment_starts: Any,
    head_first: bool,
    time_slots: int,
    hist: Any,
) -> None:
    """Per partition, a fresh cache: look up each request's prefix (`_lookup_prefix`), then
    touch its blocks (`_touch_blocks`); `hist[d]` gathers what hits at capacity ≥ d."""
    # last[b]: time of b's live mark in the current partition, 0 when b is not cached there.
    n_super = (time_slots >> _SUPER_SHIFT) + 1
    bits = np.zeros(n_super * _WORDS_PER_SUPER, dtype=np.uint64)
    sup = np.zeros(n_super + 1, dtype=np.int32)
    owner = np.full(time_slots + 1, -1, dtype=np.int32)
    last = np.zeros(n_ids, dtype=np.int32)
    n_segments = segment_starts.shape[0] - 1
    now = 1
    for seg in range(n_segments):
        # A fresh cache for each partition: forget the previous partition's blocks
        # (O(its touches) plus the small superblock tree).
        for t in range(1, now):
            b = owner[t]
            if b >= 0 and last[b] == t:
                last[b] = 0
            owner[t] = -1
        if now > 1:
            _rebuild(bits, sup, 0, (now >> 6) + 1)
        now = 1
        live = 0
        for pos in range(segment_starts[seg], segment_starts[seg + 1]):
            r = order[pos]
            _lookup_prefix(r, offsets, ids, block_tokens, max_hit_blocks, last, bits, sup, live,
                           hist)
            now, live = _touch_blocks(r, offsets, ids, out_offsets, out_ids, head_first,
                                      time_slots, bits, sup, owner, last, now, live)


@numba.njit(cache=True, nogil=True)
def _lookup_prefix(r, offsets, ids, block_tokens, max_hit_blocks, last, bits, sup, live,
                   hist):  # pragma: no cover - compiled
    """Request `r`'s leading cached blocks: block k hits at every capacity ≥ the running
    maximum of the stack distances of blocks 1..k."""
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
        hist[running, 0] += block_tokens[start + k]
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
            _mark(bits, sup, t, -1)
        else:
            live += 1
        _mark(bits, sup, now, 1)
        owner[now] = b
        last[b] = now
        now += 1
    return now, live



def stack_distance_histograms(
    *,
    offsets: NDArray[Any],
    ids: NDArray[Any],
    block_tokens: NDArray[Any],
    max_hit_blocks: NDArray[Any],
    touch_order: TouchOrder = "tail-first",
    partitions: NDArray[Any] | None = None,
    n_ids: int | None = None,
    output_offsets: NDArray[Any] | None = None,
    output_ids: NDArray[Any] | None = None,
) -> DistanceHistograms:
    """One LRU pass over block chains: the histograms behind every capacity's hits.

    Args:
        offsets: int, n_requests + 1; request `r`'s cacheable blocks are
            `ids[offsets[r]:offsets[r + 1]]`, block 1 first.
        ids: dense chain ids (0..n_ids-1); equal ids are the same cached block.
        block_tokens: tokens of each entry of `ids` (B, or a cached partial block's length).
        max_hit_blocks: per request, the most leading blocks that may hit (last-token rule).
        touch_order: "tail-first" (block 1 most recent) or "head-first" (flat LRU).
        partitions: optional partition code per request (scope instance); each partition is
            its own cache and the returned histograms are summed over partitions.
        n_ids: number of distinct ids, outputs included (default: the largest id + 1).
        output_offsets, output_ids: blocks a request inserts after its prompt blocks
            (`--cache-outputs`); touched with them, never looked up.
    """
    order_name = str(touch_order)
    if order_name not in TOUCH_ORDERS:
        raise ConfigError(f"touch order {order_name!r} is not one of {', '.join(TOUCH_ORDERS)}")
    offsets64, ids32, tokens32, cap64, out_off, out_ids, n_ids = _kernel_inputs(
        offsets, ids, block_tokens, max_hit_blocks, output_offsets, output_ids, n_ids)
    n_requests = offsets64.shape[0] - 1
    order, segment_starts = _partition_order(partitions, n_requests)
    # Time slots: twice the most live marks, so compaction runs at most once per n_ids touches.
    total_touches = int(offsets64[-1] - offsets64[0]) + int(out_off[-1] - out_off[0])
    time_slots = int(min(max(2 * n_ids, _MIN_TIME_SLOTS), max(total_touches, 1),
                         _MAX_INT32_IDS))
    # One row per distance: (hit tokens, hit blocks) share a cache line.
    hist = np.zeros((n_ids + 2, 2), dtype=np.int64)
    if n_requests and total_touches:
        _stack_histograms(
            offsets64, ids32, tokens32, cap64, out_off, out_ids, n_ids, order, segment_starts,
            order_name == "head-first", time_slots, hist,
        )
    return DistanceHistograms(hit_tokens=np.ascontiguousarray(hist[:, 0]),
                              hit_blocks=np.ascontiguousarray(hist[:, 1]))



def _gather(offsets: NDArray[np.int64], values: NDArray[Any], rows: NDArray[np.int64]
            ) -> tuple[NDArray[np.int64], NDArray[Any]]:
    """The segments `rows` of a flat (offsets, values) array, as a new flat array."""
    lengths = np.diff(offsets)[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    index = (np.repeat(offsets[rows] - new_offsets[:-1], lengths)
             + np.arange(total, dtype=np.int64))
    return new_offsets, values[index]


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
    order = str(touch_order)
    block = int(chains.block_size_tokens)
    prompt_tokens = np.asarray(chains.prompt_tokens, dtype=np.int64)

    def curve_of(hist: DistanceHistograms, prompt: NDArray[np.int64], parts: int,
                 **extra: Any) -> CapacityCurve:
        return curve_from_histograms(
            hist, block_size_tokens=block, touch_order=order,  # type: ignore[arg-type]
            prompt_tokens_total=int(prompt.sum()), full_blocks_total=int((prompt // block).sum()),
            partitions=parts, kv_bytes_per_token=kv_bytes_per_token, shares=shares, **extra,
        )

    if not per_instance or instance_codes is None:
        hist = stack_distance_histograms(
            offsets=chains.offsets,
            ids=chains.ids,
            block_tokens=chains.block_tokens,
            max_hit_blocks=chains.max_hit_blocks,
            touch_order=order,  # type: ignore[arg-type]
            partitions=instance_codes,
            n_ids=chains.num_distinct,
            output_offsets=chains.output_offsets,
            output_ids=chains.output_ids,
        )
        parts = 1 if instance_codes is None else int(np.unique(instance_codes).size)
        return curve_of(hist, prompt_tokens, parts)

    codes = np.asarray(instance_codes)
    offsets = np.asarray(chains.offsets, dtype=np.int64)
    has_outputs = chains.output_offsets is not None and chains.output_ids is not None
    total_tok = np.zeros(chains.num_distinct + 2, dtype=np.int64)
    total_blk = np.zeros(chains.num_distinct + 2, dtype=np.int64)
    curves: list[CapacityCurve] = []
    uniques = np.unique(codes)
    for code in uniques:
        rows = np.flatnonzero(codes == code).astype(np.int64)
        sub_offsets, sub_ids = _gather(offsets, chains.ids, rows)
        _, sub_tokens = _gather(offsets, chains.block_tokens, rows)
        out_offsets = out_ids = None
        if has_outputs:
            assert chains.output_ids is not None  # has_outputs
            out_offsets, out_ids = _gather(np.asarray(chains.output_offsets, dtype=np.int64),
                                           chains.output_ids, rows)
        hist = stack_distance_histograms(
            offsets=sub_offsets, ids=sub_ids, block_tokens=sub_tokens,
            max_hit_blocks=np.asarray(chains.max_hit_blocks)[rows],
            touch_order=order,  # type: ignore[arg-type]
            n_ids=chains.num_distinct, output_offsets=out_offsets, output_ids=out_ids,
        )
        total_tok += hist.hit_tokens
        total_blk += hist.hit_blocks
        curves.append(curve_of(hist, prompt_tokens[rows], 1))
    return curve_of(DistanceHistograms(hit_tokens=total_tok, hit_blocks=total_blk),
                    prompt_tokens, len(uniques),
                    instance_codes=tuple(int(c) for c in uniques),
                    instance_curves=tuple(curves))
