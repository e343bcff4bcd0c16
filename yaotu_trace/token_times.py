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
negative are dropped, and the summaries count only finite gaps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.order_stats import Summary, summarize
from yaotu_trace.report import Distribution
from yaotu_trace.schema import LazyContent, Trace, list_arrays

COLUMN = "token_times_s"
BATCH_ROWS = 65_536
BATCH_VALUES = 1 << 22  # about 4e6 token times (32 MB) per batch at most, but >= 1 row
GAP_PERCENTILES = (25, 50, 90, 99)


@dataclass(frozen=True, slots=True)
class BatchGaps:
    """The gaps of one record batch: value, token times on both sides, request row, and the
    position of the first gap among all gaps (for stable order across batches)."""

    gap: np.ndarray
    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray
    first_index: int


@dataclass(frozen=True, slots=True)
class GapSummary:
    """All gaps of a trace summarised exactly; `counts`/`first` are per request row (token
    times per request, first token time or NaN)."""

    summary: Summary
    counts: np.ndarray
    first: np.ndarray

    @property
    def distribution(self) -> Distribution:
        """The gaps' Distribution, equal to `Distribution.of` on all gaps but for the mean's
        last bits (a sum in fixed blocks)."""
        s, q = self.summary, self.summary.percentiles
        if not s.count:
            return Distribution.of(np.empty(0))
        return Distribution(count=s.count, mean=s.mean, p50=q[50], p90=q[90], p99=q[99],
                            max=s.max, min=s.min)


@dataclass(frozen=True, slots=True)
class Stalls:
    """Gaps longer than a threshold, in gap order, with their token times and request rows."""

    gap: np.ndarray
    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray


def has_token_times(requests: pd.DataFrame, lazy: LazyContent | None) -> bool:
    """Whether the trace carries token times (in memory or left on disk)."""
    if lazy is not None and COLUMN in lazy.columns:
        return lazy.values_in(COLUMN) > 0
    return COLUMN in requests.columns and bool(requests[COLUMN].notna().any())


def _lists(requests: pd.DataFrame,
           lazy: LazyContent | None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, offsets, flat times) of each record batch: from disk or the column held."""
    if lazy is None or COLUMN not in lazy.columns:
        offsets, times = list_arrays(requests[COLUMN])
        yield 0, offsets, np.asarray(times, dtype=np.float64)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = 0
    file = pq.ParquetFile(lazy.path)
    per_row = lazy.values_in(COLUMN) / max(file.metadata.num_rows, 1)
    rows = max(1, min(BATCH_ROWS, int(BATCH_VALUES / max(per_row, 1.0))))
    for batch in file.iter_batches(columns=[COLUMN], batch_size=rows):
        arr = batch.column(0)
        try:
            arr = arr.cast(pa.large_list(pa.float64()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise TraceSchemaError(
                f"{lazy.path}: column '{COLUMN}' (rows {row + 1} to {row + len(arr)}): expected "
                f"a list of numbers ({str(exc).splitlines()[0][:120]})"
            ) from exc
        offsets, times = list_arrays(pd.Series(pd.arrays.ArrowExtensionArray(arr)))
        yield row, offsets, np.asarray(times, dtype=np.float64)
        row += len(arr)


def gap_batches(requests: pd.DataFrame, lazy: LazyContent | None) -> Iterator[BatchGaps]:
    """One pass over the gaps, a record batch at a time."""
    index = 0
    for row, offsets, times in _lists(requests, lazy):
        owner = np.repeat(np.arange(row, row + offsets.size - 1, dtype=np.int64),
                          np.diff(offsets))
        diff = np.diff(times)
        keep = owner[1:] == owner[:-1]
        keep[keep] = diff[keep] >= 0
        yield BatchGaps(gap=diff[keep], start=times[:-1][keep], end=times[1:][keep],
                        owner=owner[1:][keep], first_index=index)
        index += int(keep.sum())


def _token_counts(requests: pd.DataFrame,
                  lazy: LazyContent | None) -> tuple[np.ndarray, np.ndarray]:
    """Token times per request and each request's first token time (NaN when none)."""
    counts = np.zeros(len(requests), dtype=np.int64)
    first = np.full(len(requests), np.nan)
    for row, offsets, times in _lists(requests, lazy):
        count = np.diff(offsets)
        counts[row:row + count.size] = count
        nonempty = np.flatnonzero(count > 0)
        first[row + nonempty] = times[offsets[:-1][nonempty]]
    return counts, first


def gap_summary(requests: pd.DataFrame, lazy: LazyContent | None) -> GapSummary:
    """Count, sum, extremes, median and `GAP_PERCENTILES` of all finite gaps, exactly."""
    counts, first = _token_counts(requests, lazy)
    summary = summarize(lambda: (b.gap for b in gap_batches(requests, lazy)),
                        GAP_PERCENTILES, median=True)
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
        sel = np.isfinite(b.gap) & (b.gap > threshold_s)
        parts.append((b.gap[sel], b.start[sel], b.end[sel], b.owner[sel]))
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
                worst_gap, worst_end = float(b.gap[at]), float(b.end[at])
    if not np.isfinite(worst_gap):
        return None
    index = np.empty(0, dtype=np.int64)
    end = gap = distance = np.empty(0)
    for b in gap_batches(requests, lazy):
        finite = np.flatnonzero(np.isfinite(b.gap))
        index = np.concatenate([index, b.first_index + finite])
        end, gap = np.concatenate([end, b.end[finite]]), np.concatenate([gap, b.gap[finite]])
        distance = np.concatenate([distance, np.abs(b.end[finite] - worst_end)])
        if index.size > points:
            keep = np.sort(np.lexsort((index, distance))[:points])
            index, end, gap, distance = index[keep], end[keep], gap[keep], distance[keep]
    return end, gap
