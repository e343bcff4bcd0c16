"""Block chains: every request's cacheable prompt blocks as dense chain ids (spec §2).

A block's identity is its whole chain `(namespace, tokens of blocks 1..k)`. `build_block_chains`
turns flat prompt arrays into `BlockChains`, where equal ids mean equal chains, numbered densely
in order of first appearance. Everything downstream (the replay engine, the capacity sweep)
works on these int32 ids and never looks at tokens again.

Hashing. Each unit (a token, or a source block id) with value `v` at position `p` of its
request contributes `f(v, p) = mix(v·K1 + p·K2 + K0)` (splitmix64 finalizer `mix`; odd random
multipliers K1, K2 and offset K0 drawn per lane from the seed). A chain's hash is
`mix(Σ f over its units + namespace term)`: a segmented prefix sum, so one compiled pass over the
units hashes every block of every request, requests in parallel. Two lanes with independent keys
are computed. Lane A (64 bits) is looked up in an open-addressing table that
assigns the dense ids; lane B is stored per dense id and checked on every later occurrence, so a
lane-A collision (two different chains, one id) is detected rather than silently merging two
continuations. On detection the build re-runs with fresh keys; it raises after three tries.

Collision odds. With N distinct chains, lane A alone collides with probability ≈ N²/2⁶⁵:
about 2.7 % at N = 1e9 (1e-5 at 1e6 — a trace of 1e9 blocks is ~1.6e10 tokens at B = 16).
An undetected collision needs lane B to collide on the same pair too: ≈ N²/2¹²⁹ ≈ 1.5e-21 at
N = 1e9. The keys derive from `rules.seed`; a different seed defeats crafted inputs.

The layout around the hashing (`BlockChains`, block counts, retries, the output split) is in
`chains`, shared with the numpy passes of `small`. Compiled with numba (`cache=True`): the
cache directory must be writable; for read-only installs set `NUMBA_CACHE_DIR` to a writable
folder. Dtypes are pinned at the boundary (int64 offsets and values, int32 ids) so one compiled
signature serves every call.
"""


from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

from yaotu_trace.prefix.kernels.chains import (
    _M1,
    _M2,
    _NS,
    _PARTIAL,
    _S27,
    _S30,
    _S31,
    ChainKernels,
    chain_layout,
)
from yaotu_trace.prefix.kernels.chains import _MAX_IDS as _MAX_IDS
from yaotu_trace.prefix.kernels.chains import _TRIES as _TRIES
from yaotu_trace.prefix.kernels.chains import BlockChains as BlockChains
from yaotu_trace.prefix.kernels.chains import _assemble as _assemble
from yaotu_trace.prefix.kernels.chains import _keys as _keys
from yaotu_trace.prefix.kernels.chains import chain_bytes as chain_bytes
from yaotu_trace.prefix.kernels.chains import frozen_input as frozen_input
from yaotu_trace.prefix.rules import ReplayRules


