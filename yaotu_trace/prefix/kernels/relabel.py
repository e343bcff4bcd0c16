"""Dense ids by first appearance through a lookup table, compiled (`partition.py` uses it for
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


@nb.njit(cache=True)
def namespaced_first_appearance_ids(offsets: np.ndarray, ids: np.ndarray, codes: np.ndarray,
                                    width: np.int64, top: np.int64, out: np.ndarray
                                    ) -> np.ndarray:  # pragma: no cover - compiled
    """`first_appearance_ids` of the keys codes[r]·width + ids[j] over every block j of each
    request r, without the keys themselves (one int64 per block: 5 GB at 1e10 tokens), into
    `out` (int32, one per id), which may be `ids` itself: each id is read before its slot is
    written."""
    table = np.full(top, -1, dtype=np.int32)
    nxt = 0
    for r in range(offsets.size - 1):
        base = codes[r] * width
        for i in range(offsets[r], offsets[r + 1]):
            out[i], nxt = _dense(table, base + ids[i], nxt)
    return out
