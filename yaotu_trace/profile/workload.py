"""The workload profile: arrivals, burstiness, lengths, population and observed timing.

Definitions (units in the names):
- span_s: last arrival minus first.
- mean_rate_rps: requests / span_s (requests per second).
- peak_rps / peak_rpm: the most requests that arrive in one 1 s / 60 s bin, bins aligned to the
  first arrival; peak_to_mean = peak_rps / mean_rate_rps.
- interarrival_cv: population std / mean of the gaps between consecutive arrivals (1 for
  Poisson, > 1 bursty); per_second_dispersion: variance / mean of per-second counts.
- queue_time_s = scheduled_s − arrival_s; ttft_s = first_token_s − arrival_s;
  itl_s = gaps between consecutive entries of token_times_s (first token onwards);
  a disaggregated trace (requests whose `prefill_instance` and `decode_instance` differ):
  ttft_s is the client's, max(first_token_s, decode_start_s) − arrival_s (the first token
  leaves the decode instance), and each handed-off request's first gap, the hand-off, is left
  out of itl_s and shown as handoff_s (`data.token_times.handoff_rows`);
  e2e_s = finish_s − arrival_s. Requests with inconsistent timing are skipped per metric.
- concurrency: requests in flight (arrival ≤ t < finish); mean by Little's law
  (Σ latency / span), max by an event sweep.

A lengths-only table (`Trace.has_arrivals` False) has no arrivals and no timing: both
sections are None, never computed from its placeholder arrival times.

Failed requests (`status` other than ok, `data/outcome.py`) are offered load: they count in the
arrivals and the population. Lengths and timing are over the successful requests only
(`successful_requests` of `requests`; None when the trace has no status), so a run that lost its
slowest requests does not look faster. The inter-token gaps are the exception: they are every
streamed token's, the engine's decode rhythm, which a request failing later does not change.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data.order_stats import median_of
from yaotu_trace.data.outcome import successful
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.workload_profile import (
    ArrivalProfile,
    IdleBucket,
    LengthProfile,
    Population,
    Profile,
    TimingProfile,
)

if TYPE_CHECKING:
    import pandas as pd

# The columns the population counts: a trace without any (Mooncake's) has none to count.
POPULATION_COLUMNS = ("tenant", "session_id", "instance", "model", "prefill_instance",
                      "decode_instance")


def profile_trace(trace: Trace) -> Profile:
    """Compute the workload profile of a validated trace (its table only for the columns a
    trace read without pandas does not have: status, population, timing)."""
    has_status = trace.has("status")
    ok = successful(trace)
    prompt, output = trace.array("prompt_len")[ok], trace.array("output_len")[ok]
    arrivals = (arrival_profile(trace.array("arrival_s", np.float64))
                if trace.has_arrivals else None)
    return Profile(
        requests=trace.num_requests,
        successful_requests=int(ok.sum()) if has_status else None,
        arrivals=arrivals,
        lengths=LengthProfile(
            prompt_len=Distribution.of(prompt.astype(np.float64)),
            output_len=Distribution.of(output.astype(np.float64)),
            prompt_tokens_total=int(prompt.sum()),
            output_tokens_total=int(output.sum()),
        ),
        population=_population(trace),
        timing=timing_profile(trace, ok) if trace.has_arrivals else None,
    )


def _population(trace: Trace) -> Population:
    """Distinct values of the population columns; instances over every instance column, and
    each pool's of a disaggregated trace."""
    if not any(trace.has(c) for c in POPULATION_COLUMNS):
        return Population(tenants=None, sessions=None, instances=None, models=None,
                          prefill_instances=None, decode_instances=None)
    import pandas as pd

    from yaotu_trace.data.token_times import handoff_rows

    df = trace.requests
    handed = handoff_rows(df)
    columns = [c for c in ("instance", "prefill_instance", "decode_instance")
               if c in df.columns and df[c].notna().any()]
    instances = (None if not columns else
                 int(pd.concat([df[c] for c in columns]).dropna().astype(str).nunique()))
    pools: tuple[int | None, int | None] = (None, None)
    if handed.any():
        pools = (int(df["prefill_instance"][handed].nunique()),
                 int(df["decode_instance"][handed].nunique()))
    return Population(tenants=_distinct(df, "tenant"), sessions=_distinct(df, "session_id"),
                      instances=instances, models=_distinct(df, "model"),
                      prefill_instances=pools[0], decode_instances=pools[1])


