"""Exact percentiles, mean and extremes of a sample too large to hold, read in batches.

A sample that streams from disk (inter-token gaps, step durations) is summarised without ever
holding it: `summarize` reads it more than once (`read()` starts a new pass) and finds each
order statistic by radix selection on the bits of its values. Non-negative floats order as
their bit patterns do (negatives with their bits flipped), so a histogram of the top 20 bits
(buckets of 1/256 of an octave) tells which bucket holds the k-th value; the next pass either
collects that bucket, when it is small, or histograms its next 16 bits. Memory is the 8 MB
first histogram, one 65,536-bin histogram per bucket being split and the collected buckets (at
most `COLLECT_VALUES` values each); the passes are 2 in practice and 5 at most.

The results equal numpy's on the whole sample held in memory: `np.percentile` with its
default linear method (the same interpolation, computed from the same two order statistics)
and `np.median`. The sum is taken over fixed blocks of `SUM_BLOCK` values in sample order and
the block sums are added exactly (`math.fsum`), so it does not depend on how the sample was cut
into batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

SUM_BLOCK = 1 << 16
COLLECT_VALUES = 1 << 22  # a bucket this small is collected (32 MB) instead of split again
_TOP_BITS = 20  # the first pass: 1,048,576 buckets (8 MB), 1/256 of an octave each
_DIGIT_BITS = 16  # each further split
_SIGN = np.uint64(1 << 63)


def median_of(values: np.ndarray) -> float:
    """`np.median` of a non-empty 1-D sample, bit for bit (NaN when a value is NaN), without
    the numpy.ma import `np.median` makes on its first call (6 ms of a 0.3 s run): the middle
    value, or the mean of the two middle values, found by `np.partition`."""
    sample = np.asarray(values, dtype=np.float64).ravel()
    if sample.size == 0:
        raise ValueError("the median of an empty sample")
    if np.isnan(sample).any():
        return math.nan
    # The mean of the middle one or two, as np.median takes it (so a lone -0.0 gives 0.0).
    k = sample.size // 2
    if sample.size % 2:
        return float(np.partition(sample, k)[k:k + 1].mean())
    return float(np.partition(sample, (k - 1, k))[k - 1:k + 1].mean())


@dataclass(frozen=True, slots=True)
class Summary:
    """Count, sum, extremes and the requested percentiles of the finite values of a sample."""

    count: int
    total: float
    min: float | None
    max: float | None
    percentiles: dict[float, float]
    median: float | None

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def _keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys that sort as the float64 values do."""
    bits = values.view(np.uint64)
    if not values.size or values.min() >= 0:  # the usual case (gaps, durations): no flips
        return bits | _SIGN
    negative = (bits & _SIGN) != 0
    return np.where(negative, ~bits, bits | _SIGN)


def _value(key: int) -> float:
    """The float64 a key stands for (inverse of `_keys`)."""
    k = np.uint64(key)
    bits = k & ~_SIGN if k & _SIGN else ~k
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def _finite(batch: np.ndarray) -> np.ndarray:
    values = np.asarray(batch, dtype=np.float64)
    values = values[np.isfinite(values)]
    return values + 0.0  # -0.0 becomes 0.0: equal values must have one key


class BlockSum:
    """Σ of a sample in fixed blocks of its order, whatever the batches it arrives in.

    Memory is one block (`SUM_BLOCK` float64, 512 KiB) plus one float per finished block.
    """

    def __init__(self) -> None:
        self._sums: list[float] = []
        self._carry = np.empty(0, dtype=np.float64)

    def add(self, values: np.ndarray) -> None:
        if self._carry.size:
            values = np.concatenate([self._carry, values])
        whole = values.size - values.size % SUM_BLOCK
        if whole:
            self._sums.extend(values[:whole].reshape(-1, SUM_BLOCK).sum(axis=1).tolist())
        self._carry = values[whole:].copy()

    def total(self) -> float:
        sums = [*self._sums, float(self._carry.sum())]
        try:
            return math.fsum(sums)
        except OverflowError:  # finite block sums whose exact total exceeds float64
            return float(np.sum(sums))


