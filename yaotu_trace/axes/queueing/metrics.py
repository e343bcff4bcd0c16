"""The queueing axis' measurements and the load arithmetic behind them (see the package
docstring for the definitions)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from yaotu_trace.data.report import Distribution

# Peak windows shown in the report.
TOP_WINDOWS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakWindow:
    """One of the windows with the highest offered load against the service rate."""

    start_s: float
    offered_tokens_per_s: float
    achieved_tokens_per_s: float
    rho: float
    waiting_at_start: int | None
    waiting_at_end: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueingMetrics:
    """The queueing axis' measurements (None when their inputs are absent)."""

    queue_time_s: Distribution | None
    ttft_s: Distribution | None
    queue_share_of_ttft: float | None
    queue_share_of_latency: float | None
    queue_seconds_total: float | None
    interarrival_cv: float | None
    peak_to_mean: float | None
    window_s: float
    windows: int | None
    service_rate_tokens_per_s: float | None
    peak_offered_tokens_per_s: float | None
    mean_rho: float | None
    peak_rho: float | None
    overloaded_windows: int | None
    overloaded_windows_queue_growing: int | None
    queue_seconds_in_overload: float | None
    excess_offered_tokens: float | None
    peak_windows: tuple[PeakWindow, ...]
    wall_s: float | None
    gpu_busy_fraction: float | None
    idle_while_waiting_s: float | None
    idle_while_waiting_fraction: float | None
    tokens_per_step: Distribution | None
    metrics_tokens_per_step_mean: float | None
    token_budget_tokens: float | None
    token_budget_inferred: bool | None
    step_fill_p75: float | None
    running: Distribution | None
    seq_cap: float | None
    seq_cap_inferred: bool | None
    running_fill_p75: float | None
    kv_usage_p75: float | None
    waiting_share: float | None
    waiting_mean: float | None
    little_expected_waiting: float | None
    little_mismatch: float | None
    little_expected_sampled: float | None = None


def times_of(df: pd.DataFrame, column: str) -> np.ndarray | None:
    """A time column as floats (NaN where missing), or None when it holds no value."""
    if column not in df.columns or not df[column].notna().any():
        return None
    return df[column].to_numpy(dtype=np.float64, na_value=np.nan)


def waiting_at(t: np.ndarray, arrival_s: np.ndarray, scheduled_s: np.ndarray) -> np.ndarray:
    """Requests waiting at each time t: arrived (≤ t) and not yet scheduled (> t)."""
    ok = np.isfinite(scheduled_s) & (scheduled_s >= arrival_s)
    a = np.sort(arrival_s[ok])
    s = np.sort(scheduled_s[ok])
    return np.searchsorted(a, t, side="right") - np.searchsorted(s, t, side="right")


def spread_work(
    edges: np.ndarray, start: np.ndarray, end: np.ndarray, work: np.ndarray
) -> np.ndarray:
    """Work done per window if each item's `work` is spread evenly over [start, end]."""
    dur = end - start
    ok = np.isfinite(start) & np.isfinite(end) & (dur >= 0)
    start, end, work, dur = start[ok], end[ok], work[ok], dur[ok]
    instant = dur == 0
    rate = np.where(instant, 0.0, work / np.where(instant, 1.0, dur))

    def cumulative(points: np.ndarray, rates: np.ndarray, at: np.ndarray) -> np.ndarray:
        order = np.argsort(points)
        p, r = points[order], rates[order]
        cr, crp = np.concatenate([[0.0], np.cumsum(r)]), np.concatenate([[0.0], np.cumsum(r * p)])
        k = np.searchsorted(p, at, side="right")
        return at * cr[k] - crp[k]

    done = cumulative(start, rate, edges) - cumulative(end, rate, edges)
    # Instant items (zero duration) count entirely in the window holding their time.
    if instant.any():
        idx = np.searchsorted(edges, start[instant], side="right")
        extra = np.bincount(idx, weights=work[instant], minlength=edges.size + 1)
        done = done + np.cumsum(extra)[: edges.size]
    return np.diff(done)




@dataclass(frozen=True, slots=True)
class Windows:
    """The windows of offered against achieved load: `count` windows of `width_s` from `t0_s`."""

    t0_s: float
    width_s: float
    count: int

