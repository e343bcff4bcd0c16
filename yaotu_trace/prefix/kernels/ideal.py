"""The ideal reuse of the waterfall: each prompt's longest common prefix with any earlier prompt.

Replaying at one token per block would give it too, but its id table holds one entry per
distinct token prefix of the whole trace (tens of bytes per token). Instead the ideal is built on
the block-level replay at block size B (one namespace, unlimited, no last-token rule), which
gives `h` whole matching blocks; the longest common prefix is `h·B + e` with `e < B`, and `e` is
found among the continuations of the matched chain only:

- every block seen for the first time inserts the hashes of its token prefixes of length
  1..B−1 under its parent chain id (a later copy of the block would insert the same keys);
  every prompt's trailing partial block inserts its own;
- request i then probes the prefixes of its block h+1 under its chain id at depth h, before it
  inserts anything, so only earlier requests count.

Only parents that some request probes (at most one per request, known from the block-level
hits) need their continuations inserted, so the table holds about (B−1) × (requests + their
first new blocks) keys, not one per distinct token prefix. Keys have two independent 64-bit
lanes: lane A is the key, lane B is checked on every match (as in `blocks.py`), and a detected
collision re-runs with fresh keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numba as nb
import numpy as np

from yaotu_trace.errors import YaotuError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.blocks import mix
from yaotu_trace.prefix.kernels.chains import HASH_TRIES, BlockChains, frozen_input, hash_keys
from yaotu_trace.prefix.kernels.compact import CompactChains
from yaotu_trace.prefix.kernels.engine import first_occurrence_slices
from yaotu_trace.prefix.kernels.stream import ParquetPrompts

# The chains the pass reads: flat, or held as runs by an analysis (it only gathers their ids).
Chains = BlockChains | CompactChains


@nb.njit(cache=True, inline="always")
def _probe(table, mask, h):
    """Slot of key h, or of the empty slot (key 0) where it would go; lanes sit side by side."""
    slot = np.int64(h & mask)
    while table[2 * slot] != 0 and table[2 * slot] != h:
        slot = (slot + 1) & np.int64(mask)
    return slot


@nb.njit(cache=True, inline="always")
def _nonzero(h):
    return h if h != 0 else np.uint64(1)


@nb.njit(cache=True, nogil=True)
def _extra_tokens(offsets, values, row0, block, chain_offsets, chain_ids, id_base, top,
                  hit_blocks, probed, keys, table, extra):
    """Per request, tokens of the longest match inside the block after its block-level hit.

    Requests `row0 ..` of one batch (`offsets` local to `values`, `chain_ids` the batch's chain
    ids from position `id_base` of the whole array); `table` ([lane A (0 = empty), lane B] per
    slot) and `top` (the largest chain id met) carry over between batches. Fills `extra`;
    returns the collisions.
    """
    size = np.int64(len(table) // 2)
    mask = np.uint64(size - 1)
    a0, a1, a2 = keys[0], keys[1], keys[2]
    b0, b1, b2 = keys[3], keys[4], keys[5]
    collisions = 0
    for li in range(len(offsets) - 1):
        i = row0 + li
        base = offsets[li]
        length = offsets[li + 1] - base
        cb = chain_offsets[i] - id_base
        full = chain_offsets[i + 1] - chain_offsets[i]
        # ---- lookup in the block after the hit
        h = hit_blocks[i]
        start = h * block
        limit = min(block - 1, length - start)
        parent = np.uint64(0) if h == 0 else np.uint64(chain_ids[cb + h - 1] + 1)
        ha = mix(parent * a1 + a0)
        hb = mix(parent * b1 + b0)
        e = 0
        for t in range(limit):
            v = np.uint64(values[base + start + t])
            ha = mix(ha + v * a1 + a2)
            hb = mix(hb + v * b1 + b2)
            slot = _probe(table, mask, _nonzero(ha))
            if table[2 * slot] == 0:
                break
            if table[2 * slot + 1] != hb:
                collisions += 1
                break
            e = t + 1
        extra[i] = e
        # ---- insert the token prefixes of new blocks and of the trailing partial block
        for k in range(full + 1):
            if k < full:
                # A block seen for the first time: ids are numbered by first appearance, so
                # its id is above every id before it (`top[0]`, carried between batches).
                d = chain_ids[cb + k]
                if d <= top[0]:
                    continue
                top[0] = d
                count = block - 1
            else:
                count = min(block - 1, length - full * block)
            code = 0 if k == 0 else chain_ids[cb + k - 1] + 1
            if not probed[code]:
                continue
            parent = np.uint64(code)
            ha = mix(parent * a1 + a0)
            hb = mix(parent * b1 + b0)
            seg = base + k * block
            for t in range(count):
                v = np.uint64(values[seg + t])
                ha = mix(ha + v * a1 + a2)
                hb = mix(hb + v * b1 + b2)
                key = _nonzero(ha)
                slot = _probe(table, mask, key)
                if table[2 * slot] == 0:
                    table[2 * slot] = key
                    table[2 * slot + 1] = hb
                elif table[2 * slot + 1] != hb:
                    collisions += 1
    return collisions


# Blocks per slice of the plan's per-block work (a few tens of MB of temporaries).
PLAN_SLICE = 1 << 22


def _plan(unit_offsets: np.ndarray, chains: Chains, hit_blocks: np.ndarray
          ) -> tuple[np.ndarray, int]:
    """Which parents are probed, and the table bits (no allocation).

    A segment's parent code is 0 for the root, else 1 + the chain id it continues. Per block
    the work is done in slices of `PLAN_SLICE` blocks: at 1e10 tokens (6.2e8 blocks) arrays of
    int64 per block held at once came to 20 GB, and a flag per block for the new ones 0.58 GiB
    (the kernel finds them itself, by a running maximum: `_extra_tokens`).
    """
    block = chains.block_size_tokens
    counts = chains.num_blocks
    start = chains.offsets[:-1]
    lengths = np.diff(unit_offsets)
    parent_of_hit = _parent_after(chains, start, hit_blocks)
    queries = lengths > hit_blocks * block
    probed = np.zeros(chains.num_distinct + 1, dtype=np.bool_)
    probed[parent_of_hit[queries]] = True
    del parent_of_hit, queries
    # Each block's parent is probed: the root's flag for a request's first block, else the
    # flag of 1 + the block before it (`probed[1:]` indexed by that block's id).
    firsts = start[counts > 0]
    probed_after = probed[1:]
    new_probed = 0
    last = -1  # the id before the slice
    for lo, ids, new in first_occurrence_slices(chains.id_slices(PLAN_SLICE)):
        hi = lo + ids.size
        parent_probed = np.empty(ids.size, dtype=np.bool_)
        parent_probed[1:] = probed_after[ids[:-1]]
        if lo > 0:
            parent_probed[0] = probed_after[last]
        last = int(ids[-1])
        a, b = np.searchsorted(firsts, (lo, hi))
        parent_probed[firsts[a:b] - lo] = probed[0]
        new_probed += int((new & parent_probed).sum())
    tails = np.minimum(lengths - counts * block, block - 1)
    parent_of_tail = _parent_after(chains, start, counts)
    inserts = (block - 1) * new_probed + int(tails[probed[parent_of_tail]].sum())
    bits = max(10, int(np.ceil(np.log2(inserts * 2 + 1))))
    return probed, bits


def _parent_after(chains: Chains, start: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Per request, the parent code of the segment after its first `blocks` blocks (int64)."""
    codes = np.zeros(len(start), dtype=np.int64)
    some = blocks > 0
    codes[some] = chains.ids_at(start[some] + blocks[some] - 1).astype(np.int64) + 1
    return codes


