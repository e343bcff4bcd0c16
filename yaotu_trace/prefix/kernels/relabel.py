"""Dense ids by first appearance through lookup tables, compiled (`partition.py` uses them for
the keys of a large replay; a small one sorts in numpy, with the same ids)."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _dense(table: np.ndarray, key: np.int64, nxt: int) -> tuple[int, int]:  # pragma: no cover
    """The id of `key`, a new one (`nxt`) at its first appearance, and the next new id."""
    v = table[key]
    if v < 0:
        v = nxt
        table[key] = v
        nxt += 1
    return v, nxt


@nb.njit(cache=True)
def first_appearance_ids(keys: np.ndarray, top: np.int64) -> np.ndarray:  # pragma: no cover
    """Ids 0..d-1 of `keys` (int64 in [0, top)) in order of first appearance (int32)."""
    table = np.full(top, -1, dtype=np.int32)
    out = np.empty(keys.size, dtype=np.int32)
    nxt = 0
    for i in range(keys.size):
        out[i], nxt = _dense(table, keys[i], nxt)
    return out


@nb.njit(cache=True, nogil=True)
def rows_first_appearance_ids(offsets: np.ndarray, ids: np.ndarray, rows: np.ndarray,
                              blocks: np.int64, top: np.int64
                              ) -> tuple[np.ndarray, int]:  # pragma: no cover - compiled
    """`first_appearance_ids` of the blocks of `rows` (each row's `ids[offsets[r]:offsets[r +
    1]]`, in row order), and how many there are: a partition's ids without first gathering
    its blocks (an index and a copy, 12 bytes a block, and the int64 keys, 8 more: 0.8 GB for
    one of 2e7 blocks)."""
    table = np.full(top, -1, dtype=np.int32)
    out = np.empty(blocks, dtype=np.int32)
    nxt = 0
    k = 0
    for r in rows:
        for i in range(offsets[r], offsets[r + 1]):
            out[k], nxt = _dense(table, ids[i], nxt)
            k += 1
    return out, nxt


@nb.njit(cache=True, inline="always")
def _probe(keys: np.ndarray, key: np.int64) -> np.int64:  # pragma: no cover - compiled
    """The slot of `key` in the open-addressing `keys` (−1 empty), or the empty one it takes."""
    mask = keys.size - 1
    slot = (key * np.int64(0x9E3779B97F4A7C15 >> 1)) & mask
    while keys[slot] != -1 and keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


@nb.njit(cache=True)
def _grown(keys: np.ndarray,
           values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """The table at twice the size, every entry placed again."""
    bigger = np.full(2 * keys.size, -1, dtype=np.int64)
    moved = np.empty(2 * keys.size, dtype=np.int32)
    for i in range(keys.size):
        if keys[i] != -1:
            slot = _probe(bigger, keys[i])
            bigger[slot] = keys[i]
            moved[slot] = values[i]
    return bigger, moved


@nb.njit(cache=True)
def namespaced_first_appearance_ids(offsets: np.ndarray, ids: np.ndarray, codes: np.ndarray,
                                    first_code: np.ndarray, code_count: np.int64,
                                    out: np.ndarray) -> np.ndarray:  # pragma: no cover
    """`first_appearance_ids` of the pairs (codes[r], ids[j]) over every block j of each
    request r (ids in [0, width), codes in [0, code_count) and below 2^31), into `out` (int32,
    one per id), without a key per block (5 GB at 1e10 tokens) or a table over every pair
    (namespaces × ids: 1.8 GiB at 1e10 tokens of eight tenants).

    Most ids are met under one namespace only, so each id keeps the namespace that met it first
    (`first_code`: width entries of −1, int8 where the codes fit, given by the caller) and the
    new id it got (int32); a pair with another namespace (a prompt two tenants share) goes to a
    small hash table of its own, grown as it fills.
    """
    first_new = np.empty(first_code.size, dtype=np.int32)
    keys = np.full(1 << 12, -1, dtype=np.int64)
    values = np.empty(1 << 12, dtype=np.int32)
    others = 0
    nxt = 0
    for r in range(offsets.size - 1):
        code = codes[r]
        for i in range(offsets[r], offsets[r + 1]):
            d = ids[i]
            if first_code[d] < 0:
                first_code[d] = code
                first_new[d] = nxt
                out[i] = nxt
                nxt += 1
            elif first_code[d] == code:
                out[i] = first_new[d]
            else:
                key = np.int64(d) * code_count + code
                slot = _probe(keys, key)
                if keys[slot] == -1:
                    if 2 * (others + 1) > keys.size:
                        keys, values = _grown(keys, values)
                        slot = _probe(keys, key)
                    keys[slot] = key
                    values[slot] = nxt
                    others += 1
                    nxt += 1
                out[i] = values[slot]
    return out
