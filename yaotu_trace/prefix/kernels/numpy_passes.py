"""The chain build and the LRU stack distances in numpy (and pandas' hash table): no numba to
import or start.

The same two passes as the compiled kernels, as vector operations, giving the same numbers bit
for bit:

- chain ids (`NUMPY_KERNELS`, driven by `chains.chain_layout` exactly as `blocks`' kernels are):
  the splitmix64 terms of every unit in uint64 arithmetic, which wraps like the kernel's; each
  block's lane sum is a difference of one prefix sum over the units (addition mod 2^64 does not
  depend on the grouping); dense ids number lane A in first-appearance order (a sort's first
  occurrences, ranked by position: no pandas to import), and lane B is checked against the
  first occurrence, as the kernel's table does;
- stack distances (`stack_distance_histograms`, the signature of `sweep`'s): a lookup of a
  block last touched at time p, before the request's own touches (times after q), has
  distance 1 + the distinct blocks touched in (p, q]. A touch i is the first in that range of
  its block iff its previous touch prev(i) ≤ p, so the count is #{i ≤ q : prev(i) ≤ p} − p: a
  dominance count, answered for all lookups at once by a merge-sort tree (per level, prev
  sorted within aligned runs of 2^L touches, and one `searchsorted` per lookup and level):
  O(n log² n) in vector operations. A lookup whose last touch is next to the previous
  lookup's (blocks an earlier request touched together) is that distance ± 1, as the kernel
  also uses, so only the others are counted. Per request the hit stops at the first block
  never touched, and a block hits from the running maximum of the distances along the prefix
  on, as in the kernel.

The overview of a small trace runs on these (`prefix/small.py`), as do every small chain
build (`PreparedTrace.chains`) and small unlimited replay (`small_unlimited`), where they are
faster than numba's import and first call, and need no compiling on a fresh install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.prefix.kernels.chains import (
    MIX_MUL_1,
    MIX_MUL_2,
    MIX_SHIFT_1,
    MIX_SHIFT_2,
    MIX_SHIFT_3,
    NAMESPACE_SALT,
    PARTIAL_SALT,
    BlockChains,
    BlockLayout,
    ChainKernels,
    PromptContent,
    chain_layout,
    offsets_of,
    segment_positions,
)
from yaotu_trace.prefix.kernels.curve import (
    DEFAULT_SHARES,
    CapacityCurve,
    CurveTerms,
    DistanceHistograms,
    KernelBlocks,
    SweepBlocks,
    checked_touch_order,
    curve_from_histograms,
    partition_order,
)
from yaotu_trace.prefix.kernels.result import ReplayResult, hits_result
from yaotu_trace.prefix.rules import ReplayRules, Scope, TouchOrder

if TYPE_CHECKING:
    from numpy.typing import NDArray


def _mix(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finalizer, in place on a uint64 array (wraps mod 2^64 like the kernel)."""
    z ^= z >> MIX_SHIFT_1
    z *= MIX_MUL_1
    z ^= z >> MIX_SHIFT_2
    z *= MIX_MUL_2
    z ^= z >> MIX_SHIFT_3
    return z


