"""Queueing and scheduling axis: is time lost waiting for a seat, and why (cost-model §4, A0–A5).

Metrics (units in the names; requests with inconsistent timing are skipped per metric):

- queue_time_s = scheduled_s − arrival_s, per request (s); ttft_s = first_token_s − arrival_s.
- queue_share_of_ttft = Σ queue_time_s / Σ ttft_s over requests with both (ratio 0–1); from
  metrics, mean(vllm:request_queue_time_seconds) / mean(vllm:time_to_first_token_seconds).
- queue_share_of_latency = Σ queue_time_s / Σ (finish_s − arrival_s) (ratio); the axis score;
  from metrics, mean queue time / mean(vllm:e2e_request_latency_seconds).
- interarrival_cv = std / mean of gaps between arrivals (1 = Poisson); peak_to_mean = busiest
  1 s bin / mean rate.
- Windows of `window_s` seconds from the first arrival. offered_tokens_per_s[w] = Σ (prompt_len
  + output_len) of requests arriving in w / window_s. achieved_tokens_per_s[w] = tokens served
  in w / window_s: from the step log Σ (prefill_tokens + decode_tokens) of steps starting in w,
  else each request's prompt_len + output_len spread evenly over [scheduled_s, finish_s].
  service_rate_tokens_per_s = max_w achieved (the peak sustained rate). rho[w] = offered /
  service rate; mean_rho = Σ offered / (windows · service rate); overloaded windows have rho ≥
  `overload_rho`; queue_grows = waiting(end of w) > waiting(start of w), with waiting(t) =
  #{arrival ≤ t} − #{scheduled ≤ t}. peak_windows: the 5 windows with the highest rho, in
  time order, with offered and achieved tokens/s and the queue at their start and end.
  excess_offered_tokens = Σ_w max(0, offered − service rate) · window_s (tokens): work beyond
  what the peak rate serves, which must queue, be shed or be served by added capacity.
- From the step log (read in record batches, `yaotu_trace.data.steplog`: only each instance's last
  step is carried from one batch to the next), per instance then summed: wall_s = last end −
  first start; busy_s = Σ (end_s − start_s); gpu_busy_fraction = busy_s / wall_s; idle gaps =
  next start − end; idle_while_waiting_s = Σ gaps after a step whose num_waiting > 0 (else
  requests waiting at the gap's start, from the request table); idle_while_waiting_fraction =
  that / wall_s.
- tokens_per_step = prefill_tokens + decode_tokens (tokens); token_budget_tokens = the engine's
  max_num_batched_tokens when given, else the largest step seen (inferred). step_fill_p75 = P75
  tokens_per_step / budget (without a step log: the metrics' mean step size / the given
  budget). metrics_tokens_per_step_mean = Δsum / Δcount of the
  vllm:iteration_tokens_total histogram (tokens). running_p75 = P75 num_running (or
  vllm:num_requests_running samples); seq_cap = max_num_seqs or the largest num_running seen;
  running_fill_p75 = running_p75 / seq_cap (ratio).
- kv_usage_p75: P75 of kv_blocks_used / kv_blocks_total (steps) or vllm:kv_cache_usage_perc /
  sglang:token_usage (metrics) (ratio).
- standing queue (rules Q004–Q006): with a step log, waiting_share ≥ the `waiting_share`
  threshold (requests left waiting after a step's admissions); without one, queue_share_of_ttft
  ≥ queue_share_warn or waiting_share ≥ its threshold.
- waiting_share: share of steps (or metric samples) with num_waiting > 0 (ratio);
  waiting_mean: duration-weighted mean of num_waiting over the step log (requests).
- Little's law (rule A0). Observed: waiting_mean = Σ over instances of ∫ num_waiting dt / the
  cluster's span (first step start to last step end): the per-instance rows of a cluster are
  summed at each instant, not averaged. Expected, from requests arriving in that span:
  little_expected_waiting = Σ queue_time_s / span (λ·W̄q, waiting counted continuously) and
  little_expected_sampled = Σ max(0, scheduled_s − first step start ≥ arrival_s on the
  request's instance) / span (waiting as a log sampled after admission at each step start sees
  it, as vLLM logs it: a request arriving mid-step is invisible until the next step). The
  observed mean must lie between the two (±little_mismatch); little_mismatch = the relative
  distance of waiting_mean outside [low, high] of the two expectations (0 inside) (ratio).
  Engines count preempted requests as waiting again, which queue_time_s does not hold, so with
  preemptions in the trace only the low end is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import cast

import numpy as np
import pandas as pd

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    Evidence,
    RuleHit,
    Source,
    Status,
    check,
    fact,
    finite,
    ratio,
    status_from,
)
from yaotu_trace.data.order_stats import BlockSum, Summary, summarize
from yaotu_trace.data.report import PERCENTILES, Distribution
from yaotu_trace.data.steplog import InstanceIds, StepLog, column, kv_usage_summary
from yaotu_trace.diagnosis.rules import SEVERITY_OF
from yaotu_trace.diagnosis.thresholds import Thresholds
from yaotu_trace.profile.workload import arrival_profile


class Cause(StrEnum):
    """Causes of queueing, in decision-flow priority (KV admission is looked at first)."""

    KV_ADMISSION = "kv_admission"
    DISPATCH_OVERHEAD = "dispatch_overhead"
    ARRIVAL_BURST = "arrival_burst"
    BATCH_SHAPE = "batch_shape"


CAUSE_OF_RULE = {
    "Q001": Cause.ARRIVAL_BURST,
    "Q002": Cause.ARRIVAL_BURST,
    "Q003": Cause.DISPATCH_OVERHEAD,
    "Q004": Cause.BATCH_SHAPE,
    "Q005": Cause.KV_ADMISSION,
}
CAUSE_ORDER = (Cause.KV_ADMISSION, Cause.DISPATCH_OVERHEAD, Cause.ARRIVAL_BURST,
               Cause.BATCH_SHAPE)


_TOP_WINDOWS = 5


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


def _times(df: pd.DataFrame, column: str) -> np.ndarray | None:
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


# Percentiles of per-step samples: the Distribution's and the P75 the rules compare.
_STEP_PERCENTILES = (*PERCENTILES, 75)


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows of offered against achieved load: `count` windows of `width_s` from `t0_s`."""

    t0_s: float
    width_s: float
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class _StepStats:
    wall_s: float | None = None
    busy_fraction: float | None = None
    idle_waiting_s: float | None = None
    idle_waiting_fraction: float | None = None
    tokens: Summary | None = None
    running: Summary | None = None
    kv_usage_p75: float | None = None
    waiting_share: float | None = None
    waiting_mean: float | None = None
    waiting_span: tuple[float, float] | None = None
    instances: tuple[str, ...] = ()
    achieved_tokens: np.ndarray | None = None
    preempted: bool = False