@nb.njit(cache=True, inline="always")
def _mix(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@nb.njit(cache=True, parallel=True, nogil=True)
def _chain_hashes(
    unit_offsets: np.ndarray,  # int64 n+1: units (tokens or source ids) per request
    values: np.ndarray,  # int64 (or int32 tokens) units
    units_per_block: np.int64,
    full_blocks: np.ndarray,  # int64 per request
    partial_weight: np.ndarray,  # int64 per request; > 0 adds a trailing partial block
    ns_codes: np.ndarray,  # int64 per request
    block_offsets: np.ndarray,  # int64 n+1 into the outputs
    keys: np.ndarray,  # uint64 [K0, K1, K2] of lane A, then of lane B
    out_a: np.ndarray,  # uint64
    out_b: np.ndarray,  # uint64
) -> None:
    # Unit u of a request adds mix(v·K1 + K0 + u·K2) to its lane's running sum. The sums are
    # taken block by block, with no branch inside a block's loop, so the compiler vectorises
    # it (64-bit multiplies in SIMD); addition mod 2^64 makes the grouping irrelevant.
    n = len(full_blocks)
    for i in nb.prange(n):
        base = unit_offsets[i]
        units = unit_offsets[i + 1] - base
        a0, a1, a2 = keys[0], keys[1], keys[2]
        b0, b1, b2 = keys[3], keys[4], keys[5]
        ns = np.uint64(ns_codes[i]) * _NS
        sum_a = _mix(ns ^ a0)
        sum_b = _mix(ns ^ b0)
        out = block_offsets[i]
        upb = units_per_block
        for k in range(full_blocks[i]):
            first = k * upb
            part_a = np.uint64(0)
            part_b = np.uint64(0)
            for t in range(upb):
                v = np.uint64(values[base + first + t])
                u = np.uint64(first + t)
                part_a += _mix(v * a1 + (a0 + u * a2))
                part_b += _mix(v * b1 + (b0 + u * b2))
            sum_a += part_a
            sum_b += part_b
            out_a[out + k] = _mix(sum_a + a0)
            out_b[out + k] = _mix(sum_b + b0)
        if partial_weight[i] > 0:
            for t in range(full_blocks[i] * upb, units):
                v = np.uint64(values[base + t])
                u = np.uint64(t)
                sum_a += _mix(v * a1 + (a0 + u * a2))
                sum_b += _mix(v * b1 + (b0 + u * b2))
            w = np.uint64(partial_weight[i]) ^ _PARTIAL
            k = full_blocks[i]
            out_a[out + k] = _mix(sum_a + _mix(w ^ a0) + a0)
            out_b[out + k] = _mix(sum_b + _mix(w ^ b0) + b0)


@nb.njit(cache=True)
def _dense_ids(hash_a: np.ndarray, hash_b: np.ndarray, table_bits: np.int64):
    """Number lane-A hashes densely in first-appearance order; verify lane B per id."""
    size = np.int64(1) << table_bits
    mask = np.uint64(size - 1)
    keys = np.empty(size, dtype=np.uint64)
    slots = np.full(size, -1, dtype=np.int32)
    n = len(hash_a)
    lane_b = np.empty(n, dtype=np.uint64)
    ids = np.empty(n, dtype=np.int32)
    distinct = 0
    collisions = 0
    for j in range(n):
        h = hash_a[j]
        slot = np.int64(h & mask)
        while True:
            d = slots[slot]
            if d < 0:
                slots[slot] = distinct
                keys[slot] = h
                lane_b[distinct] = hash_b[j]
                ids[j] = distinct
                distinct += 1
                break
            if keys[slot] == h:
                if lane_b[d] != hash_b[j]:
                    collisions += 1
                ids[j] = d
                break
            slot = (slot + 1) & np.int64(size - 1)
    return ids, distinct, collisions


@nb.njit(cache=True)
def _interleave(off_a: np.ndarray, val_a: np.ndarray, off_b: np.ndarray, val_b: np.ndarray):
    """Per request, the units of a followed by those of b (prompt then output)."""
    n = len(off_a) - 1
    off = np.empty(n + 1, dtype=np.int64)
    off[0] = 0
    for i in range(n):
        off[i + 1] = off[i] + (off_a[i + 1] - off_a[i]) + (off_b[i + 1] - off_b[i])
    out = np.empty(off[n], dtype=np.int64)
    for i in range(n):
        p = off[i]
        for j in range(off_a[i], off_a[i + 1]):
            out[p] = val_a[j]
            p += 1
        for j in range(off_b[i], off_b[i + 1]):
            out[p] = val_b[j]
            p += 1
    return off, out


@nb.njit(cache=True, nogil=True)
def _dense_ids_into(hash_a, hash_b, table, by_id, ids, start, distinct, last):
    """`_dense_ids` over one batch (`stream`), with the table kept across batches.

    `by_id` rows are the lanes [A, B] of each id; `table` (open addressing on lane A) holds
    id + 1 per slot (0 = empty), 4 bytes, so it stays small: fresh memory costs its first touch
    on these machines, and a lookup misses the caches anyway. Most blocks repeat an earlier
    chain whose ids were numbered consecutively when it first appeared, so the id after the
    previous block's (`last` + 1) is tried first, in `by_id` (sequential memory); only when its
    lane A differs does the lookup probe the table. Either way lane B is then checked.
    Returns (distinct, collisions, last id).
    """
    mask = np.int64(table.shape[0] - 1)
    collisions = 0
    for j in range(len(hash_a)):
        h = hash_a[j]
        guess = last + 1
        if guess < distinct and by_id[guess, 0] == h:
            d = guess
        else:
            slot = np.int64(h & np.uint64(mask))
            while True:
                e = table[slot]
                if e == 0:
                    table[slot] = distinct + 1
                    by_id[distinct, 0] = h
                    by_id[distinct, 1] = hash_b[j]
                    d = distinct
                    distinct += 1
                    break
                if by_id[e - 1, 0] == h:
                    d = np.int64(e) - 1
                    break
                slot = (slot + 1) & mask
        if by_id[d, 1] != hash_b[j]:
            collisions += 1
        ids[start + j] = d
        last = d
    return distinct, collisions, last


@nb.njit(cache=True, nogil=True)
def _rehash(by_id, distinct, new):
    """Fill a larger table with ids 0 .. distinct − 1 (ids unchanged)."""
    mask = np.int64(new.shape[0] - 1)
    for d in range(distinct):
        slot = np.int64(by_id[d, 0] & np.uint64(mask))
        while new[slot] != 0:
            slot = (slot + 1) & mask
        new[slot] = d + 1


def _compiled_interleave(*args: Any) -> Any:
    return _interleave(*args)


def _compiled_hashes(*args: Any) -> None:
    _chain_hashes(*args)


def _compiled_ids(*args: Any) -> Any:
    return _dense_ids(*args)


# Looked up at call time, so a test can stand in for one kernel.
COMPILED = ChainKernels(interleave=_compiled_interleave, chain_hashes=_compiled_hashes,
                        dense_ids=_compiled_ids)


def build_block_chains(
    offsets: np.ndarray,
    values: np.ndarray,
    prompt_len: np.ndarray,
    source_block_size: int | None,
    namespace_codes: np.ndarray | None,
    rules: ReplayRules,
    *,
    output_offsets: np.ndarray | None = None,
    output_values: np.ndarray | None = None,
) -> BlockChains:
    """Chain every request's prompt into dense block ids under `rules` (spec §2).

    `offsets`/`values` are the flattened prompt content: token ids (`source_block_size=None`)
    or source block ids of `S = source_block_size` tokens each (the last id may cover a
    partial block; ids are re-chained, so they need not be prefix hashes already).
    `namespace_codes` (int, per request) separate caches: model/adapter, plus tenant when
    isolated. Output arrays, when given with `rules.cache_outputs`, add the full blocks of
    prompt + output as blocks to insert (token traces only).
    """
    return chain_layout(offsets, values, prompt_len, source_block_size, namespace_codes, rules,
                        output_offsets=output_offsets, output_values=output_values,
                        kernels=COMPILED)