def _interleave(off_a: NDArray[Any], val_a: NDArray[Any], off_b: NDArray[Any],
                val_b: NDArray[Any]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per request, the units of a followed by those of b (prompt then output)."""
    len_a, len_b = np.diff(off_a), np.diff(off_b)
    off = np.zeros(len(len_a) + 1, dtype=np.int64)
    np.cumsum(len_a + len_b, out=off[1:])
    out = np.empty(int(off[-1]), dtype=np.int64)
    pos_a, pos_b = segment_positions(len_a), segment_positions(len_b)
    out[np.repeat(off[:-1], len_a) + pos_a] = val_a[np.repeat(off_a[:-1], len_a) + pos_a]
    out[np.repeat(off[:-1] + len_a, len_b) + pos_b] = val_b[np.repeat(off_b[:-1], len_b) + pos_b]
    return off, out


def _chain_hashes(layout: BlockLayout, keys: NDArray[np.uint64], out_a: NDArray[np.uint64],
                  out_b: NDArray[np.uint64]) -> None:
    """`blocks._chain_hashes` in numpy: both lanes of every full and partial block."""
    unit_offsets = np.asarray(layout.unit_offsets, dtype=np.int64)
    units = np.diff(unit_offsets)
    v = np.ascontiguousarray(layout.values, dtype=np.int64).view(np.uint64)
    u = segment_positions(units).view(np.uint64)
    upb = int(layout.units_per_block)
    n = len(layout.full_blocks)
    full = np.asarray(layout.full_blocks, dtype=np.int64)
    block_offsets = layout.block_offsets
    partial_weight = layout.partial_tokens
    starts = unit_offsets[:-1]
    # Full block k of request i ends at unit starts[i] + (k + 1)·upb; a partial block at the
    # request's last unit.
    req = np.repeat(np.arange(n, dtype=np.int64), full)
    k = segment_positions(full)
    full_end = starts[req] + (k + 1) * upb
    full_out = np.asarray(block_offsets, dtype=np.int64)[req] + k
    with_partial = np.flatnonzero(np.asarray(partial_weight) > 0)
    weight = (np.asarray(partial_weight, dtype=np.int64)[with_partial].view(np.uint64)
              ^ PARTIAL_SALT)
    partial_out = np.asarray(block_offsets, dtype=np.int64)[with_partial] + full[with_partial]
    ns = np.ascontiguousarray(layout.namespaces, dtype=np.int64).view(np.uint64) * NAMESPACE_SALT
    for lane, out in ((0, out_a), (1, out_b)):
        k0, k1, k2 = keys[3 * lane], keys[3 * lane + 1], keys[3 * lane + 2]
        terms = u * k2
        terms += k0
        terms += v * k1
        _mix(terms)
        # prefix[j] = Σ terms[:j] (mod 2^64), so a request's running sum is a difference.
        prefix = np.zeros(len(terms) + 1, dtype=np.uint64)
        np.cumsum(terms, out=prefix[1:])
        base = _mix(ns ^ k0) - prefix[starts]
        out[full_out] = _mix(base[req] + prefix[full_end] + k0)
        if with_partial.size:
            ends = unit_offsets[with_partial + 1]
            out[partial_out] = _mix(base[with_partial] + prefix[ends] + _mix(weight ^ k0) + k0)


def _dense_ids(hash_a: NDArray[np.uint64], hash_b: NDArray[np.uint64],
               table_bits: Any) -> tuple[NDArray[np.int32], int, int]:
    """`blocks._dense_ids` in numpy: lane A numbered in first-appearance order, lane B
    compared with the first occurrence of its id."""
    del table_bits  # no table here
    if hash_a.size == 0:
        return np.zeros(0, dtype=np.int32), 0, 0
    # (np.unique would do, but its inverse imports numpy.ma: 10 ms of a 0.4 s sweep.)
    order = np.argsort(hash_a)
    ordered = hash_a[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    first_at = np.minimum.reduceat(order, starts)
    # Rank the distinct ids by where each first appears: 0 for the first seen, and so on.
    rank = np.empty(len(starts), dtype=np.int64)
    rank[np.argsort(first_at)] = np.arange(len(starts))
    new = np.zeros(len(order), dtype=np.int64)
    new[starts] = 1
    group = np.cumsum(new) - 1  # the distinct id of each place in `ordered`
    codes = np.empty(len(order), dtype=np.int64)
    codes[order] = rank[group]
    first = np.sort(first_at)  # first[c]: where id number c first appears
    collisions = int(np.count_nonzero(hash_b != hash_b[first[codes]]))
    return codes.astype(np.int32), len(starts), collisions


NUMPY_KERNELS = ChainKernels(interleave=_interleave, chain_hashes=_chain_hashes,
                             dense_ids=_dense_ids)


def build_block_chains(content: PromptContent, namespace_codes: np.ndarray | None,
                       rules: ReplayRules) -> BlockChains:
    """`blocks.build_block_chains` with the numpy passes: the same `BlockChains`."""
    return chain_layout(content, namespace_codes, rules, NUMPY_KERNELS)


def _touch_sequence(blocks: KernelBlocks, order: NDArray[np.int64], part_of: NDArray[np.int64],
                    head_first: bool) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every touch in time order (requests in `order`, each its prompt then output blocks,
    reversed unless head-first) as a partition-qualified block key, and the touches before
    each request (its lookup time q)."""
    offsets, out_off = blocks.offsets, blocks.output_offsets
    ids, out_ids = blocks.ids.astype(np.int64), blocks.output_ids.astype(np.int64)
    n_prompt = np.diff(offsets)[order]
    n_out = np.diff(out_off)[order]
    ordered_off, ordered = _interleave(
        offsets_of(n_prompt), ids[_rows(offsets, order, n_prompt)],
        offsets_of(n_out), out_ids[_rows(out_off, order, n_out)])
    total = n_prompt + n_out
    if not head_first:  # the last block is touched first
        pos = segment_positions(total)
        ordered = ordered[np.repeat(ordered_off[:-1] + total - 1, total) - pos]
    keys = np.repeat(part_of, total) * np.int64(blocks.n_ids) + ordered
    return keys, ordered_off[:-1]


def _rows(offsets: NDArray[np.int64], order: NDArray[np.int64],
          lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """Indices of the segments `order` of a flat (offsets, values) array, concatenated."""
    return np.repeat(offsets[:-1][order], lengths) + segment_positions(lengths)


def _count_prev_at_most(prev: NDArray[np.int64], before: NDArray[np.int64],
                        bound: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each query j, #{i < before[j] : prev[i] ≤ bound[j]}, by a merge-sort tree.

    A prefix [0, before) is the union of one aligned run of 2^L positions per set bit L of
    `before`; at level L `prev` is sorted within each run (key = run << S | prev), built from
    the level below by a stable sort whose input is already sorted pairs of runs.
    """
    n = len(prev)
    shift = np.int64(max(int(n + 1).bit_length(), 1))
    low = (np.int64(1) << shift) - 1
    index = np.arange(n, dtype=np.int64)
    values = np.asarray(prev, dtype=np.int64)
    counts = np.zeros(len(before), dtype=np.int64)
    level = 0
    while (1 << level) <= n:
        keys = ((index >> level) << shift) | values
        chosen = np.flatnonzero((before >> level) & 1)
        if chosen.size:
            run = (before[chosen] >> level) - 1
            found = np.searchsorted(keys, (run << shift) | bound[chosen], side="right")
            counts[chosen] += found - (run << level)
        values = np.sort(((index >> (level + 1)) << shift) | values, kind="stable") & low
        level += 1
    return counts


def _distances(prev: NDArray[np.int64], request: NDArray[np.int64], q: NDArray[np.int64],
               last: NDArray[np.int64]) -> NDArray[np.int64]:
    """Stack distance 1 + #distinct blocks touched in (last, q] of each lookup.

    Blocks one earlier request touched together sit at adjacent times: when a lookup's last
    touch is the previous lookup's ∓ 1 (same request), one block more (fewer) lies between it
    and q, so its distance is the previous one ± 1 (the kernel's shortcut too). Only the
    other lookups (anchors) are counted in the tree.
    """
    same = np.zeros(len(last), dtype=bool)
    same[1:] = request[1:] == request[:-1]
    step = np.zeros(len(last), dtype=np.int64)
    step[1:] = np.where(last[1:] == last[:-1] - 1, 1, np.where(last[1:] == last[:-1] + 1, -1, 0))
    step[~same] = 0
    anchor = ~same | (step == 0)
    at = np.flatnonzero(anchor)
    counted = 1 + _count_prev_at_most(prev, q[at], last[at]) - last[at]
    walked = np.cumsum(step)
    run = np.cumsum(anchor) - 1
    return counted[run] + walked - walked[at][run]


def _last_touch(touches: NDArray[np.int64], key: NDArray[np.int64],
                q: NDArray[np.int64]) -> NDArray[np.int64]:
    """Time of each key's last touch at a time ≤ q (0: none), by searching (key rank, time)
    among all touches."""
    n = len(touches)
    unique_keys, rank_of_touch = np.unique(touches, return_inverse=True)
    stride = np.int64(n + 1)
    by_rank_time = np.sort(rank_of_touch * stride + np.arange(1, n + 1, dtype=np.int64))
    rank = np.minimum(np.searchsorted(unique_keys, key), len(unique_keys) - 1)
    at = np.searchsorted(by_rank_time, rank * stride + q, side="right") - 1
    found = (unique_keys[rank] == key) & (at >= 0)
    hit = by_rank_time[np.maximum(at, 0)]
    found &= hit // stride == rank
    return np.where(found, hit % stride, 0)


def stack_distance_histograms(
    blocks: SweepBlocks,
    *,
    touch_order: TouchOrder | str = "tail-first",
    partitions: NDArray[Any] | None = None,
) -> DistanceHistograms:
    """`sweep.stack_distance_histograms` in numpy (same arguments, same histograms)."""
    order_name = checked_touch_order(touch_order)
    k = blocks.checked()
    offsets64, ids32, cap64, n_ids = k.offsets, k.ids, k.max_hit_blocks, k.n_ids
    n_requests = k.num_requests
    order, segment_starts = partition_order(partitions, n_requests)
    hit_tokens = np.zeros(n_ids + 2, dtype=np.int64)
    hit_blocks = np.zeros(n_ids + 2, dtype=np.int64)
    if n_requests == 0:
        return DistanceHistograms(hit_tokens=hit_tokens, hit_blocks=hit_blocks)
    # Each partition is its own cache: its requests are contiguous in `order`, and its blocks
    # are keyed apart from other partitions', so a range of its touches holds only its blocks.
    part_of = np.repeat(np.arange(len(segment_starts) - 1, dtype=np.int64),
                        np.diff(segment_starts))
    touches, lookup_time = _touch_sequence(k, order, part_of, order_name == "head-first")
    n = len(touches)
    if n == 0:
        return DistanceHistograms(hit_tokens=hit_tokens, hit_blocks=hit_blocks)
    # Times are 1-based positions; prev[i] is the previous touch time of touch i's block (0).
    by_key = np.argsort(touches, kind="stable")
    sorted_keys = touches[by_key]
    prev = np.zeros(n, dtype=np.int64)
    same = sorted_keys[1:] == sorted_keys[:-1]
    prev[by_key[1:][same]] = by_key[:-1][same] + 1

    # Lookups: request r's first min(cap, blocks) prompt blocks, at time q = lookup_time[r].
    n_prompt = np.diff(offsets64)[order]
    cap = np.clip(cap64[order], 0, n_prompt)
    rows = _rows(offsets64, order, cap)
    request = np.repeat(np.arange(n_requests, dtype=np.int64), cap)
    if not len(request):
        return DistanceHistograms(hit_tokens=hit_tokens, hit_blocks=hit_blocks)
    q = lookup_time[request]
    # Last touch of the key at a time ≤ q: the previous touch of the request's own touch of
    # it, when that is at most q (always, unless a request repeats a block: then searched).
    position = segment_positions(cap)
    if order_name == "head-first":
        own = q + position
    else:
        total = (np.diff(offsets64) + np.diff(k.output_offsets))[order]
        own = q + total[request] - 1 - position
    last = prev[own]
    if np.any(last > q):
        last = _last_touch(touches, part_of[request] * np.int64(n_ids) + ids32[rows], q)
    found = last > 0
    # A request's hit ends at its first block not cached (never touched in its partition).
    misses = np.cumsum(~found)
    seg_start = offsets_of(cap)[:-1]
    before_seg = np.where(seg_start > 0, misses[np.maximum(seg_start - 1, 0)], 0)
    leading = (misses - np.repeat(before_seg, cap)) == 0
    request, rows, q, last = request[leading], rows[leading], q[leading], last[leading]
    if not len(request):
        return DistanceHistograms(hit_tokens=hit_tokens, hit_blocks=hit_blocks)
    distance = _distances(prev, request, q, last)
    # The running maximum along each request's prefix: offset each request above the last.
    lift = request * np.int64(n_ids + 2)
    running = np.maximum.accumulate(distance + lift) - lift
    owner = order[request]
    tokens = np.where(rows == offsets64[owner + 1] - 1,
                      k.last_block_tokens[owner].astype(np.int64), np.int64(k.block_size_tokens))
    np.add.at(hit_tokens, running, tokens)
    hit_blocks += np.bincount(running, minlength=n_ids + 2).astype(np.int64)
    return DistanceHistograms(hit_tokens=hit_tokens, hit_blocks=hit_blocks)


def sweep(chains: BlockChains, *, touch_order: TouchOrder | str = "tail-first",
          kv_bytes_per_token: int | None = None,
          shares: tuple[float, ...] = DEFAULT_SHARES) -> CapacityCurve:
    """`sweep.sweep` of one global cache, with the numpy histograms: the same curve."""
    order = checked_touch_order(touch_order)
    terms = CurveTerms(block_size_tokens=int(chains.block_size_tokens), touch_order=order,
                       kv_bytes_per_token=kv_bytes_per_token, shares=shares)
    hist = stack_distance_histograms(SweepBlocks.of(chains), touch_order=order)
    return curve_from_histograms(hist, terms, chains.prompt_tokens)


def unlimited_hit_blocks(chains: BlockChains, *, capped: bool) -> NDArray[np.int64]:
    """Hit blocks per request of one unlimited cache (`engine._unlimited_hits` in numpy): a
    block hits iff its id first appeared in an earlier request, and the first miss ends the
    run; `capped` stops it at `max_hit_blocks` (the last-token rule), else at the prompt's
    blocks. Prompt blocks only (no outputs)."""
    offsets = chains.offsets
    counts = np.diff(offsets)
    n = counts.size
    ids = chains.ids.astype(np.int64)
    request = np.repeat(np.arange(n, dtype=np.int64), counts)
    first_request = np.full(max(chains.num_distinct, 1), n, dtype=np.int64)
    np.minimum.at(first_request, ids, request)
    miss = first_request[ids] >= request
    position = segment_positions(counts)
    run = counts.copy()
    misses = np.flatnonzero(miss)
    if misses.size:  # the first miss of each request (its smallest position)
        np.minimum.at(run, request[misses], position[misses])
    if capped:
        run = np.minimum(run, chains.max_hit_blocks)
    return run.astype(np.int64)


# Up to this many blocks an unlimited global replay runs here (`small_unlimited`): cheaper than
# compiling `engine._unlimited_hits` on a fresh install, or loading numba and the kernel.
SMALL_UNLIMITED_BLOCKS = 2_000_000


def small_unlimited(chains: BlockChains, rules: ReplayRules) -> ReplayResult | None:
    """The replay of `chains` under `rules` when it is one unlimited global cache of prompt
    blocks only and at most `SMALL_UNLIMITED_BLOCKS` blocks; else None."""
    outputs = chains.output_offsets is not None and chains.output_ids is not None
    if (rules.scope is Scope.INSTANCE or not rules.unlimited or outputs
            or chains.ids.size > SMALL_UNLIMITED_BLOCKS):
        return None
    return hits_result(chains, unlimited_hit_blocks(chains, capped=True), evicted_blocks=0,
                       inserted_blocks=chains.num_distinct, instance=None, num_instances=1)
