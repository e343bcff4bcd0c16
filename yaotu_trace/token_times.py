"""Inter-token gaps from `token_times_s`, in memory or streamed from a canonical Parquet file.

For a canonical Parquet trace loaded with `lazy_content=True` the `token_times_s` column stays
on disk (`Trace.lazy`): it is read one record batch at a time and only the gaps are kept (one
float64 per gap, plus the token times around it and the request row when a consumer asks for
them). The gaps are the same numbers, in the same order, as from the column held in memory,
so the percentiles, sums and plots computed from them are identical.

A gap is the difference of two consecutive entries of one request's list; gaps across two
requests are never formed. Gaps that are NaN or negative are dropped (+inf is kept: consumers
that need finite gaps filter further).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.schema import LazyContent, list_arrays

COLUMN = "token_times_s"
BATCH_ROWS = 65_536
BATCH_VALUES = 1 << 22  # about 4e6 token times (32 MB) per batch at most, but >= 1 row


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """The gaps of every request, in row then token order.

    `start`/`end` are the token times before and after each gap and `owner` its request row
    (None unless asked for); `counts` is the number of token times per request and `first`
    each request's first token time (NaN when it has none).
    """

    gap: np.ndarray
    start: np.ndarray | None
    end: np.ndarray | None
    owner: np.ndarray | None
    counts: np.ndarray
    first: np.ndarray


def has_token_times(requests: pd.DataFrame, lazy: LazyContent | None) -> bool:
    """Whether the trace carries token times (in memory or left on disk)."""
    if lazy is not None and COLUMN in lazy.columns:
        return lazy.values_in(COLUMN) > 0
    return COLUMN in requests.columns and bool(requests[COLUMN].notna().any())


def _batches(requests: pd.DataFrame,
             lazy: LazyContent | None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, offsets, flat times) of each record batch of the column left on disk."""
    assert lazy is not None
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


def token_gaps(requests: pd.DataFrame, lazy: LazyContent | None, *,
               with_times: bool = False) -> TokenGaps:
    """Every request's inter-token gaps, computed one record batch at a time.

    The outputs are filled in place (sized by the column's value count, an upper bound on the
    gaps), so the gaps are never held twice.
    """
    n_rows = len(requests)
    if lazy is not None and COLUMN in lazy.columns:
        bound = lazy.values_in(COLUMN)
        batches = _batches(requests, lazy)
    else:
        offsets, times = list_arrays(requests[COLUMN])
        bound = int(times.size)
        batches = iter([(0, offsets, np.asarray(times, dtype=np.float64))])
    gap = np.empty(bound, dtype=np.float64)
    start = np.empty(bound, dtype=np.float64) if with_times else None
    end = np.empty(bound, dtype=np.float64) if with_times else None
    owner_out = np.empty(bound, dtype=np.int64) if with_times else None
    counts = np.zeros(n_rows, dtype=np.int64)
    first = np.full(n_rows, np.nan)
    k = 0
    for row, offsets, times in batches:
        n = offsets.size - 1
        count = np.diff(offsets)
        owner = np.repeat(np.arange(row, row + n, dtype=np.int64), count)
        same = owner[1:] == owner[:-1]
        diff = np.diff(times)
        keep = np.zeros(diff.size, dtype=bool)
        keep[same] = diff[same] >= 0
        m = int(keep.sum())
        gap[k:k + m] = diff[keep]
        if with_times:
            assert start is not None and end is not None and owner_out is not None
            start[k:k + m] = times[:-1][keep]
            end[k:k + m] = times[1:][keep]
            owner_out[k:k + m] = owner[1:][keep]
        k += m
        del owner, same, diff, keep
        counts[row:row + n] = count
        nonempty = np.flatnonzero(count > 0)
        first[row + nonempty] = times[offsets[:-1][nonempty]]
    return TokenGaps(
        gap=gap[:k],
        start=start[:k] if start is not None else None,
        end=end[:k] if end is not None else None,
        owner=owner_out[:k] if owner_out is not None else None,
        counts=counts,
        first=first,
    )