def table_bytes(bits: int) -> int:
    """Bytes of the prefix table: two 64-bit lanes per slot."""
    return 16 << bits


def ideal_hit_tokens(offsets: np.ndarray, values: np.ndarray, chains: Chains,
                     hit_blocks: np.ndarray, seed: int = 0) -> np.ndarray:
    """Token-granular longest common prefix with any earlier prompt, per request (int64).

    `chains` are the full blocks (no partial block) of the prompts in one namespace, and
    `hit_blocks` their unlimited, uncapped block-level hits.
    """
    offsets = frozen_input(offsets, np.int64)
    values = frozen_input(values, np.int64)
    return _ideal(offsets, chains, hit_blocks, seed, lambda: iter([(0, offsets, values)]))


def ideal_hit_tokens_streaming(prompts: ParquetPrompts, chains: Chains,
                               hit_blocks: np.ndarray, seed: int = 0) -> np.ndarray:
    """`ideal_hit_tokens` reading the tokens batch by batch from their Parquet file."""
    def batches() -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        for batch in prompts.batches():
            yield batch.row0, batch.offsets, batch.values

    return _ideal(prompts.offsets(), chains, hit_blocks, seed, batches)


def _ideal(unit_offsets: np.ndarray, chains: Chains, hit_blocks: np.ndarray, seed: int,
           batches: Callable[[], Iterator[tuple[int, np.ndarray, np.ndarray]]]) -> np.ndarray:
    block = chains.block_size_tokens
    base = hit_blocks.astype(np.int64) * block
    if block == 1:
        return base
    hit_blocks = hit_blocks.astype(np.int64)
    probed, bits = _plan(unit_offsets, chains, hit_blocks)
    memory.require(table_bytes(bits), "the ideal pass's prefix table")
    n = chains.num_requests
    for attempt in range(HASH_TRIES):
        keys = hash_keys(seed, 100 + attempt)
        table = np.zeros(2 << bits, dtype=np.uint64)
        extra = np.zeros(n, dtype=np.int64)
        top = np.full(1, -1, dtype=np.int64)  # the largest chain id met so far
        collisions = 0
        for row0, offsets, values in batches():
            lo = int(chains.offsets[row0])
            hi = int(chains.offsets[row0 + len(offsets) - 1])
            collisions += _extra_tokens(offsets, values, np.int64(row0), np.int64(block),
                                        chains.offsets,
                                        frozen_input(chains.ids_range(lo, hi), np.int32),
                                        np.int64(lo),
                                        top, hit_blocks, probed, keys, table, extra)
        del table
        if collisions == 0:
            return base + extra
    raise YaotuError(f"prefix hashing collided {HASH_TRIES} times in a row; this should not "
                     "happen: report it with the trace")