_BlockSum = BlockSum


class KeyedBlockSum:
    """Σ per key (0 ≤ key < `keys`) of a sample, whatever the batches it arrives in.

    Pairs are cut into fixed blocks of `SUM_BLOCK` in sample order, as by `BlockSum`; each
    block's per-key sums (one `np.bincount`) are added to compensated (Neumaier) running totals
    in block order. Memory is one block of pairs plus two floats per key, so it suits many keys
    (time buckets of a plot, windows) where a `BlockSum` per key would hold a block each.
    """

    def __init__(self, keys: int) -> None:
        self.keys = keys
        self._sum = np.zeros(keys, dtype=np.float64)
        self._comp = np.zeros(keys, dtype=np.float64)
        self._carry_keys = np.empty(0, dtype=np.int64)
        self._carry = np.empty(0, dtype=np.float64)

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if self._carry.size:
            keys = np.concatenate([self._carry_keys, keys])
            values = np.concatenate([self._carry, values])
        whole = values.size - values.size % SUM_BLOCK
        for lo in range(0, whole, SUM_BLOCK):
            self._fold(np.bincount(keys[lo:lo + SUM_BLOCK], weights=values[lo:lo + SUM_BLOCK],
                                   minlength=self.keys))
        self._carry_keys, self._carry = keys[whole:].copy(), values[whole:].copy()

    def _fold(self, block: np.ndarray) -> None:
        self._sum, self._comp = _neumaier(self._sum, self._comp, block)

    def totals(self) -> np.ndarray:
        """The sum of each key (0.0 for keys never seen)."""
        tail = np.bincount(self._carry_keys, weights=self._carry, minlength=self.keys)
        total, comp = _neumaier(self._sum, self._comp, tail)
        with np.errstate(invalid="ignore"):
            out = total + comp
        return np.where(np.isfinite(total), out, total)