def _occupied_bins(rel_s: np.ndarray, width_s: float) -> tuple[np.ndarray, int]:
    """Arrivals in each non-empty bin of `width_s`, and how many bins the span has.

    Only the occupied bins are held: a trace whose two requests are 1e9 s apart needs two
    counts, not a billion.
    """
    if not rel_s.size:
        return np.zeros(0, np.int64), 0
    bins = np.floor(rel_s / width_s).astype(np.int64)  # sorted, as the arrivals are
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    counts = np.diff(np.r_[starts, bins.size])
    return counts.astype(np.int64), int(bins[-1]) + 1


def _dispersion(counts: np.ndarray, bins: int) -> float | None:
    """Variance over mean of the arrivals per bin, the empty bins included (1 for Poisson)."""
    if bins <= 1:
        return None
    mean = float(counts.sum()) / bins
    if mean <= 0:
        return None
    squares = float(np.sum((counts - mean) ** 2)) + (bins - counts.size) * mean * mean
    return squares / bins / mean


def arrival_profile(arrival_s: np.ndarray) -> ArrivalProfile:
    """Rates and burstiness of sorted arrival times (seconds)."""
    n = int(arrival_s.size)
    span_s = float(arrival_s[-1] - arrival_s[0]) if n else 0.0
    gaps = np.diff(arrival_s)
    rel = arrival_s - arrival_s[0] if n else arrival_s
    per_second, seconds = _occupied_bins(rel, 1.0)
    per_minute, _ = _occupied_bins(rel, 60.0)
    mean_rate = n / span_s if span_s > 0 else None
    gap_mean = float(gaps.mean()) if gaps.size else 0.0
    return ArrivalProfile(
        requests=n,
        span_s=span_s,
        mean_rate_rps=mean_rate,
        peak_rps=int(per_second.max()) if n else 0,
        peak_rpm=int(per_minute.max()) if n else 0,
        peak_to_mean=float(per_second.max()) / mean_rate if mean_rate else None,
        interarrival_cv=float(gaps.std() / gap_mean) if gap_mean > 0 else None,
        per_second_dispersion=_dispersion(per_second, seconds),
        median_gap_s=median_of(gaps) if gaps.size else None,
        longest_gap_s=float(gaps.max()) if gaps.size else None,
    )


