"""Inter-token gaps summarised in passes equal the same statistics on every gap held at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from yaotu_trace.data import token_times
from yaotu_trace.data.token_times import gap_summary, nearest_gaps, stalls
from yaotu_trace.ingest import read_trace


def _timed_requests(seed: int, n: int) -> pd.DataFrame:
    """Requests with 0-40 token times each, some gaps tied, a NaN and a backwards step."""
    rng = np.random.default_rng(seed)
    lists = []
    for i in range(n):
        k = int(rng.integers(0, 40))
        times = float(i) + np.cumsum(rng.choice([0.02, 0.02, 0.03, 0.4], size=k))
        if k > 5 and i % 9 == 0:
            times[3] = np.nan
        if k > 5 and i % 13 == 0:
            times[4] = times[2] - 1.0  # a negative gap, dropped
        lists.append(times.tolist())
    return pd.DataFrame({"token_times_s": pd.Series(
        lists, dtype=pd.ArrowDtype(pa.list_(pa.float64())))})


def _all_gaps(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap, end time, request) of every kept gap, the obvious way."""
    gaps, ends, owners = [], [], []
    for row, times in enumerate(df["token_times_s"]):
        t = np.asarray(times, dtype=np.float64)
        d = np.diff(t)
        keep = ~np.isnan(d) & (d >= 0)
        gaps.append(d[keep])
        ends.append(t[1:][keep])
        owners.append(np.full(int(keep.sum()), row))
    return np.concatenate(gaps), np.concatenate(ends), np.concatenate(owners)


def test_summary_stalls_and_nearest_gaps_by_hand() -> None:
    # GIVEN two requests: gaps 1, 2 (request 0) and 4, 1 (request 1); none across requests
    df = pd.DataFrame({"token_times_s": pd.Series(
        [[0.0, 1.0, 3.0], [10.0, 14.0, 15.0], []],
        dtype=pd.ArrowDtype(pa.list_(pa.float64())))})
    s = gap_summary(df, None)
    assert (s.summary.count, s.summary.total, s.summary.median) == (4, 8.0, 1.5)
    assert s.counts.tolist() == [3, 3, 0] and s.first[:2].tolist() == [0.0, 10.0]
    assert np.isnan(s.first[2])
    st = stalls(df, None, 1.5)
    assert (st.gap.tolist(), st.start.tolist(), st.owner.tolist()) == ([2.0, 4.0], [1.0, 10.0],
                                                                      [0, 1])
    # the longest gap ends at 14; the two nearest ends are 14 and 15, listed in gap order
    end, gap = nearest_gaps(df, None, 2)
    assert (end.tolist(), gap.tolist()) == ([14.0, 15.0], [4.0, 1.0])


@pytest.mark.parametrize("batch_rows", [1, 7, 65_536])
def test_streamed_passes_equal_the_whole_column(tmp_path, monkeypatch, batch_rows: int) -> None:
    # GIVEN a canonical Parquet trace with token times, its gaps computed the obvious way
    df = _timed_requests(3, 400)
    gaps, ends, owners = _all_gaps(df)
    finite = np.isfinite(gaps)
    n = len(df)
    table = pa.table({"request_id": [f"r{i}" for i in range(n)],
                      "arrival_s": np.arange(n, dtype=np.float64),
                      "prompt_len": np.full(n, 10), "output_len": np.full(n, 5),
                      "token_times_s": pa.array(df["token_times_s"].tolist(),
                                                type=pa.list_(pa.float64()))})
    path = tmp_path / "timed.parquet"
    pq.write_table(table, path, row_group_size=50)
    trace = read_trace(path, lazy_content=True)
    assert trace.lazy is not None and "token_times_s" in trace.lazy.columns
    monkeypatch.setattr(token_times, "BATCH_ROWS", batch_rows)
    # WHEN the passes stream the column in batches
    s = gap_summary(trace.requests, trace.lazy)
    # THEN the statistics are numpy's over all finite gaps
    assert s.summary.count == int(finite.sum())
    assert [s.summary.percentiles[q] for q in token_times.GAP_PERCENTILES] == \
        np.percentile(gaps[finite], token_times.GAP_PERCENTILES).tolist()
    assert s.summary.median == float(np.median(gaps[finite]))
    # the stalls are the long gaps in order, with their requests
    threshold = 3 * s.summary.median
    st = stalls(trace.requests, trace.lazy, threshold)
    long = finite & (gaps > threshold)
    assert st.gap.tolist() == gaps[long].tolist() and st.owner.tolist() == owners[long].tolist()
    # and the plot's window is the stable nearest-first selection around the longest gap
    worst = ends[finite][int(np.argmax(gaps[finite]))]
    order = np.sort(np.argsort(np.abs(ends[finite] - worst), kind="stable")[:100])
    end, gap = nearest_gaps(trace.requests, trace.lazy, 100)
    assert end.tolist() == ends[finite][order].tolist()
    assert gap.tolist() == gaps[finite][order].tolist()
