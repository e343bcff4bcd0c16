"""vLLM's offer counts for `store_threshold`, compiled for both CPU-tier kernels.

`_OfferCounts` in `vllm_native.py` states the rule (CM `_record_accesses`): every offer counts
each of its keys in an LRU of at most `MAX_TRACKED_OFFERS` keys, the oldest out (never a key of
the offer being counted), and a key is stored from its `threshold`-th offer on. Here the LRU is
a list threaded through a row per key (`tracker`: count, toward the least recent, toward the
most recent) with `ends` = (least recent, most recent, size).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace.prefix.tiers.lru_rows import chunk_key, inlined
from yaotu_trace.prefix.tiers.spec import MAX_TRACKED_OFFERS

_CNT, _LESS, _MORE = range(3)


def tracker(keys: int, threshold: int) -> tuple[np.ndarray, np.ndarray] | None:
    """An empty tracker for `keys` keys; None below a threshold of 2, where nothing is counted
    (and a pass given None compiles none of the counting: numba prunes the branches of a None
    argument)."""
    if threshold < 2:
        return None
    return np.zeros((max(keys, 1), 3), dtype=np.int64), np.array([-1, -1, 0], dtype=np.int64)


@inlined
def admits(counts, threshold, k):  # pragma: no cover - compiled
    """Whether key k may be stored: always without a tracker (`tracker`: None)."""
    if counts is None:
        return True
    return counts[0][k, _CNT] >= threshold


@nb.njit(cache=True, inline="always")
def _out(rows, ends, k):  # pragma: no cover - compiled
    p = rows[k, _LESS]
    q = rows[k, _MORE]
    if p >= 0:
        rows[p, _MORE] = q
    else:
        ends[0] = q
    if q >= 0:
        rows[q, _LESS] = p
    else:
        ends[1] = p
    ends[2] -= 1


@nb.njit(cache=True, inline="always")
def _in(rows, ends, k):  # pragma: no cover - compiled
    t = ends[1]
    rows[k, _LESS] = t
    rows[k, _MORE] = -1
    if t >= 0:
        rows[t, _MORE] = k
    else:
        ends[0] = k
    ends[1] = k
    ends[2] += 1


@nb.njit(cache=True)
def count_offer(ids, start, per_chunk, lo, hi, rows, ends):  # pragma: no cover - compiled
    """Count the offer of chunks lo..hi-1: the keys tracked once more and made most recent,
    then the others tracked at 1, the least recent out when the tracker is full."""
    seen = 0
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        if rows[k, _CNT] > 0:
            if ends[1] != k:
                _out(rows, ends, k)
                _in(rows, ends, k)
            rows[k, _CNT] += 1
            seen += 1
    unprotected = ends[2] - seen
    for j in range(lo, hi):
        k = chunk_key(ids, start, per_chunk, j)
        if rows[k, _CNT] > 0:
            continue
        if ends[2] >= MAX_TRACKED_OFFERS:
            if unprotected == 0:
                continue
            oldest = ends[0]
            _out(rows, ends, oldest)
            rows[oldest, _CNT] = 0
            unprotected -= 1
        rows[k, _CNT] = 1
        _in(rows, ends, k)
