"""The data behind the HTML report's pictures.

Everything a plot shows is computed here, once, into the frozen builtins of `data/figures.py`
(histograms, time series, a window of inter-token gaps), so the HTML renderer only draws numbers
the report holds and the same numbers appear in `trace report --format json`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from yaotu_trace.data.figures import GapWindow, Histogram, PlotData, Series
from yaotu_trace.data.order_stats import KeyedBlockSum
from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.steplog import KV_USAGE_COLUMNS, StepLog, column, kv_usage
from yaotu_trace.data.token_times import handoff_rows, nearest_gaps, trace_gap_summary

# Bars of a histogram: enough to show a shape, few enough to read each bar.
HISTOGRAM_BINS = 30
# Points of a time series: one per pixel column of a plot at most.
SERIES_POINTS = 400
# Inter-token gaps drawn around the longest stall: enough tokens to see the decode rhythm.
GAP_POINTS = 1500
_MAX_SPANS = 2000  # prefill spans drawn in the gap window


def histogram(values: np.ndarray, label: str, unit: str,
              bins: int = HISTOGRAM_BINS) -> Histogram | None:
    """Linear bins from 0 to the 99.5th percentile; None for an empty sample."""
    data = np.asarray(values, dtype=np.float64)
    data = data[np.isfinite(data)]
    if data.size == 0:
        return None
    lo = min(0.0, float(data.min()))
    hi = float(np.percentile(data, 99.5))
    if hi <= lo:
        hi = float(data.max()) if float(data.max()) > lo else lo + 1.0
    counts, edges = np.histogram(np.clip(data, lo, None), bins=bins, range=(lo, hi))
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return Histogram(
        label=label, unit=unit,
        edges=tuple(float(e) for e in edges),
        counts=tuple(int(c) for c in counts),
        overflow=int((data > hi).sum()),
        total=int(data.size),
        p50=float(p50), p90=float(p90), p99=float(p99),
    )


def _column(trace: Trace, name: str) -> np.ndarray | None:
    if not trace.has(name) or trace.is_lazy(name):
        return None
    return trace.requests[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _downsample(t: np.ndarray, v: np.ndarray, points: int = SERIES_POINTS) -> tuple[
        tuple[float, ...], tuple[float, ...]]:
    """Mean per bucket of equal time, so a peak is drawn as the bucket's average."""
    if t.size <= points:
        return tuple(float(x) for x in t), tuple(float(x) for x in v)
    edges = np.linspace(float(t.min()), float(t.max()), points + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    sums = np.bincount(idx, weights=v, minlength=points)
    counts = np.bincount(idx, minlength=points)
    keep = counts > 0
    mids = (edges[:-1] + edges[1:]) / 2
    return (tuple(float(x) for x in mids[keep]),
            tuple(float(x) for x in sums[keep] / counts[keep]))


def _step_kv_usage(steps: StepLog) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(end s, KV usage) of the steps with one (`steplog.kv_usage`), one pass over the log per
    call."""
    def read() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for b in steps.batches(KV_USAGE_COLUMNS):
            usage = kv_usage(b)
            ok = np.isfinite(usage)
            yield column(b, "end_s")[ok], usage[ok]
    return read


def _downsample_passes(read: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
                       points: int = SERIES_POINTS) -> tuple[
        tuple[float, ...], tuple[float, ...]] | None:
    """`_downsample` of a series read in batches (None when it is empty): one pass keeps at
    most `points` + 1 points and the time range, a second sums the buckets in fixed blocks
    when there are more, so the series does not depend on the batches."""
    t_kept: list[np.ndarray] = []
    v_kept: list[np.ndarray] = []
    count, lo, hi = 0, np.inf, -np.inf
    for t, v in read():
        if not t.size:
            continue
        if count <= points:
            t_kept.append(t[:points + 1 - count])
            v_kept.append(v[:points + 1 - count])
        count += t.size
        lo, hi = float(np.minimum(lo, t.min())), float(np.maximum(hi, t.max()))
    if count == 0:
        return None
    if count <= points:
        return _downsample(np.concatenate(t_kept), np.concatenate(v_kept), points)
    edges = np.linspace(lo, hi, points + 1)
    sums = KeyedBlockSum(points)
    counts = np.zeros(points, dtype=np.int64)
    for t, v in read():
        idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
        sums.add(idx, v)
        counts += np.bincount(idx, minlength=points)
    keep = counts > 0
    mids = (edges[:-1] + edges[1:]) / 2
    return (tuple(float(x) for x in mids[keep]),
            tuple(float(x) for x in sums.totals()[keep] / counts[keep]))


def kv_series(trace: Trace, capacity_tokens: float | None) -> tuple[Series | None, str | None]:
    """KV usage from the step log, else KV demand from request timing; else why not."""
    steps = trace.steps
    if steps is not None and steps.has_kv_usage():
        # Passes over the log's batches: the series is downsampled without holding it.
        series = _downsample_passes(_step_kv_usage(steps))
        if series is not None:
            tt, vv = series
            return Series(label="KV usage", unit="share of the pool", source="step log",
                          t_s=tt, values=vv, capacity=1.0), None
    start = _column(trace, "scheduled_s")
    if start is None:
        start = _column(trace, "first_token_s")
    finish = _column(trace, "finish_s")
    if start is None or finish is None:
        return None, ("needs a step log with kv_blocks_used/kv_blocks_total or kv_usage, or "
                      "scheduled_s "
                      "(or first_token_s) and finish_s per request")
    prompt = trace.requests["prompt_len"].to_numpy(dtype=np.float64)
    output = trace.requests["output_len"].to_numpy(dtype=np.float64)
    ok = np.isfinite(start) & np.isfinite(finish) & (finish >= start)
    if not ok.any():
        return None, "no request has both a start and a finish time"
    # Demand = Σ over running requests of prompt + output tokens held at the end: an upper
    # bound of the KV a request holds while it runs (prefix sharing not deducted).
    t = np.concatenate([start[ok], finish[ok]])
    delta = np.concatenate([prompt[ok] + output[ok], -(prompt[ok] + output[ok])])
    order = np.argsort(t, kind="stable")
    tt, vv = _downsample(t[order], np.cumsum(delta[order]))
    return Series(label="KV demand of running requests", unit="tokens",
                  source="request timing (prompt + output of running requests)",
                  t_s=tt, values=vv, capacity=capacity_tokens), None


def _prefill_spans(steps: StepLog, lo: float, hi: float,
                   limit: int) -> list[tuple[float, float, int]]:
    """(start s, end s, prefill tokens) of the first `limit` prefill steps overlapping
    [lo, hi], in start order; the pass stops at the first batch starting after `hi`."""
    spans: list[tuple[float, float, int]] = []
    for b in steps.batches(("prefill_tokens",)):
        s, e = column(b, "start_s"), column(b, "end_s")
        if s.size and s[0] > hi:
            break
        p = column(b, "prefill_tokens", 0.0)
        m = (p > 0) & (e >= lo) & (s <= hi)
        spans += [(float(a), float(z), int(c)) for a, z, c in zip(s[m], e[m], p[m], strict=True)]
        if len(spans) >= limit:
            break
    return spans[:limit]


def gap_window(trace: Trace, points: int = GAP_POINTS) -> tuple[GapWindow | None, str | None]:
    """The gaps of every request around the longest inter-token gap, and the prefill there."""
    if not trace.has("token_times_s"):
        return None, "needs token_times_s (per-token emission times) in the request table"
    # Passes over the column (streamed when left on disk): the gaps are never all held.
    summary = trace_gap_summary(trace)
    if int(summary.counts.sum()) < 2:
        return None, "fewer than two token times"
    near = nearest_gaps(trace.requests, trace.lazy, points)
    if near is None or summary.summary.median is None:
        return None, "no request has two token times"
    t_sel, g_sel = near
    lo, hi = float(t_sel.min() - g_sel.max()), float(t_sel.max())
    spans: list[tuple[float, float, int]] = []
    source = "prefill steps in the step log"
    steps = trace.steps
    if steps is not None and "prefill_tokens" in steps.columns:
        spans = _prefill_spans(steps, lo, hi, _MAX_SPANS)
    else:
        first = _column(trace, "first_token_s")
        source = "other requests' first tokens (no step log)"
        if first is not None:
            m = np.isfinite(first) & (first >= lo) & (first <= hi)
            spans = [(float(x), float(x), 0) for x in np.sort(first[m])]
    return GapWindow(
        start_s=lo, end_s=hi,
        token_t_s=tuple(float(x) for x in t_sel), gap_s=tuple(float(x) for x in g_sel),
        median_gap_s=summary.summary.median,
        prefill_spans_s=tuple(spans[:_MAX_SPANS]),
        prefill_source=source,
    ), None


def plot_data(trace: Trace, hit_tokens: np.ndarray | None,
              kv_capacity_tokens: float | None) -> PlotData:
    """The histograms and series of the report, each None with a reason when not measurable."""
    unavailable: dict[str, str] = {}
    hit = None
    if hit_tokens is not None:
        hit = histogram(hit_tokens, "prefix-cache hit length per request", "tokens")
    else:
        unavailable["hit_length"] = "the trace carries no prompt content (token or block ids)"
    arrival = trace.requests["arrival_s"].to_numpy(dtype=np.float64)
    ok = successful_mask(trace.requests)  # latencies of successful requests only
    queue = ttft = None
    scheduled = _column(trace, "scheduled_s")
    if scheduled is not None:
        queue = histogram((scheduled - arrival)[ok], "queue time", "s")
    if queue is None:
        unavailable["queue_time"] = "needs scheduled_s (first scheduled) per request"
    first = _column(trace, "first_token_s")
    handed = handoff_rows(trace.requests)
    start = _column(trace, "decode_start_s")
    if first is not None and start is not None and handed.any():
        # disaggregated: the client's first token leaves the decode instance
        first = np.fmax(first, np.where(handed, start, np.nan))
        ttft = histogram((first - arrival)[ok], "time to first token (client)", "s")
    elif first is not None:
        ttft = histogram((first - arrival)[ok], "time to first token", "s")
    if ttft is None:
        unavailable["ttft"] = "needs first_token_s per request"
    kv, why = kv_series(trace, kv_capacity_tokens)
    if why:
        unavailable["kv_over_time"] = why
    gaps, why = gap_window(trace)
    if why:
        unavailable["gaps"] = why
    return PlotData(hit_length=hit, queue_time=queue, ttft=ttft, kv_over_time=kv, gaps=gaps,
                    unavailable=unavailable)