class _PerInstance:
    """The state one pass carries per instance from one batch to the next: the first start,
    the latest end and the last step seen (start, end, num_waiting)."""

    def __init__(self) -> None:
        self.seen = np.zeros(0, dtype=bool)
        self.first_start = np.zeros(0)
        self.max_end = np.zeros(0)
        self.last_start = np.zeros(0)
        self.last_end = np.zeros(0)
        self.last_waiting = np.zeros(0)

    def grow(self, n: int) -> None:
        extra = n - self.seen.size
        if extra > 0:
            self.seen = np.append(self.seen, np.zeros(extra, dtype=bool))
            self.first_start = np.append(self.first_start, np.full(extra, np.inf))
            self.max_end = np.append(self.max_end, np.full(extra, -np.inf))
            for name in ("last_start", "last_end", "last_waiting"):
                setattr(self, name, np.append(getattr(self, name), np.zeros(extra)))


def _previous(inst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each row of a batch, the row of the same instance just before it in the batch (-1
    when that step lies in an earlier batch, or there is none); and, grouping the rows by
    instance, the rows in group order, each group's first position and the last row of each."""
    order = np.argsort(inst, kind="stable")
    grouped = inst[order]
    same = grouped[1:] == grouped[:-1]
    prev = np.full(inst.size, -1, dtype=np.int64)
    prev[order[1:]] = np.where(same, order[:-1], -1)
    bounds = np.flatnonzero(np.concatenate([[True], ~same]))
    lasts = order[np.concatenate([~same, [True]])]
    return prev, order, bounds, lasts


def _instances_with(log: StepLog, name: str, ids: InstanceIds) -> np.ndarray:
    """Per instance id, whether any of its steps has a value of column `name` (one pass)."""
    found = np.zeros(0, dtype=bool)
    for b in log.batches(("instance", name)):
        inst = ids.codes(b)
        if found.size < len(ids):
            found = np.append(found, np.zeros(len(ids) - found.size, dtype=bool))
        found[inst[b[name].notna().to_numpy()]] = True
    return np.append(found, np.zeros(len(ids) - found.size, dtype=bool))


def _tokens(b: pd.DataFrame) -> np.ndarray:
    tokens = np.zeros(len(b))
    for name in ("prefill_tokens", "decode_tokens"):
        if name in b.columns:
            tokens += column(b, name, 0.0)
    return tokens


def step_stats(inp: AxisInput, windows: Windows | None = None) -> _StepStats:
    """Busy and idle time, idle-while-waiting, batch shape, KV usage and the tokens served per
    window, from the step log in passes over its record batches.

    Rows come in start order, so each instance's steps do too: a pass carries only the last
    step of each instance across batches, and sums in fixed blocks (`order_stats`), so the
    numbers do not depend on how the log is cut into batches, or whether it is on disk.
    """
    log = inp.steps
    if log is None or log.num_rows == 0:
        return _StepStats()
    arrival = _times(inp.requests, "arrival_s")
    scheduled = _times(inp.requests, "scheduled_s")
    table = arrival is not None and scheduled is not None
    if table:
        assert arrival is not None and scheduled is not None
        ok = np.isfinite(scheduled) & (scheduled >= arrival)
        sorted_arrival, sorted_scheduled = np.sort(arrival[ok]), np.sort(scheduled[ok])
    ids = InstanceIds()
    has_waiting = inp.step_has("num_waiting")
    # Instances whose steps report num_waiting use it; the others the request table.
    reports = (_instances_with(log, "num_waiting", ids)
               if has_waiting and log.has("instance") and not log.complete("num_waiting")
               else None)
    has_tokens = inp.step_has("prefill_tokens") or inp.step_has("decode_tokens")
    state = _PerInstance()
    busy, idle_wait, waiting_weighted = BlockSum(), BlockSum(), BlockSum()
    waiting_steps = 0
    lo, hi = np.inf, -np.inf
    achieved = (np.zeros(windows.count) if windows is not None and has_tokens else None)
    preempted = False
    for b in log.batches(("instance", "num_waiting", "prefill_tokens", "decode_tokens",
                          "num_preempted")):
        start, end = column(b, "start_s"), column(b, "end_s")
        inst = ids.codes(b)
        state.grow(len(ids))
        prev, order, bounds, lasts = _previous(inst)
        inside = prev >= 0
        p = np.where(inside, prev, 0)
        has_prev = inside | state.seen[inst]
        prev_start = np.where(inside, start[p], state.last_start[inst])
        prev_end = np.where(inside, end[p], state.last_end[inst])
        waiting = (column(b, "num_waiting", 0.0) if "num_waiting" in b.columns
                   else np.zeros(len(b)))
        prev_waiting = np.where(inside, waiting[p], state.last_waiting[inst])
        reporting = np.full(len(b), has_waiting) if reports is None else reports[inst]
        busy.add(end - start)
        gap = np.clip(start - prev_end, 0.0, None)
        from_log = has_prev & reporting
        idle = from_log & (prev_waiting > 0)
        from_table = has_prev & ~reporting
        if table and from_table.any():
            rows = np.flatnonzero(from_table)
            t = prev_end[rows]
            queued = (np.searchsorted(sorted_arrival, t, side="right")
                      - np.searchsorted(sorted_scheduled, t, side="right"))
            idle[rows[queued > 0]] = True
        idle_wait.add(gap[idle])
        # Each step's count holds until the next step of its instance starts.
        waiting_weighted.add((prev_waiting * (start - prev_start))[from_log])
        waiting_steps += int(np.count_nonzero(waiting > 0))

        groups = inst[lasts]
        state.first_start[groups] = np.minimum(state.first_start[groups],
                                               np.minimum.reduceat(start[order], bounds))
        state.max_end[groups] = np.maximum(state.max_end[groups],
                                           np.maximum.reduceat(end[order], bounds))
        state.seen[groups] = True
        state.last_start[groups], state.last_end[groups] = start[lasts], end[lasts]
        state.last_waiting[groups] = waiting[lasts]
        lo, hi = np.fmin(lo, np.fmin.reduce(start)), np.fmax(hi, np.fmax.reduce(end))
        if achieved is not None and windows is not None:
            idx = np.floor((start - windows.t0_s) / windows.width_s).astype(np.int64)
            keep = (idx >= 0) & (idx < windows.count)
            # Token counts are whole numbers: these sums are exact in any order.
            achieved += np.bincount(idx[keep], weights=_tokens(b)[keep],
                                    minlength=windows.count)
        if "num_preempted" in b.columns:
            preempted = preempted or bool((column(b, "num_preempted", 0.0) > 0).any())

    names = ids.names
    reported = np.full(len(names), has_waiting) if reports is None else reports
    wall = 0.0
    tails = []
    for i in sorted(range(len(names)), key=names.__getitem__):
        wall += float(state.max_end[i] - state.first_start[i])
        if reported[i]:  # the last step's count holds until its own end
            tails.append(state.last_waiting[i] * (state.last_end[i] - state.last_start[i]))
    waiting_weighted.add(np.asarray(tails, dtype=np.float64))
    known = table or bool(reported.all())
    idle_s = idle_wait.total()
    stats: dict[str, object] = {
        "wall_s": wall,
        "busy_fraction": ratio(busy.total(), wall),
        "idle_waiting_s": idle_s if known else None,
        "idle_waiting_fraction": ratio(idle_s, wall) if known else None,
        "instances": tuple(names),
        "achieved_tokens": achieved,
        "preempted": preempted,
    }
    if has_tokens:
        stats["tokens"] = summarize(
            log.reader(("prefill_tokens", "decode_tokens"), _tokens), _STEP_PERCENTILES)
    if inp.step_has("num_running"):
        stats["running"] = summarize(
            log.reader(("num_running",), lambda b: column(b, "num_running")),
            _STEP_PERCENTILES)
    if inp.step_has("kv_blocks_used") and inp.step_has("kv_blocks_total"):
        stats["kv_usage_p75"] = kv_usage_summary(log).percentiles.get(75)
    if has_waiting:
        stats["waiting_share"] = waiting_steps / log.num_rows
        # NOTE: a cluster's waiting count is the sum over its instances at each instant, so the
        # per-instance integrals are summed and divided by the cluster's span, not Σ walls.
        stats["waiting_mean"] = ratio(waiting_weighted.total(), float(hi - lo))
        stats["waiting_span"] = (float(lo), float(hi))
    return _StepStats(**stats)  # type: ignore[arg-type]


def _first_starts(log: StepLog, arrival: np.ndarray, rows: np.ndarray,
                  own: np.ndarray | None) -> np.ndarray:
    """The first step start at or after the arrival of each request in `rows` (inf if none),
    among the steps of the instance `own` names for it (None: among every step), in one pass
    over the log. Requests are in memory, each queue in arrival order; steps are streamed."""
    first = np.full(arrival.size, np.inf)
    codes, keys = np.full(rows.size, -1), []
    if own is not None:
        codes, uniques = pd.factorize(pd.Series(own, dtype=object), use_na_sentinel=True)
        keys = [str(k) for k in uniques]
    order = np.lexsort((arrival[rows], codes))
    bounds = np.searchsorted(codes[order], np.arange(-1, len(keys) + 1))
    # Queue of each instance name (None: every step), and how many of it are placed.
    queues = {key: rows[order[bounds[i]:bounds[i + 1]]]
              for i, key in enumerate([None, *keys]) if bounds[i + 1] > bounds[i]}
    done = dict.fromkeys(queues, 0)
    ids = InstanceIds()

    def place(key: str | None, starts: np.ndarray) -> None:
        queue = queues[key][done[key]:]
        # Arrivals up to the batch's last start get their first start >= arrival here: every
        # start of an earlier batch came before them.
        n = int(np.searchsorted(arrival[queue], starts[-1], side="right"))
        first[queue[:n]] = starts[np.searchsorted(starts, arrival[queue[:n]], side="left")]
        done[key] += n

    for b in log.batches(("instance",) if keys else ()):
        if all(done[k] == queues[k].size for k in queues):
            break
        if not len(b):
            continue
        start = column(b, "start_s")
        if None in queues:
            place(None, start)
        if not keys:
            continue
        inst = ids.codes(b)
        _, grouped, bounds_b, lasts = _previous(inst)
        ends = np.append(bounds_b[1:], grouped.size)
        for g, row in enumerate(lasts):
            name = ids.names[inst[row]]
            if name in queues and done[name] < queues[name].size:
                place(name, start[grouped[bounds_b[g]:ends[g]]])
    return first


def _sampled_waiting_s(inp: AxisInput, st: _StepStats, arrival: np.ndarray,
                       scheduled: np.ndarray, inside: np.ndarray) -> float:
    """Σ waiting seconds a step log sampled after admission shows: from the first step start at
    or after each arrival (on the request's instance when both tables name instances)."""
    if not st.instances or inp.steps is None:
        return float("nan")
    names = None
    if inp.has("instance") and set(st.instances) != {"all"}:
        names = inp.requests["instance"].fillna("").astype(str).to_numpy()
    rows = np.flatnonzero(inside)
    own: np.ndarray | None = None
    if names is not None:
        # A request whose instance ran no step looks at every step.
        known = np.isin(names[rows], np.array(st.instances, dtype=object))
        own = cast(np.ndarray, np.where(known, names[rows], None))
    first_start = _first_starts(inp.steps, arrival, rows, own)
    total = 0.0
    groups = ([(k, names == k) for k in np.unique(names[inside])] if names is not None
              else [(None, np.ones(arrival.size, dtype=bool))])
    for _, sel in groups:
        sel = sel & inside
        seen = np.clip(scheduled[sel] - first_start[sel], 0.0, None)
        total += float(seen[np.isfinite(seen)].sum())
    return total


def _p75(values: np.ndarray | None) -> float | None:
    if values is None or values.size == 0:
        return None
    return float(np.percentile(values, 75))


def analyze_queueing(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure queueing and name its cause: burst, dispatch overhead, batch shape or KV."""
    req = inp.requests
    sources: list[Source] = []
    notes: list[str] = []
    arrival = req["arrival_s"].to_numpy(dtype=np.float64)
    scheduled = _times(req, "scheduled_s")
    first = _times(req, "first_token_s")
    finish = _times(req, "finish_s")
    work = (req["prompt_len"].to_numpy(dtype=np.float64)
            + req["output_len"].to_numpy(dtype=np.float64))

    queue = ttft = None
    share_ttft = share_latency = queue_total = None
    if scheduled is not None:
        q = scheduled - arrival
        queue = np.where(q >= 0, q, np.nan)
        queue_total = float(np.nansum(queue))
    if first is not None:
        f = first - arrival
        ttft = np.where(f >= 0, f, np.nan)
    if queue is not None and ttft is not None:
        both = np.isfinite(queue) & np.isfinite(ttft)
        share_ttft = ratio(float(queue[both].sum()), float(ttft[both].sum()))
    if queue is not None and finish is not None:
        e2e = finish - arrival
        both = np.isfinite(queue) & np.isfinite(e2e) & (e2e >= 0)
        share_latency = ratio(float(queue[both].sum()), float(e2e[both].sum()))
    if queue is not None or ttft is not None:
        sources.append(Source.REQUESTS)

    m = inp.metrics
    metric_queue_share = None
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

    prof = arrival_profile(arrival)

    # Offered load against achieved throughput per window.
    window = float(t.window_s)
    windows = service_rate = peak_offered = mean_rho = peak_rho = None
    overloaded = growing = None
    queue_in_overload = excess_tokens = None
    peak_windows: tuple[PeakWindow, ...] = ()
    achieved = None
    t0 = float(arrival.min())
    t_end = float(np.nanmax(finish)) if finish is not None else float(arrival.max())
    n_windows = max(1, int(np.ceil((t_end - t0) / window + 1e-12)))
    edges = t0 + window * np.arange(n_windows + 1)
    st = step_stats(inp, Windows(t0_s=t0, width_s=window, count=n_windows))
    if st.wall_s is not None:
        sources.append(Source.STEPS)
    if st.achieved_tokens is not None:
        achieved = st.achieved_tokens / window
    elif finish is not None:
        begin = scheduled if scheduled is not None else arrival
        achieved = spread_work(edges, begin, finish, work) / window
    if achieved is not None and achieved.max() > 0:
        offered_idx = np.clip(np.floor((arrival - t0) / window).astype(np.int64), 0, n_windows - 1)
        offered = np.bincount(offered_idx, weights=work, minlength=n_windows) / window
        service_rate = float(achieved.max())
        rho = offered / service_rate
        windows = n_windows
        peak_offered = float(offered.max())
        mean_rho = float(offered.sum() / (n_windows * service_rate))
        peak_rho = float(rho.max())
        over = rho >= t.overload_rho
        overloaded = int(over.sum())
        excess_tokens = float((np.clip(offered - service_rate, 0.0, None) * window).sum())
        if scheduled is not None:
            w = waiting_at(edges, arrival, scheduled)
            grows = w[1:] > w[:-1]
            growing = int((over & grows).sum())
            in_over = over[offered_idx]
            if queue is not None:
                queue_in_overload = float(np.nansum(np.where(in_over, queue, 0.0)))
        else:
            w = None
        top = np.argsort(-rho, kind="stable")[:_TOP_WINDOWS]
        peak_windows = tuple(
            PeakWindow(start_s=float(edges[i]), offered_tokens_per_s=float(offered[i]),
                       achieved_tokens_per_s=float(achieved[i]), rho=float(rho[i]),
                       waiting_at_start=None if w is None else int(w[i]),
                       waiting_at_end=None if w is None else int(w[i + 1]))
            for i in sorted(top.tolist())
        )

    # Batch shape and caps.
    s = inp.settings
    tokens = st.tokens
    tokens_dist = Distribution.from_summary(tokens) if tokens is not None else None
    budget = budget_inferred = step_fill = None
    if tokens is not None and tokens.count:
        budget_inferred = s.max_batched_tokens is None
        budget = float(s.max_batched_tokens or tokens.max or 0)
        step_fill = ratio(tokens.percentiles[75], budget)
    elif m is not None and s.max_batched_tokens and m.histogram_mean("iteration_tokens"):
        # Without a step log, the metrics' mean step size stands in for the P75.
        budget, budget_inferred = float(s.max_batched_tokens), False
        step_fill = ratio(m.histogram_mean("iteration_tokens"), budget)
    running = st.running
    if running is None and m is not None:
        g = m.gauge("num_running")
        if g is not None:
            samples = g["value"].to_numpy(dtype=np.float64)
            running = summarize(lambda: [samples], _STEP_PERCENTILES)
            sources.append(Source.METRICS)
    running_dist = Distribution.from_summary(running) if running is not None else None
    seq_cap = seq_cap_inferred = running_fill = None
    if running is not None and running.count:
        seq_cap_inferred = s.max_num_seqs is None
        seq_cap = float(s.max_num_seqs or running.max or 0)
        running_fill = ratio(running.percentiles[75], seq_cap)
    kv_p75 = st.kv_usage_p75
    waiting_share = st.waiting_share
    if m is not None:
        if kv_p75 is None and (g := m.gauge("kv_usage", how="max")) is not None:
            kv_p75 = _p75(g["value"].to_numpy(dtype=np.float64))
            sources.append(Source.METRICS)
        if waiting_share is None and (g := m.gauge("num_waiting")) is not None:
            waiting_share = float((g["value"] > 0).mean())
            sources.append(Source.METRICS)

    # Little's law: mean waiting seen by the engine against λ·W̄q from the request table.
    expected = sampled = mismatch = None
    if queue is not None and st.waiting_mean is not None and st.waiting_span is not None:
        lo, hi = st.waiting_span
        inside = (arrival >= lo) & (arrival <= hi) & np.isfinite(queue)
        span = hi - lo
        if inside.any() and span > 0:
            expected = finite(float(queue[inside].sum()) / span)
            assert scheduled is not None
            sampled = finite(_sampled_waiting_s(inp, st, arrival, scheduled, inside) / span)
            if expected is not None:
                low = min(expected, sampled if sampled is not None else expected)
                high = max(expected, sampled if sampled is not None else expected)
                # NOTE: engines count preempted requests as waiting again, time the request
                # table's queue_time_s does not hold: with preemptions only the low end binds.
                preempting = ((inp.has("num_preemptions")
                               and bool((req["num_preemptions"].fillna(0) > 0).any()))
                              or (inp.step_has("num_preempted") and st.preempted))
                if preempting:
                    high = np.inf
                observed = st.waiting_mean
                outside = max(0.0, low - observed, observed - high)
                mismatch = 0.0 if outside == 0 else ratio(outside, max(observed, high))

    metrics = QueueingMetrics(
        queue_time_s=Distribution.of(queue) if queue is not None else None,
        ttft_s=Distribution.of(ttft) if ttft is not None else None,
        queue_share_of_ttft=share_ttft,
        queue_share_of_latency=share_latency,
        queue_seconds_total=queue_total,
        interarrival_cv=prof.interarrival_cv,
        peak_to_mean=prof.peak_to_mean,
        window_s=window,
        windows=windows,
        service_rate_tokens_per_s=service_rate,
        peak_offered_tokens_per_s=peak_offered,
        mean_rho=mean_rho,
        peak_rho=peak_rho,
        overloaded_windows=overloaded,
        overloaded_windows_queue_growing=growing,
        queue_seconds_in_overload=queue_in_overload,
        excess_offered_tokens=excess_tokens,
        peak_windows=peak_windows,
        wall_s=st.wall_s,
        gpu_busy_fraction=st.busy_fraction,
        idle_while_waiting_s=st.idle_waiting_s,
        idle_while_waiting_fraction=st.idle_waiting_fraction,
        tokens_per_step=tokens_dist,
        metrics_tokens_per_step_mean=(None if m is None
                                      else m.histogram_mean("iteration_tokens")),
        token_budget_tokens=budget,
        token_budget_inferred=budget_inferred,
        step_fill_p75=step_fill,
        running=running_dist,
        seq_cap=seq_cap,
        seq_cap_inferred=seq_cap_inferred,
        running_fill_p75=running_fill,
        kv_usage_p75=kv_p75,
        waiting_share=waiting_share,
        waiting_mean=st.waiting_mean,
        little_expected_waiting=expected,
        little_mismatch=mismatch,
        little_expected_sampled=sampled,
    )

    decided = share_ttft is not None or st.wall_s is not None or waiting_share is not None
    if not decided:
        return AxisResult(
            axis=AxisName.QUEUEING,
            status=Status.INSUFFICIENT_DATA,
            cause=None,
            score=None,
            score_basis="share of request latency spent queueing",
            sources=(),
            metrics=metrics,
            missing=(
                "scheduled_s and first_token_s (request table)",
                "a step log with start_s, end_s, num_waiting (--steps)",
                "vllm:num_requests_waiting or sglang:num_queue_reqs, or "
                "vllm:request_queue_time_seconds (--metrics)",
            ),
            next_steps=(
                "log per-request queued/scheduled/first-token times (vLLM request stats, OTel "
                "gen_ai.latency.time_in_queue) or export the engine's Prometheus metrics",
            ),
        )

    hits = _queueing_rules(metrics, t, has_steps=st.wall_s is not None, notes=notes)
    status = status_from(hits, SEVERITY_OF)
    causes = {CAUSE_OF_RULE[h.rule_id] for h in hits if h.rule_id in CAUSE_OF_RULE}
    cause = next((c for c in CAUSE_ORDER if c in causes), None)
    score = share_latency if share_latency is not None else share_ttft
    if score is None:
        score = st.idle_waiting_fraction
    basis = ("share of request latency spent queueing" if share_latency is not None
             else "share of TTFT spent queueing" if share_ttft is not None
             else "share of wall time the GPU idled while requests waited")
    missing: list[str] = []
    if scheduled is None:
        missing.append("scheduled_s (request table)")
    if st.wall_s is None:
        missing.append("a step log (--steps) for GPU busy and idle-while-waiting time")
    elif st.idle_waiting_s is None:
        missing.append("num_waiting (step log) or scheduled_s for idle-while-waiting time")
    next_steps = _next_steps(cause, missing)
    return AxisResult(
        axis=AxisName.QUEUEING,
        status=status,
        cause=cause,
        score=finite(score),
        score_basis=basis,
        sources=tuple(dict.fromkeys(sources)),
        metrics=metrics,
        hits=tuple(hits),
        missing=tuple(missing),
        next_steps=next_steps,
        notes=tuple(notes),
    )


def _next_steps(cause: str | None, missing: list[str]) -> tuple[str, ...]:
    advice = {
        Cause.KV_ADMISSION: "read the kv_memory axis: admission waits for KV blocks",
        Cause.DISPATCH_OVERHEAD: "profile the host side of a step (nsys): scheduling, input "
        "preparation, detokenisation, HTTP; try async/overlap scheduling and CUDA graphs",
        Cause.ARRIVAL_BURST: "size for the peak window, not the mean: replicas, admission "
        "control or autoscaling on queue depth",
        Cause.BATCH_SHAPE: "raise max_num_batched_tokens / max_num_seqs and check FCFS "
        "head-of-line blocking by long prompts",
    }
    out = [advice[Cause(cause)]] if cause else []
    out += [f"add {m}" for m in missing]
    return tuple(out)


def _queueing_rules(
    mt: QueueingMetrics, t: Thresholds, *, has_steps: bool, notes: list[str]
) -> list[RuleHit]:
    """Rules A0–A5 of cost-model §7 on the measured metrics, in id order."""
    hits: list[RuleHit] = []
    share = mt.queue_share_of_ttft
    # NOTE: a request arriving mid-step waits for the next step boundary even on an idle-free
    # engine; a step log sampled after admission does not show that wait, so with a step log the
    # queue is persistent only when the engine itself reports requests left waiting.
    if has_steps and mt.waiting_share is not None:
        persistent_queue = mt.waiting_share >= t.waiting_share
    else:
        persistent_queue = (
            (share is not None and share >= t.queue_share_warn)
            or (mt.waiting_share is not None and mt.waiting_share >= t.waiting_share)
        )

    if mt.little_mismatch is not None and mt.little_mismatch > t.little_mismatch:
        hits.append(RuleHit(rule_id="Q000", evidence=(
            check("little_mismatch", mt.little_mismatch, ">", "little_mismatch",
                  t.little_mismatch),
            fact("waiting_mean", mt.waiting_mean, "requests"),
            fact("little_expected_waiting", mt.little_expected_waiting, "requests"),
            fact("little_expected_sampled", mt.little_expected_sampled, "requests"),
        )))

    at_limit: list[Evidence] = []
    for name, value in (("step_fill_p75", mt.step_fill_p75),
                        ("running_fill_p75", mt.running_fill_p75),
                        ("kv_usage_p75", mt.kv_usage_p75)):
        if value is not None:
            at_limit.append(check(name, value, ">=", "batch_at_limit", t.batch_at_limit))
    batch_limited = any(e.passed for e in at_limit) if at_limit else None
    saturated = None
    if has_steps and mt.gpu_busy_fraction is not None:
        saturated = (mt.gpu_busy_fraction >= t.gpu_busy_saturated
                     and (mt.idle_while_waiting_fraction or 0.0) < t.idle_waiting_saturated)

    # A1: arrival burst above capacity.
    if (share is not None and share >= t.queue_share_of_ttft
            and mt.peak_rho is not None and mt.peak_rho >= t.overload_rho
            and (mt.overloaded_windows_queue_growing or 0) > 0
            and saturated is not False and batch_limited is not False):
        ev = [
            check("queue_share_of_ttft", share, ">=", "queue_share_of_ttft", t.queue_share_of_ttft),
            check("peak_rho", mt.peak_rho, ">=", "overload_rho", t.overload_rho),
            fact("overloaded_windows_queue_growing", mt.overloaded_windows_queue_growing,
                 "windows"),
            fact("service_rate_tokens_per_s", mt.service_rate_tokens_per_s, "tokens/s"),
            fact("peak_offered_tokens_per_s", mt.peak_offered_tokens_per_s, "tokens/s"),
        ]
        if saturated is not None:
            ev.append(check("gpu_busy_fraction", mt.gpu_busy_fraction, ">=",
                            "gpu_busy_saturated", t.gpu_busy_saturated))
            ev.append(check("idle_while_waiting_fraction", mt.idle_while_waiting_fraction, "<",
                            "idle_waiting_saturated", t.idle_waiting_saturated))
        ev += [e for e in at_limit if e.passed]
        if saturated is None:
            notes.append("arrival burst judged from the request table alone; add a step log to "
                         "confirm the GPU was saturated")
        hits.append(RuleHit(rule_id="Q001", evidence=tuple(ev)))

    # A2: burstiness rather than mean load.
    qd = mt.queue_time_s
    if (mt.mean_rho is not None and mt.mean_rho < t.burst_mean_rho
            and mt.interarrival_cv is not None and mt.interarrival_cv > t.burst_cv
            and qd is not None and qd.mean and qd.p99 is not None
            and qd.p99 >= t.burst_p99_to_mean * qd.mean):
        hits.append(RuleHit(rule_id="Q002", evidence=(
            check("mean_rho", mt.mean_rho, "<", "burst_mean_rho", t.burst_mean_rho),
            check("interarrival_cv", mt.interarrival_cv, ">", "burst_cv", t.burst_cv),
            check("queue_p99_to_mean", qd.p99 / qd.mean, ">=", "burst_p99_to_mean",
                  t.burst_p99_to_mean),
        )))

    # A3: the GPU idles while requests wait: host-side dispatch overhead.
    if (mt.idle_while_waiting_fraction is not None
            and mt.idle_while_waiting_fraction >= t.idle_waiting_dispatch):
        hits.append(RuleHit(rule_id="Q003", evidence=(
            check("idle_while_waiting_fraction", mt.idle_while_waiting_fraction, ">=",
                  "idle_waiting_dispatch", t.idle_waiting_dispatch),
            fact("idle_while_waiting_s", mt.idle_while_waiting_s, "s"),
            fact("gpu_busy_fraction", mt.gpu_busy_fraction, "ratio"),
        )))

    # A4: busy GPU, persistent queue, but small batches: limited by policy.
    td = mt.tokens_per_step
    if (persistent_queue and saturated
            and td is not None and td.p50 is not None and td.p50 < t.underfill_tokens
            and mt.running_fill_p75 is not None and mt.running_fill_p75 < t.batch_underfilled
            and (mt.kv_usage_p75 is None or mt.kv_usage_p75 < t.kv_low_usage)):
        ev = [
            check("tokens_per_step_p50", td.p50, "<", "underfill_tokens", t.underfill_tokens,
                  "tokens"),
            check("running_fill_p75", mt.running_fill_p75, "<", "batch_underfilled",
                  t.batch_underfilled),
            check("gpu_busy_fraction", mt.gpu_busy_fraction, ">=", "gpu_busy_saturated",
                  t.gpu_busy_saturated),
        ]
        if mt.kv_usage_p75 is not None:
            ev.append(check("kv_usage_p75", mt.kv_usage_p75, "<", "kv_low_usage", t.kv_low_usage))
        hits.append(RuleHit(rule_id="Q004", evidence=tuple(ev)))

    # A5: the queue waits for KV memory, not for seats.
    if (persistent_queue and mt.kv_usage_p75 is not None
            and mt.kv_usage_p75 >= t.kv_admission_usage
            and (mt.running_fill_p75 is None or mt.seq_cap_inferred
                 or mt.running_fill_p75 < t.batch_underfilled)):
        ev = [check("kv_usage_p75", mt.kv_usage_p75, ">=", "kv_admission_usage",
                    t.kv_admission_usage)]
        if mt.running_fill_p75 is not None and not mt.seq_cap_inferred:
            ev.append(check("running_fill_p75", mt.running_fill_p75, "<", "batch_underfilled",
                            t.batch_underfilled))
        if mt.waiting_share is not None:
            ev.append(fact("waiting_share", mt.waiting_share, "ratio"))
        hits.append(RuleHit(rule_id="Q005", evidence=tuple(ev)))

    # Queueing is large but no cause matched.
    causal = {"Q001", "Q002", "Q003", "Q004", "Q005"}
    if (share is not None and share >= t.queue_share_warn and not causal & {h.rule_id for h in hits}
            and (persistent_queue or not has_steps)):
        hits.append(RuleHit(rule_id="Q006", evidence=(
            check("queue_share_of_ttft", share, ">=", "queue_share_warn", t.queue_share_warn),
            fact("peak_rho", mt.peak_rho, "ratio"),
            fact("gpu_busy_fraction", mt.gpu_busy_fraction, "ratio"),
        )))
    return hits