def _neumaier(total: np.ndarray, comp: np.ndarray,
              add: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of Neumaier's compensated sum, elementwise: (new total, new compensation)."""
    new = total + add
    with np.errstate(invalid="ignore"):
        lost = np.where(np.abs(total) >= np.abs(add), (total - new) + add, (add - new) + total)
    return new, comp + lost


def _ranks_of(count: int, percentiles: Iterable[float],
              median: bool) -> tuple[dict[float, tuple[int, int, float]], tuple[int, ...]]:
    """The order statistics each percentile interpolates between (numpy's linear method)."""
    spans: dict[float, tuple[int, int, float]] = {}
    for q in percentiles:
        virtual = float(np.true_divide(q, 100) * (count - 1))
        below = math.floor(virtual)
        spans[q] = (below, min(below + 1, count - 1), virtual - below)
    middle: tuple[int, ...] = ()
    if median:
        middle = ((count - 1) // 2,) if count % 2 else (count // 2 - 1, count // 2)
    return spans, middle


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation, exactly (it subtracts from b when t >= 0.5)."""
    diff = np.float64(b) - np.float64(a)
    if t >= 0.5:
        return float(np.float64(b) - diff * (1 - np.float64(t)))
    return float(np.float64(a) + diff * np.float64(t))


def _locate(histogram: np.ndarray, within: int) -> tuple[int, int]:
    """The bin holding the value of rank `within`, and that value's rank inside the bin."""
    cumulative = np.cumsum(histogram)
    digit = int(np.searchsorted(cumulative, within, side="right"))
    return digit, within - (int(cumulative[digit - 1]) if digit else 0)


def _select(read: Callable[[], Iterable[np.ndarray]], histogram: np.ndarray,
            ranks: set[int]) -> dict[int, float]:
    """The value of each 0-based rank, from the top-bits histogram of the first pass."""
    # A bucket is (its known top bits, how many bits are known); each pending rank lies in one.
    pending: dict[int, tuple[tuple[int, int], int]] = {}
    size: dict[tuple[int, int], int] = {}
    for r in ranks:
        digit, within = _locate(histogram, r)
        pending[r] = ((digit, _TOP_BITS), within)
        size[(digit, _TOP_BITS)] = int(histogram[digit])
    found: dict[int, float] = {}
    top_shift = np.uint64(64 - _TOP_BITS)
    while pending:
        for r, ((prefix, known), _) in list(pending.items()):
            if known == 64:  # every bit known: the bucket is one value
                found[r] = _value(prefix)
                del pending[r]
        buckets = {bucket for bucket, _ in pending.values()}
        if not buckets:
            break
        collect = {b for b in buckets if size[b] <= COLLECT_VALUES}
        kept: dict[tuple[int, int], list[np.ndarray]] = {b: [] for b in collect}
        split = {b: min(_DIGIT_BITS, 64 - b[1]) for b in buckets - collect}
        hists = {b: np.zeros(1 << bits, dtype=np.int64) for b, bits in split.items()}
        # A table of the wanted top-bit buckets picks the few keys of interest in one look-up.
        wanted = np.zeros(1 << _TOP_BITS, dtype=bool)
        wanted[[p >> (k - _TOP_BITS) for p, k in buckets]] = True
        for batch in read():
            keys = _keys(_finite(batch))
            near = keys[wanted[(keys >> top_shift).astype(np.int64)]]
            for prefix, known in buckets:
                inside = near[(near >> np.uint64(64 - known)) == np.uint64(prefix)]
                if (prefix, known) in kept:
                    kept[(prefix, known)].append(inside)
                else:
                    bits = split[(prefix, known)]
                    digits = (inside >> np.uint64(64 - known - bits)) & np.uint64((1 << bits) - 1)
                    hists[(prefix, known)] += np.bincount(digits.astype(np.int64),
                                                          minlength=1 << bits)
        sorted_keys = {b: np.sort(np.concatenate(parts)) for b, parts in kept.items()}
        for r, ((prefix, known), within) in list(pending.items()):
            if (prefix, known) in sorted_keys:
                found[r] = _value(int(sorted_keys[(prefix, known)][within]))
                del pending[r]
                continue
            hist = hists[(prefix, known)]
            digit, inner = _locate(hist, within)
            bits = split[(prefix, known)]
            bucket = ((prefix << bits) | digit, known + bits)
            pending[r] = (bucket, inner)
            size[bucket] = int(hist[digit])
    return found


def summarize(read: Callable[[], Iterable[np.ndarray]], percentiles: Iterable[float] = (),
              *, median: bool = False) -> Summary:
    """Summarise the finite values of the batches `read()` yields, exactly.

    `read` is called once per pass and must yield the same values in the same order each time.
    """
    qs = tuple(percentiles)
    count = 0
    low, high = math.inf, -math.inf
    block_sum = BlockSum()
    histogram = np.zeros(1 << _TOP_BITS, dtype=np.int64)
    for batch in read():
        values = _finite(batch)
        if not values.size:
            continue
        count += values.size
        low, high = min(low, float(values.min())), max(high, float(values.max()))
        block_sum.add(values)
        top = (_keys(values) >> np.uint64(64 - _TOP_BITS)).astype(np.int64)
        histogram += np.bincount(top, minlength=1 << _TOP_BITS)
    if count == 0:
        return Summary(count=0, total=0.0, min=None, max=None, percentiles={}, median=None)
    spans, middle = _ranks_of(count, qs, median)
    wanted = {r for lo, hi, _ in spans.values() for r in (lo, hi)} | set(middle)
    value = _select(read, histogram, wanted)
    out = {q: _lerp(value[lo], value[hi], t) for q, (lo, hi, t) in spans.items()}
    mid = None
    if middle:
        mid = median_of(np.array([value[r] for r in middle], dtype=np.float64))
    return Summary(count=count, total=block_sum.total(), min=low, max=high, percentiles=out,
                   median=mid)
