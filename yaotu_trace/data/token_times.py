"""Inter-token gaps from `token_times_s`, summarised in passes so the gaps are never all held.

For a canonical Parquet trace loaded with `lazy_content=True` the `token_times_s` column stays
on disk (`Trace.lazy`) and every pass reads it one record batch at a time; a column in memory
is read the same way, as one batch. Each consumer keeps only what it reports:

- `gap_summary`: count, sum, extremes and exact percentiles of all gaps (two passes of
  `order_stats.summarize`), plus per request its token count and first token time;
- `stalls`: the gaps longer than a threshold, with the token times around them and their
  request row (one pass; the interference axis lines these up with prefill);
- `nearest_gaps`: the gaps closest in time to the longest one (two passes; the report's plot).

The gaps are the same numbers in the same order whatever the batches, so the results are
identical to computing them from the whole column. A gap is the difference of two consecutive
entries of one request's list; gaps across two requests are never formed. Gaps that are NaN or
negative are dropped, and the summaries count only finite gaps. A request handed off from a
prefill to a decode instance (`handoff_rows`) has no first gap: from its first token (the
prefill's) to its second (the decode instance's first step) its KV was moved and waited for a
decode slot, which is not the decode rhythm; the profile shows that hand-off apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from yaotu_trace.data import parquet_file
from yaotu_trace.data.order_stats import Summary, summarize
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.schema import LazyContent, Trace, list_arrays, list_value_problem
from yaotu_trace.errors import TraceSchemaError

if TYPE_CHECKING:
    import pandas as pd

COLUMN = "token_times_s"
BATCH_ROWS = 65_536
BATCH_VALUES = 1 << 20  # about 1e6 token times (8 MB) per batch at most, but >= 1 row
GAP_PERCENTILES = (25, 50, 90, 99)


@dataclass(frozen=True, slots=True)
class BatchGaps:
    """The gaps of one record batch, in order, and where they lie.

    `keep` marks the differences of consecutive `times` that are gaps (same request, not NaN,
    not negative); `first_index` is the position of the batch's first gap among all gaps.
    Token times and request rows are looked up only for the gaps a consumer selects.
    """

    gap: np.ndarray
    keep: np.ndarray
    times: np.ndarray
    offsets: np.ndarray
    row: int
    first_index: int

    def _after(self, sel: np.ndarray) -> np.ndarray:
        """Index in `times` of the token ending each selected gap."""
        return np.flatnonzero(self.keep)[sel] + 1

    def times_around(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) token times of the selected gaps."""
        after = self._after(sel)
        return self.times[after - 1], self.times[after]

    def owner(self, sel: np.ndarray) -> np.ndarray:
        """The request row of each selected gap."""
        return self.row + np.searchsorted(self.offsets, self._after(sel), side="right") - 1


@dataclass(frozen=True, slots=True)
class GapSummary:
    """All gaps of a trace summarised exactly; `counts`/`first` are per request row (token
    times per request, first token time or NaN)."""

    summary: Summary
    counts: np.ndarray
    first: np.ndarray

    @property
    def distribution(self) -> Distribution:
        """The gaps' Distribution, equal to `Distribution.of` on all gaps held at once."""
        return Distribution.from_summary(self.summary)


@dataclass(frozen=True, slots=True)
class Stalls:
    """Gaps longer than a threshold, in gap order, with their token times and request rows."""

    gap: np.ndarray
    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray


def has_token_times(trace: Trace) -> bool:
    """Whether the trace carries token times (in memory or left on disk)."""
    return trace.has(COLUMN)