def timing_profile(trace: Trace, successful: np.ndarray | None = None) -> TimingProfile | None:
    """Queue time, TTFT, inter-token gaps, latency, concurrency, preemptions and cached tokens
    of the `successful` requests (a mask; default every request), gaps of every request."""
    columns = ("arrival_s", "prompt_len", "scheduled_s", "first_token_s", "finish_s",
               "num_preemptions", "cached_tokens", "prefill_instance", "decode_instance",
               "decode_start_s", "session_id")
    timing_columns = (
        "scheduled_s",
        "first_token_s",
        "finish_s",
        "token_times_s",
        "num_preemptions",
        "cached_tokens",
    )
    if not any(trace.has(c) for c in timing_columns):
        return None
    from yaotu_trace.data.token_times import handoff_rows, trace_gap_summary

    df = _successful_rows(trace.requests, successful, columns)
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)

    def since_arrival(column: str) -> Distribution | None:
        if not trace.has(column):
            return None
        delta = df[column].to_numpy(dtype=np.float64, na_value=np.nan) - arrival
        return Distribution.of(delta[delta >= 0])

    ttft, ttft_source, handoff = since_arrival("first_token_s"), None, None
    handed = handoff_rows(df)
    if handed.any() and trace.has("first_token_s") and trace.has("decode_start_s"):
        first = df["first_token_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        start = df["decode_start_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        client = np.fmax(first, np.where(handed, start, np.nan)) - arrival
        ttft = Distribution.of(client[client >= 0])
        ttft_source = ("the client's: max(first_token_s, decode_start_s) − arrival_s (the "
                       "first token leaves the decode instance)")
        gap = (start - first)[handed]
        handoff = Distribution.of(gap[gap >= 0])

    itl = None
    if trace.has("token_times_s"):
        # Summarised in passes over the column (streamed when left on disk): the gaps are
        # never all held, and gaps that straddle two requests are never formed.
        itl = trace_gap_summary(trace).distribution

    concurrency_mean = concurrency_max = None
    if trace.has("finish_s"):
        finish = df["finish_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isfinite(finish) & (finish >= arrival)
        concurrency_max = _max_in_flight(arrival[ok], finish[ok])
        span = float(np.nanmax(finish[ok]) - arrival.min()) if ok.any() else 0.0
        concurrency_mean = float((finish[ok] - arrival[ok]).sum() / span) if span > 0 else None

    preempted = total = share = None
    if trace.has("num_preemptions"):
        counts = df["num_preemptions"].fillna(0).to_numpy(dtype=np.int64)
        preempted, total = int((counts > 0).sum()), int(counts.sum())
        share = preempted / len(df) if len(df) else None

    cached_total = cached_share = by_idle = None
    if trace.has("cached_tokens"):
        cached_total = int(df["cached_tokens"].fillna(0).sum())
        prompt_total = int(df["prompt_len"].sum())
        cached_share = cached_total / prompt_total if prompt_total else None
        if trace.has("session_id"):
            by_idle = cached_by_idle(df)

    return TimingProfile(
        queue_time_s=since_arrival("scheduled_s"),
        ttft_s=ttft,
        itl_s=itl,
        e2e_s=since_arrival("finish_s"),
        concurrency_mean=concurrency_mean,
        concurrency_max=concurrency_max,
        preempted_requests=preempted,
        preemptions_total=total,
        preempted_request_share=share,
        cached_tokens_total=cached_total,
        cached_token_share=cached_share,
        ttft_source=ttft_source,
        handoff_s=handoff,
        cached_by_idle=by_idle,
    )


# The idle spells a session's next request is grouped by (s): a minute, a provider cache's
# five-minute lifetime, an hour.
IDLE_EDGES_S: tuple[float, ...] = (0.0, 60.0, 300.0, 3600.0, float("inf"))


def cached_by_idle(df: pd.DataFrame) -> tuple[IdleBucket, ...] | None:
    """Reported cached tokens by the idle time since the session's request before (by
    arrival); the first request of each session apart. None when no session has two."""
    rows = df[["session_id", "arrival_s", "prompt_len", "cached_tokens"]].dropna(
        subset=["session_id"])
    if rows.empty:
        return None
    rows = rows.sort_values(["session_id", "arrival_s"], kind="stable")
    same = rows["session_id"].to_numpy()[1:] == rows["session_id"].to_numpy()[:-1]
    if not same.any():
        return None
    arrival = rows["arrival_s"].to_numpy(dtype=np.float64)
    idle = np.full(len(rows), np.nan)
    idle[1:] = np.where(same, arrival[1:] - arrival[:-1], np.nan)
    prompt = rows["prompt_len"].to_numpy(dtype=np.int64)
    cached = rows["cached_tokens"].fillna(0).to_numpy(dtype=np.int64)

    def bucket(mask: np.ndarray, lo: float | None, hi: float | None) -> IdleBucket:
        p, c = int(prompt[mask].sum()), int(cached[mask].sum())
        return IdleBucket(idle_from_s=lo, idle_to_s=hi, requests=int(mask.sum()),
                          prompt_tokens=p, cached_tokens=c, cached_share=c / p if p else None)

    out = [bucket(np.isnan(idle), None, None)]
    for lo, hi in pairwise(IDLE_EDGES_S):
        mask = (idle >= lo) & (idle < hi)
        if mask.any():
            out.append(bucket(mask, lo, None if hi == float("inf") else hi))
    return tuple(out)


def _successful_rows(df: pd.DataFrame, successful: np.ndarray | None,
                     columns: tuple[str, ...]) -> pd.DataFrame:
    """The scalar `columns` of the successful rows: never a copy of the token lists."""
    if successful is None or successful.all():
        return df
    return df[[c for c in columns if c in df.columns]].loc[successful]


def _max_in_flight(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """Most requests in flight at once; an end at time t frees its slot before a start at t."""
    if start_s.size == 0:
        return 0
    times = np.concatenate([end_s, start_s])
    deltas = np.concatenate([-np.ones(end_s.size, np.int64), np.ones(start_s.size, np.int64)])
    order = np.lexsort((deltas, times))
    return int(np.cumsum(deltas[order]).max())


def _distinct(df: pd.DataFrame, column: str) -> int | None:
    if column not in df.columns or not df[column].notna().any():
        return None
    return int(df[column].nunique(dropna=True))
