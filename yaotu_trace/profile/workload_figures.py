"""The data behind the workload pictures, which every trace can have: arrivals and tokens over
time with the busiest windows and bursts, interarrival times against Poisson, prompt and output
length distributions, tenants and sessions, and the prefix reuse over time.

Like `figures.py`, everything drawn is computed here into frozen builtins
(`data/workload_figures.py`), so the HTML page, the terminal charts and `--format json` show the
same numbers. Each picture is None when the trace cannot support it, with the reason in
`WorkloadFigures.unavailable`.

Definitions (units in the names):
- Arrival bins are `bin_s` wide (a round width giving at most `SERIES_POINTS` bins), aligned to
  the first arrival; rates are per second of the bin.
- A busiest window is the `BUSY_WINDOW_S` (or one bin, when bins are wider) with the most
  arrivals; the top `BUSIEST_WINDOWS` do not overlap.
- A burst is a run of bins whose arrivals exceed both `BURST_MEAN_FACTOR` × the mean per bin
  and the Poisson band (mean + `BURST_SIGMAS` √mean): more than a Poisson process at the trace's
  mean rate would give by chance.
- The interarrival CDF is drawn over the positive gaps; a Poisson process at the same mean
  gap has CDF 1 − exp(−gap / mean); `ks_distance` is the largest gap between the two CDFs
  over every gap, zero gaps included.
- Length histograms use log-spaced bins when the lengths span at least `LOG_SPAN_DECADES`
  decades (p99.5 / p0.5), linear bins otherwise; linear bins stop at p99.5 when the longest
  value lies more than `LINEAR_TAIL_STRETCH` times beyond it (the rest is `overflow`).
- Reuse over time bins arrivals by the minute (wider on long traces, narrower on traces
  shorter than `REUSE_MIN_BINS` minutes); its ratio is the bin's hit tokens over its prompt
  tokens.
- Think time is the gap from one turn of a session to the next: from the earlier turn's
  finish when the trace has `finish_s`, else from its arrival.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.workload_figures import (
    ArrivalSeries,
    InterarrivalCdf,
    LengthDistribution,
    ReuseOverTime,
    SessionShape,
    TenantShare,
    Window,
    WorkloadFigures,
)

if TYPE_CHECKING:
    import pandas as pd

# Points of a time series: one per pixel column of a plot at most.
SERIES_POINTS = 400
# Round bin widths (s) for arrivals over time, smallest first.
BIN_WIDTHS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0, 86400.0)
# The window the busiest stretches are counted over, and how many are marked.
BUSY_WINDOW_S = 60.0
BUSIEST_WINDOWS = 3
# A bin is part of a burst above both of these (see the module docstring); at most
# `MAX_BURSTS` bursts are kept, the largest first.
BURST_MEAN_FACTOR = 2.0
BURST_SIGMAS = 3.0
MAX_BURSTS = 20
# Points of a CDF (quantiles at evenly spaced shares).
CDF_POINTS = 200
HISTOGRAM_BINS = 30
LOG_SPAN_DECADES = 2.0
# Linear length bins stop at the 99.5th percentile when the largest value lies more than this
# many times beyond it; the values above are counted as `overflow` (the CDF keeps them all).
LINEAR_TAIL_STRETCH = 2.0
# Tenants drawn by name; the rest are summed as "other".
TOP_TENANTS = 12
# Session depths drawn one bar each; deeper sessions are summed in the last bar.
MAX_DEPTH_BARS = 30
# The reuse-over-time bin: a minute, widened so the series keeps at most SERIES_POINTS points,
# narrowed to a round width giving about REUSE_MIN_BINS bins on a trace shorter than that.
REUSE_BIN_S = 60.0
REUSE_MIN_BINS = 30


def workload_figures(trace: Trace, hit_tokens: np.ndarray | None = None) -> WorkloadFigures:
    """The workload pictures of a validated trace; `hit_tokens` per request from the prefix
    replay (None when the trace has no prompt content)."""
    df = trace.requests
    unavailable: dict[str, str] = {}
    arrival = df["arrival_s"].to_numpy(dtype=np.float64) if trace.has_arrivals else None
    arrivals = interarrival = None
    if arrival is None:
        why = "needs arrival times (a lengths-only table has none)"
        unavailable["arrivals"] = unavailable["interarrival"] = why
    else:
        arrivals = arrival_series(arrival, _tokens(df, "prompt_len"), _tokens(df, "output_len"))
        interarrival = interarrival_cdf(arrival)
        if arrivals is None:
            unavailable["arrivals"] = "needs arrivals spread over time (all arrive at once)"
        if interarrival is None:
            unavailable["interarrival"] = "needs at least two arrivals at different times"
    ok = successful_mask(df)  # lengths of the requests served, as the profile's
    prompt = length_distribution(_tokens(df, "prompt_len")[ok], "prompt tokens")
    output = length_distribution(_tokens(df, "output_len")[ok], "output tokens")
    for key, dist in (("prompt_len", prompt), ("output_len", output)):
        if dist is None:
            unavailable[key] = "no successful request"
    tenants = tenant_shares(df)
    if tenants is None:
        unavailable["tenants"] = "needs a tenant column with at least two tenants"
    sessions = session_shape(df) if arrival is not None else None
    if sessions is None:
        unavailable["sessions"] = "needs a session_id column and arrival times"
    reuse = None
    if hit_tokens is None:
        unavailable["reuse_over_time"] = ("needs prompt content (token or block ids) for the "
                                          "prefix replay")
    elif arrival is None:
        unavailable["reuse_over_time"] = "needs arrival times"
    else:
        reuse = reuse_over_time(arrival, _tokens(df, "prompt_len"),
                                np.asarray(hit_tokens, dtype=np.float64))
        if reuse is None:
            unavailable["reuse_over_time"] = "no prompt tokens"
    return WorkloadFigures(arrivals=arrivals, interarrival=interarrival, prompt_len=prompt,
                           output_len=output, tenants=tenants, sessions=sessions,
                           reuse_over_time=reuse, unavailable=unavailable)


def _tokens(df: pd.DataFrame, column: str) -> np.ndarray:
    return df[column].to_numpy(dtype=np.float64)


def bin_width_s(span_s: float, points: int = SERIES_POINTS) -> float:
    """The smallest round width that covers `span_s` in at most `points` bins."""
    for width in BIN_WIDTHS_S:
        if span_s / width <= points:
            return width
    days = math.ceil(span_s / points / 86400.0)
    return days * 86400.0


def arrival_series(arrival_s: np.ndarray, prompt_len: np.ndarray,
                   output_len: np.ndarray) -> ArrivalSeries | None:
    """Arrivals and tokens per second over time of sorted arrivals; None when they span no
    time."""
    if arrival_s.size < 2 or not arrival_s[-1] > arrival_s[0]:
        return None
    first, span_s = float(arrival_s[0]), float(arrival_s[-1] - arrival_s[0])
    bin_s = bin_width_s(span_s)
    bins = math.floor(span_s / bin_s) + 1
    idx = np.minimum(np.floor((arrival_s - first) / bin_s).astype(np.int64), bins - 1)
    counts = np.bincount(idx, minlength=bins).astype(np.float64)
    prompt = np.bincount(idx, weights=prompt_len, minlength=bins)
    output = np.bincount(idx, weights=output_len, minlength=bins)
    mean_rate = arrival_s.size / span_s
    return ArrivalSeries(
        bin_s=bin_s,
        t_s=tuple(first + k * bin_s for k in range(bins)),
        requests_per_s=tuple(float(c / bin_s) for c in counts),
        prompt_tokens_per_s=tuple(float(p / bin_s) for p in prompt),
        output_tokens_per_s=tuple(float(o / bin_s) for o in output),
        mean_rate_rps=float(mean_rate),
        peak_rate_rps=float(counts.max() / bin_s),
        busiest=busiest_windows(arrival_s, max(BUSY_WINDOW_S, bin_s)),
        bursts=bursts(counts, first, bin_s, arrival_s.size / (span_s / bin_s)),
    )


def busiest_windows(arrival_s: np.ndarray, window_s: float,
                    top: int = BUSIEST_WINDOWS) -> tuple[Window, ...]:
    """The `top` non-overlapping windows of `window_s` starting at an arrival with the most
    arrivals (ties: the earliest); a window holds arrivals in [start, start + window_s)."""
    ends = np.searchsorted(arrival_s, arrival_s + window_s, side="left")
    counts = ends - np.arange(arrival_s.size)
    order = np.lexsort((np.arange(arrival_s.size), -counts))  # most first, then earliest
    chosen: list[Window] = []
    for i in order:
        start = float(arrival_s[i])
        if all(start + window_s <= w.start_s or start >= w.end_s for w in chosen):
            n = int(counts[i])
            chosen.append(Window(start_s=start, end_s=start + window_s, requests=n,
                                 rate_rps=n / window_s))
            if len(chosen) == top:
                break
    return tuple(sorted(chosen, key=lambda w: w.start_s))


def bursts(counts: np.ndarray, first_s: float, bin_s: float, mean_per_bin: float,
           limit: int = MAX_BURSTS) -> tuple[Window, ...]:
    """Runs of bins above both `BURST_MEAN_FACTOR` × the mean and the Poisson band; the
    `limit` with the most arrivals, in time order."""
    threshold = max(BURST_MEAN_FACTOR * mean_per_bin,
                    mean_per_bin + BURST_SIGMAS * math.sqrt(mean_per_bin))
    hot = counts > threshold
    if not hot.any():
        return ()
    edges = np.flatnonzero(np.diff(np.r_[0, hot.astype(np.int8), 0]))
    runs = []
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        n = int(counts[start:stop].sum())
        width_s = float(stop - start) * bin_s
        runs.append(Window(start_s=first_s + int(start) * bin_s,
                           end_s=first_s + int(stop) * bin_s, requests=n,
                           rate_rps=n / width_s))
    runs.sort(key=lambda w: (-w.requests, w.start_s))
    return tuple(sorted(runs[:limit], key=lambda w: w.start_s))


def _quantile_points(values: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """(value, share of values ≤ it) at evenly spaced shares of sorted `values`."""
    data = np.sort(values)
    shares = np.linspace(0.0, 1.0, min(points, data.size) + 1)[1:]
    picks = np.minimum(np.ceil(shares * data.size).astype(np.int64) - 1, data.size - 1)
    x = data[picks]
    # The share at each distinct value is that of its last copy, as a CDF's.
    share = np.searchsorted(data, x, side="right") / data.size
    keep = np.r_[x[1:] != x[:-1], True]
    return x[keep], share[keep]


def interarrival_cdf(arrival_s: np.ndarray) -> InterarrivalCdf | None:
    """The CDF of the gaps between sorted arrivals next to Poisson's; None with no positive
    gap."""
    gaps = np.diff(arrival_s)
    positive = gaps[gaps > 0]
    if positive.size == 0:
        return None
    mean = float(gaps.mean())
    x, share = _quantile_points(positive)
    # Over every gap, zero gaps included (a share at 0 that Poisson does not have).
    data = np.sort(gaps)
    below = np.arange(1, data.size + 1) / data.size
    model = 1.0 - np.exp(-data / mean)
    ks = float(max(np.max(below - model), np.max(model - (below - 1.0 / data.size))))
    zero_share = float((gaps <= 0).mean())
    all_share = zero_share + (1 - zero_share) * share  # the CDF over every gap
    return InterarrivalCdf(
        gap_s=tuple(float(v) for v in x),
        share=tuple(float(v) for v in all_share),
        poisson_share=tuple(float(1.0 - math.exp(-v / mean)) for v in x),
        mean_gap_s=mean,
        cv=float(gaps.std() / mean) if mean > 0 else None,
        zero_gap_share=zero_share,
        ks_distance=ks,
    )


def length_distribution(values: np.ndarray, label: str,
                        bins: int = HISTOGRAM_BINS) -> LengthDistribution | None:
    """Histogram and CDF of lengths (or seconds); log bins when they span decades."""
    data = np.asarray(values, dtype=np.float64)
    data = data[np.isfinite(data)]
    if data.size == 0:
        return None
    lo_q, hi_q = (float(v) for v in np.percentile(data, [0.5, 99.5]))
    positive = data[data > 0]
    log_x = (positive.size > 0 and hi_q > 0
             and math.log10(hi_q / max(lo_q, float(positive.min()))) >= LOG_SPAN_DECADES)
    if log_x:
        lo, hi = float(positive.min()), float(data.max())
        edges = np.geomspace(lo, hi if hi > lo else lo * 10, bins + 1)
        counts, _ = np.histogram(np.clip(data, lo, None), bins=edges)
    else:
        lo, hi = min(0.0, float(data.min())), float(data.max())
        if hi > LINEAR_TAIL_STRETCH * hi_q > lo:
            hi = hi_q  # a few long values would squeeze the bulk into the first bins
        counts, edges = np.histogram(data[data <= hi], bins=bins,
                                     range=(lo, hi if hi > lo else lo + 1.0))
    x, share = _quantile_points(data)
    p50, p90, p99 = (float(v) for v in np.percentile(data, [50, 90, 99]))
    return LengthDistribution(
        label=label, edges=tuple(float(e) for e in edges),
        counts=tuple(int(c) for c in counts), log_x=bool(log_x),
        cdf_tokens=tuple(float(v) for v in x), cdf_share=tuple(float(v) for v in share),
        total=int(data.size), p50=p50, p90=p90, p99=p99,
        overflow=int((data > edges[-1]).sum()),
    )


def tenant_shares(df: pd.DataFrame, top: int = TOP_TENANTS) -> tuple[TenantShare, ...] | None:
    """Requests and prompt tokens per tenant, the most requests first (ties by name), the
    tenants past `top` summed as "other"; None with fewer than two tenants."""
    import pandas as pd

    if "tenant" not in df.columns or df["tenant"].nunique(dropna=True) < 2:
        return None
    label = df["tenant"].astype("string").fillna("(none)")
    grouped = (pd.DataFrame({"tenant": label, "prompt": df["prompt_len"].astype("int64")})
               .groupby("tenant", sort=True)["prompt"].agg(["size", "sum"])
               .reset_index())
    grouped = grouped.sort_values(["size", "tenant"], ascending=[False, True], kind="stable")
    total = float(len(df))
    rows = [TenantShare(label=str(r.tenant), requests=int(r.size), prompt_tokens=int(r.sum),
                        request_share=int(r.size) / total)
            for r in grouped.head(top).itertuples(index=False)]
    rest = grouped.iloc[top:]
    if len(rest):
        n = int(rest["size"].sum())
        rows.append(TenantShare(label=f"other ({len(rest)} tenants)", requests=n,
                                prompt_tokens=int(rest["sum"].sum()), request_share=n / total))
    return tuple(rows)


def session_shape(df: pd.DataFrame) -> SessionShape | None:
    """Turns per session and the think time between turns; None without sessions."""
    import pandas as pd

    if "session_id" not in df.columns or not df["session_id"].notna().any():
        return None
    sessions = df[df["session_id"].notna()]
    key = sessions["session_id"].astype("string")
    depth = key.value_counts(sort=False).to_numpy(dtype=np.int64)
    deepest = int(min(depth.max(), MAX_DEPTH_BARS))
    by_depth = np.bincount(np.minimum(depth, deepest), minlength=deepest + 1)[1:]
    # Rows are in arrival order, so each session's turns are too.
    arrival = sessions["arrival_s"].to_numpy(dtype=np.float64)
    has_finish = "finish_s" in sessions.columns and bool(sessions["finish_s"].notna().any())
    previous_end = (sessions["finish_s"].to_numpy(dtype=np.float64, na_value=np.nan)
                    if has_finish else arrival)
    codes = pd.factorize(key, sort=False)[0]
    order = np.argsort(codes, kind="stable")
    same = codes[order][1:] == codes[order][:-1]
    think = arrival[order][1:][same] - previous_end[order][:-1][same]
    think = think[np.isfinite(think)]
    return SessionShape(
        sessions=int(depth.size),
        depths=tuple(range(1, deepest + 1)),
        sessions_by_depth=tuple(int(c) for c in by_depth),
        think_time=length_distribution(np.maximum(think, 0.0), "think time (s)"),
        think_time_from="the previous turn's finish" if has_finish
        else "the previous turn's arrival",
    )


def reuse_over_time(arrival_s: np.ndarray, prompt_len: np.ndarray,
                    hit_tokens: np.ndarray) -> ReuseOverTime | None:
    """Σ hit tokens / Σ prompt tokens per bin of arrivals (bins without prompt tokens left
    out); None when no request has a prompt token."""
    total_prompt = float(prompt_len.sum())
    if total_prompt <= 0:
        return None
    first, span_s = float(arrival_s[0]), float(arrival_s[-1] - arrival_s[0])
    bin_s = max(REUSE_BIN_S, bin_width_s(span_s))
    if span_s < REUSE_MIN_BINS * REUSE_BIN_S:
        bin_s = bin_width_s(span_s, REUSE_MIN_BINS)
    bins = math.floor(span_s / bin_s) + 1
    idx = np.minimum(np.floor((arrival_s - first) / bin_s).astype(np.int64), bins - 1)
    prompt = np.bincount(idx, weights=prompt_len, minlength=bins)
    hits = np.bincount(idx, weights=hit_tokens, minlength=bins)
    keep = np.flatnonzero(prompt > 0)
    return ReuseOverTime(
        bin_s=bin_s,
        t_s=tuple(first + float(k) * bin_s for k in keep),
        hit_ratio=tuple(float(hits[k] / prompt[k]) for k in keep),
        prompt_tokens=tuple(int(prompt[k]) for k in keep),
        overall_hit_ratio=float(hit_tokens.sum() / total_prompt),
    )