def _lists(requests: pd.DataFrame,
           lazy: LazyContent | None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, offsets, flat times) of each record batch: from disk or the column held."""
    import pandas as pd

    if lazy is None or COLUMN not in lazy.columns:
        offsets, times = list_arrays(requests[COLUMN])
        yield 0, offsets, np.asarray(times, dtype=np.float64)
        return


    row = 0
    # Without pre_buffer: with it the reader keeps every decoded batch of the pass allocated
    # (0.9 GB for 1e8 token times, pyarrow 26), against one batch without.
    file = parquet_file.open_file(lazy.path, pre_buffer=False)
    per_row = lazy.values_in(COLUMN) / max(file.metadata.num_rows, 1)
    rows = max(1, min(BATCH_ROWS, int(BATCH_VALUES / max(per_row, 1.0))))
    batches = file.iter_batches(columns=[COLUMN], batch_size=rows)
    while True:
        # A damaged page is reported with the rows it holds, however late it is met.
        with parquet_file.reading(lazy.path, f"rows from {row + 1}", COLUMN):
            batch = next(batches, None)
        if batch is None:
            return
        arr = batch.column(0)
        where = f"{lazy.path}: rows {row + 1} to {row + len(arr)}, column '{COLUMN}'"
        problem = (list_value_problem(arr.flatten(), COLUMN)
                   if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) else
                   (0, "not a list; write a list of numbers of seconds"))
        if problem is not None:
            raise TraceSchemaError(f"{where}: {problem[1]}")
        try:
            arr = arr.cast(pa.large_list(pa.float64()), safe=False)  # checked: numbers
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise TraceSchemaError(
                f"{where}: expected a list of numbers ({str(exc).splitlines()[0][:120]})"
            ) from exc
        offsets, times = list_arrays(pd.Series(pd.arrays.ArrowExtensionArray(arr)))
        yield row, offsets, np.asarray(times, dtype=np.float64)
        row += len(arr)


def handoff_rows(requests: pd.DataFrame) -> np.ndarray:
    """Per request, whether it was handed off: its `prefill_instance` and `decode_instance`
    are both named and differ (disaggregated serving)."""
    if not {"prefill_instance", "decode_instance"} <= set(requests.columns):
        return np.zeros(len(requests), dtype=bool)
    pf = requests["prefill_instance"].astype("string").fillna("")
    dec = requests["decode_instance"].astype("string").fillna("")
    return ((pf != "") & (dec != "") & (pf != dec)).to_numpy(dtype=bool)


def gap_batches(requests: pd.DataFrame, lazy: LazyContent | None) -> Iterator[BatchGaps]:
    """One pass over the gaps, a record batch at a time (hand-offs left out)."""
    index = 0
    handed = handoff_rows(requests)
    for row, offsets, times in _lists(requests, lazy):
        diff = np.diff(times)
        keep = diff >= 0  # False for NaN
        # The difference ending at each request's first token spans two requests.
        across = offsets[1:-1] - 1
        keep[across[(across >= 0) & (across < diff.size)]] = False
        # A handed-off request's first gap is its hand-off, not a decode gap.
        here = handed[row:row + offsets.size - 1]
        starts = offsets[:-1][here & (np.diff(offsets) >= 2)]
        keep[starts[starts < diff.size]] = False
        gap = diff[keep]
        yield BatchGaps(gap=gap, keep=keep, times=times, offsets=offsets, row=row,
                        first_index=index)
        index += gap.size


def gap_summary(requests: pd.DataFrame, lazy: LazyContent | None) -> GapSummary:
    """Count, sum, extremes, median and `GAP_PERCENTILES` of all finite gaps, exactly."""
    counts = np.zeros(len(requests), dtype=np.int64)
    first = np.full(len(requests), np.nan)
    passes = 0

    def read() -> Iterator[np.ndarray]:
        nonlocal passes
        passes += 1
        for b in gap_batches(requests, lazy):
            if passes == 1:  # the first pass also takes each request's count and first time
                count = np.diff(b.offsets)
                counts[b.row:b.row + count.size] = count
                nonempty = np.flatnonzero(count > 0)
                first[b.row + nonempty] = b.times[b.offsets[:-1][nonempty]]
            yield b.gap

    summary = summarize(read, GAP_PERCENTILES, median=True)
    return GapSummary(summary=summary, counts=counts, first=first)


def trace_gap_summary(trace: Trace) -> GapSummary:
    """`gap_summary` of a trace's own rows, computed once and shared (profile, axis, plot)."""
    key = "gap_summary"
    if key not in trace.derived:
        trace.derived[key] = gap_summary(trace.requests, trace.lazy)
    found = trace.derived[key]
    assert isinstance(found, GapSummary)
    return found


def stalls(requests: pd.DataFrame, lazy: LazyContent | None, threshold_s: float) -> Stalls:
    """The finite gaps longer than `threshold_s`, in gap order."""
    parts: list[tuple[np.ndarray, ...]] = []
    for b in gap_batches(requests, lazy):
        sel = np.flatnonzero(np.isfinite(b.gap) & (b.gap > threshold_s))
        parts.append((b.gap[sel], *b.times_around(sel), b.owner(sel)))
    if not parts:
        empty = np.empty(0)
        return Stalls(gap=empty, start=empty, end=empty, owner=np.empty(0, dtype=np.int64))
    gap, start, end, owner = (np.concatenate(column) for column in zip(*parts, strict=True))
    return Stalls(gap=gap, start=start, end=end, owner=owner)


def nearest_gaps(requests: pd.DataFrame, lazy: LazyContent | None,
                 points: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(end time, gap) of the `points` finite gaps whose end is nearest the longest gap's, in
    gap order (ties to the earlier gap), or None without a finite gap."""
    worst_gap, worst_end = -np.inf, np.nan
    for b in gap_batches(requests, lazy):
        finite = np.flatnonzero(np.isfinite(b.gap))
        if finite.size:
            at = finite[int(np.argmax(b.gap[finite]))]
            if b.gap[at] > worst_gap:  # the first of equal longest gaps, as np.argmax
                worst_gap = float(b.gap[at])
                worst_end = float(b.times_around(np.array([at]))[1][0])
    if not np.isfinite(worst_gap):
        return None
    index = np.empty(0, dtype=np.int64)
    end = gap = distance = np.empty(0)
    for b in gap_batches(requests, lazy):
        finite = np.flatnonzero(np.isfinite(b.gap))
        b_end = b.times_around(finite)[1]
        b_distance = np.abs(b_end - worst_end)
        if finite.size > points:  # only gaps as near as the batch's points-th can be chosen
            cut = np.partition(b_distance, points - 1)[points - 1]
            near = b_distance <= cut
            finite, b_end, b_distance = finite[near], b_end[near], b_distance[near]
        index = np.concatenate([index, b.first_index + finite])
        end, gap = np.concatenate([end, b_end]), np.concatenate([gap, b.gap[finite]])
        distance = np.concatenate([distance, b_distance])
        if index.size > points:
            keep = np.sort(np.lexsort((index, distance))[:points])
            index, end, gap, distance = index[keep], end[keep], gap[keep], distance[keep]
    return end, gap
