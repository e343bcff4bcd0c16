"""The queueing axis' measurements and the load arithmetic behind them (see the package
docstring for the definitions)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from yaotu_trace.axes.base import AxisInput, Evidence, Source, fact, measured, ratio
from yaotu_trace.axes.queueing.instances import LoadBalance
from yaotu_trace.data.handoff import client_first_token_s, decode_queue_s, handed_off
from yaotu_trace.data.outcome import successful
from yaotu_trace.data.report import Distribution

# Peak windows shown in the report.
TOP_WINDOWS = 5
# The load grid follows the data, not the clock: it holds at most MIN_GRID_WINDOWS windows
# (91 h of 5 s), or WINDOWS_PER_EVENT per request (per step or scrape without requests) when
# that is more; a longer span widens the windows to a whole multiple of `window_s`. Memory is
# then at most a few arrays of that many numbers, whatever the span of the clock.
MIN_GRID_WINDOWS: Final = 1 << 16
WINDOWS_PER_EVENT: Final = 4


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
    # The causes judged in the windows where the queue is (`windows.WindowVerdicts`).
    queue_source: str | None = None
    growing_windows: int | None = None
    queued_windows: int | None = None
    growth_requests: float | None = None
    arrival_rate_growing_per_s: float | None = None
    arrival_rate_other_per_s: float | None = None
    burst_ratio: float | None = None
    growth_rho: float | None = None
    busy_queued: float | None = None
    idle_waiting_queued: float | None = None
    tokens_per_step_queued: float | None = None
    step_fill_queued: float | None = None
    running_fill_queued: float | None = None
    running_source: str | None = None
    kv_usage_queued: float | None = None
    # Of the steps in the queued windows that carry the admission signal and leave requests
    # waiting, the share whose first waiting request needed more KV blocks than were free.
    kv_blocked_queued: float | None = None
    load_balance: LoadBalance | None = None  # several instances (`imbalance.py`)
    # Of the requests the engine counts waiting, the share deferred (waiting on remote KV or a
    # grammar, not on capacity): vLLM's num_requests_waiting_by_reason / "Deferred: N".
    waiting_deferred_share: float | None = None

    def headline(self) -> tuple[Evidence, ...]:
        """The measurements shown as the axis' evidence when no rule fired on it (with telemetry
        alone, what it measures)."""
        return measured(
            (
                fact("queue_share_of_latency", self.queue_share_of_latency, "ratio"),
                fact("queue_share_of_ttft", self.queue_share_of_ttft, "ratio"),
                fact("peak_rho", self.peak_rho, "ratio"),
                fact("idle_while_waiting_fraction", self.idle_while_waiting_fraction, "ratio"),
            ),
            (
                fact("waiting_share", self.waiting_share, "ratio"),
                fact("waiting_mean", self.waiting_mean, "requests"),
                fact("running_fill_p75", self.running_fill_p75, "ratio"),
                fact("kv_usage_p75", self.kv_usage_p75, "ratio"),
            ),
        )


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
    """The windows of offered against achieved load: `count` windows of `width_s` from `t0_s`
    (wider than the `window_s` asked for when the span needs more than `grid_limit`)."""

    t0_s: float
    width_s: float
    count: int


    def edges(self) -> np.ndarray:
        """The windows' boundaries (s), count + 1 of them."""
        return self.t0_s + self.width_s * np.arange(self.count + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTiming:
    """Per-request times from the request table (s, None when the column is absent): queue
    and TTFT are NaN where a request's timing is inconsistent; the shares may come from the
    engine metrics when the table lacks them.

    `timed` marks the successful requests (`data/outcome.py`): TTFT, the shares and the queue
    time distribution are theirs only, so failures never pass for fast requests. `queue` keeps
    every request's wait, since a request that failed after waiting did occupy the queue
    (Little's law, the queue seconds a remedy saves)."""

    arrival: np.ndarray
    scheduled: np.ndarray | None
    finish: np.ndarray | None
    work: np.ndarray
    queue: np.ndarray | None
    ttft: np.ndarray | None
    share_ttft: float | None
    share_latency: float | None
    queue_total: float | None
    timed: np.ndarray


def request_timing(inp: AxisInput, sources: list[Source]) -> RequestTiming:
    """Queue time, TTFT and the queue's share of each (the request table, else the metrics)."""
    arrival = inp.trace.array("arrival_s", np.float64)
    scheduled = inp.floats("scheduled_s")
    first = inp.floats("first_token_s")
    # A disaggregated trace: TTFT is the client's first token, and the wait for a decode slot
    # is queueing the user feels (`data/handoff.py`).
    split = first is not None and bool(handed_off(inp.requests).any())
    if split:
        first = client_first_token_s(inp.requests)
    finish = inp.floats("finish_s")
    # Work is what the engine computes, as a step log counts it: prompt tokens the prefix
    # cache did not supply, plus output tokens.
    prompt = inp.trace.array("prompt_len", np.float64)
    cached = inp.floats("cached_tokens")
    if cached is not None:
        prompt = prompt - np.clip(np.nan_to_num(cached), 0.0, prompt)
    work = prompt + inp.trace.array("output_len", np.float64)

    queue = ttft = None
    share_ttft = share_latency = queue_total = None
    timed = successful(inp.trace)  # a failed request is counted, never timed
    if scheduled is not None:
        q = scheduled - arrival
        queue = np.where(q >= 0, q, np.nan)
        if split:
            queue = queue + decode_queue_s(inp.requests)
        queue_total = float(np.nansum(queue))
    if first is not None:
        f = first - arrival
        ttft = np.where((f >= 0) & timed, f, np.nan)
    if queue is not None and ttft is not None:
        both = np.isfinite(queue) & np.isfinite(ttft)  # ttft is NaN where not timed
        share_ttft = ratio(float(queue[both].sum()), float(ttft[both].sum()))
    if queue is not None and finish is not None:
        e2e = finish - arrival
        both = np.isfinite(queue) & np.isfinite(e2e) & (e2e >= 0) & timed
        share_latency = ratio(float(queue[both].sum()), float(e2e[both].sum()))
    if queue is not None or ttft is not None:
        sources.append(Source.REQUESTS)

    m = inp.metrics
    if m is not None:
        q_mean, f_mean = m.histogram_mean("queue_time_s"), m.histogram_mean("ttft_s")
        metric_queue_share = ratio(q_mean, f_mean)
        if share_ttft is None and metric_queue_share is not None:
            share_ttft = metric_queue_share
            sources.append(Source.METRICS)
        metric_latency_share = ratio(q_mean, m.histogram_mean("e2e_s"))
        if share_latency is None and metric_latency_share is not None:
            share_latency = metric_latency_share
            sources.append(Source.METRICS)
    return RequestTiming(arrival=arrival, scheduled=scheduled, finish=finish, work=work,
                         queue=queue, ttft=ttft, share_ttft=share_ttft,
                         share_latency=share_latency, queue_total=queue_total, timed=timed)


def grid_limit(events: int) -> int:
    """The most windows a load grid holds for `events` requests (steps or scrapes)."""
    return max(MIN_GRID_WINDOWS, WINDOWS_PER_EVENT * events)


def windows_of(timing: RequestTiming, window_s: float,
               telemetry_span: tuple[float, float] | None = None,
               telemetry_events: int = 0) -> Windows:
    """Windows of `window_s` from the first arrival to the last finish (or arrival); without a
    request (telemetry alone), over `telemetry_span`, the step log's or the metrics' range
    (`telemetry_events` rows). Beyond `grid_limit` windows, each is a whole number of
    `window_s` wide, so that the count stays within it."""
    arrival, finish = timing.arrival, timing.finish
    if arrival.size == 0:  # telemetry alone: no request to place in time
        if telemetry_span is None:
            return Windows(t0_s=0.0, width_s=window_s, count=1)
        t0, t_end = telemetry_span
    else:
        t0 = float(arrival.min())
        t_end = float(np.nanmax(finish)) if finish is not None else float(arrival.max())
    span_s = max(t_end - t0, 0.0)
    limit = grid_limit(arrival.size or telemetry_events)
    width_s = window_s
    if span_s / window_s > limit:
        width_s = window_s * math.ceil(span_s / (limit * window_s))
    n_windows = max(1, math.ceil(span_s / width_s + 1e-12))
    return Windows(t0_s=t0, width_s=width_s, count=n_windows)


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """Offered load against the peak sustained rate, per window (None without a served rate)."""

    windows: int | None = None
    service_rate_tokens_per_s: float | None = None
    peak_offered_tokens_per_s: float | None = None
    mean_rho: float | None = None
    peak_rho: float | None = None
    overloaded_windows: int | None = None
    overloaded_windows_queue_growing: int | None = None
    queue_seconds_in_overload: float | None = None
    excess_offered_tokens: float | None = None
    peak_windows: tuple[PeakWindow, ...] = ()


def offered_load(timing: RequestTiming, achieved_tokens: np.ndarray | None, grid: Windows,
                 overload_rho: float) -> Load:
    """Offered against achieved tokens/s per window; achieved from the step log's tokens when
    given, else each request's work spread over its service time."""
    arrival, scheduled, finish, work = timing.arrival, timing.scheduled, timing.finish, timing.work
    window, n_windows, t0 = grid.width_s, grid.count, grid.t0_s
    edges = grid.edges()
    achieved = None
    if achieved_tokens is not None:
        achieved = achieved_tokens / window
    elif finish is not None:
        begin = scheduled if scheduled is not None else arrival
        achieved = spread_work(edges, begin, finish, work) / window
    if achieved is None or not achieved.max() > 0:
        return Load()
    offered_idx = np.clip(np.floor((arrival - t0) / window).astype(np.int64), 0, n_windows - 1)
    offered = np.bincount(offered_idx, weights=work, minlength=n_windows) / window
    service_rate = float(achieved.max())
    rho = offered / service_rate
    over = rho >= overload_rho
    growing = queue_in_overload = None
    w = None
    if scheduled is not None:
        w = waiting_at(edges, arrival, scheduled)
        grows = w[1:] > w[:-1]
        growing = int((over & grows).sum())
        in_over = over[offered_idx]
        if timing.queue is not None:
            queue_in_overload = float(np.nansum(np.where(in_over, timing.queue, 0.0)))
    top = np.argsort(-rho, kind="stable")[:TOP_WINDOWS]
    peak_windows = tuple(
        PeakWindow(start_s=float(edges[i]), offered_tokens_per_s=float(offered[i]),
                   achieved_tokens_per_s=float(achieved[i]), rho=float(rho[i]),
                   waiting_at_start=None if w is None else int(w[i]),
                   waiting_at_end=None if w is None else int(w[i + 1]))
        for i in sorted(top.tolist())
    )
    return Load(
        windows=n_windows,
        service_rate_tokens_per_s=service_rate,
        peak_offered_tokens_per_s=float(offered.max()),
        mean_rho=float(offered.sum() / (n_windows * service_rate)),
        peak_rho=float(rho.max()),
        overloaded_windows=int(over.sum()),
        overloaded_windows_queue_growing=growing,
        queue_seconds_in_overload=queue_in_overload,
        excess_offered_tokens=float((np.clip(offered - service_rate, 0.0, None) * window).sum()),
        peak_windows=peak_windows,
    )
