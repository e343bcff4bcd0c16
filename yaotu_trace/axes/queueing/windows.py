"""The windows where the queue grows, and each cause of queueing judged inside them.

Whole-trace averages hide a burst: a minute at twice the engine's rate in ten quiet minutes
leaves GPU busy, batch fill and the share of steps with requests waiting low, while in that
minute the batch sits at its cap and the queue climbs by hundreds. So the queueing causes are
tested in the windows of the load grid (`window_s`) where the queue is.

The queue length at each window edge comes from one of three sources, the first present:

1. the step log: Σ over instances of the num_waiting of each instance's last step started at
   or before the edge (`steps.WindowBins.waiting_at_edges`);
2. the metrics: the waiting gauge (vllm:num_requests_waiting, summed over instances) at the
   last scrape at or before the edge;
3. the request table: requests arrived and not yet scheduled (`waiting_at`), with
   first_token_s standing in for a missing scheduled_s.

`growth_windows` turns that count into the two window sets, the same way for every source:

- growing: the queue rises by at least `growth_min_requests` and by at least
  `growth_min_share` of the window's arrivals (more arrive than are admitted);
- queued: growing, or requests wait at both of the window's edges (a standing queue).

In them (`judge`): the arrival burst (arrival rate in the growing windows against the rate in
the other windows of the arrival span, `burst_ratio`, and offered work against the service
rate, `growth_rho`), saturation (GPU busy and idle-while-waiting, step log only), batch shape
(tokens per step and running against their caps) and KV admission (KV usage), in the queued
windows, at the moments requests wait there (the steps that leave some waiting, the scrapes
that see some on their instance, the instants some are queued in the request table): what
the engine ran while it could not admit more. With a step log each instance is judged in the
windows where its own queue is (its num_waiting through `growth_windows`; the cluster's sums
when instances × windows exceeds `steps.MAX_CELLS`). Running comes from the step log, else
the metrics' running gauge, else the request table's own concurrency (scheduled ≤ t <
finish), per instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.axes.base import AxisInput, Source, ratio
from yaotu_trace.axes.queueing.metrics import RequestTiming, Windows, waiting_at
from yaotu_trace.axes.queueing.steps import StepStats, WindowBins
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics

# Points per window at which the request table's concurrency is sampled.
CONCURRENCY_SAMPLES = 10


def growth_windows(waiting_at_edges: np.ndarray, arrivals: np.ndarray, min_requests: float,
                   min_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(growing, queued) per window, from the queue length at the window edges and the
    arrivals per window (see the module docstring)."""
    start, end = waiting_at_edges[:-1], waiting_at_edges[1:]
    rise = end - start
    growing = (rise >= min_requests) & (rise >= min_share * arrivals)
    queued = growing | ((start > 0) & (end > 0))
    return growing, queued


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueWindows:
    """The queue length at the grid's edges, where it came from, and the window sets."""

    waiting_at_edges: np.ndarray
    source: Source
    growing: np.ndarray
    queued: np.ndarray


def queue_windows(inp: AxisInput, timing: RequestTiming, grid: Windows, st: StepStats,
                  t: Thresholds) -> QueueWindows | None:
    """The growing and queued windows from the first source that counts the queue."""
    edges = grid.edges()
    waiting, source = None, None
    if st.bins is not None and st.bins.waiting_at_edges is not None:
        waiting, source = st.bins.waiting_at_edges.sum(axis=0), Source.STEPS
    elif inp.metrics is not None and (w := _gauge_at(inp.metrics, "num_waiting", edges)):
        waiting, source = w[0], Source.METRICS
    else:
        begin = timing.scheduled
        if begin is None:
            begin = inp.floats("first_token_s")
        if begin is not None:
            waiting = waiting_at(edges, timing.arrival, begin).astype(np.float64)
            source = Source.REQUESTS
    if waiting is None or source is None:
        return None
    arrivals = _arrivals(timing.arrival, grid)
    growing, queued = growth_windows(waiting, arrivals, float(t.growth_min_requests),
                                     float(t.growth_min_share))
    return QueueWindows(waiting_at_edges=waiting, source=source, growing=growing,
                        queued=queued)


def _arrivals(arrival: np.ndarray, grid: Windows) -> np.ndarray:
    idx = np.clip(np.floor((arrival - grid.t0_s) / grid.width_s).astype(np.int64), 0,
                  grid.count - 1)
    return np.bincount(idx, minlength=grid.count).astype(np.float64)


def _gauge_at(metrics: EngineMetrics, key: str, edges: np.ndarray
              ) -> tuple[np.ndarray, int] | None:
    """(the gauge summed over instances at its last scrape at or before each edge, the number
    of instances it sums), or None when not exported; 0 before the first scrape."""
    g = metrics.gauge(key)
    name = metrics.name_of(key)
    if g is None or g.empty or name is None:
        return None
    times = g["time_s"].to_numpy(dtype=np.float64)
    values = g["value"].to_numpy(dtype=np.float64)
    k = np.searchsorted(times, edges, side="right") - 1
    at = np.where(k >= 0, values[np.clip(k, 0, None)], 0.0)
    instances = int(metrics.frame.loc[metrics.frame["metric"] == name, "labels"].nunique())
    return at, max(instances, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowVerdicts:
    """The causes' measurements inside the queue's windows (None where not measurable)."""

    queue_source: Source | None = None
    growing_windows: int = 0
    queued_windows: int = 0
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
    running_source: Source | None = None
    kv_usage_queued: float | None = None
    kv_blocked_queued: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What the engine serves at most: its peak rate (tokens/s), its token budget per step and
    its seat cap (given, else the largest seen; None when unknown)."""

    service_rate_tokens_per_s: float | None
    token_budget_tokens: float | None
    seq_cap: float | None


def judge(inp: AxisInput, timing: RequestTiming, grid: Windows, st: StepStats,
          qw: QueueWindows | None, limits: Limits, t: Thresholds) -> WindowVerdicts:
    """Each cause's measurement in the growing or queued windows (module docstring)."""
    if qw is None:
        return WindowVerdicts()
    grow, queued = qw.growing, qw.queued
    rise = np.diff(qw.waiting_at_edges)
    burst = _burst(timing, grid, grow, limits.service_rate_tokens_per_s)
    bins = st.bins
    steps: dict[str, float | None] = {}
    if bins is not None:
        rows = _queued_rows(inp, timing, grid, bins, queued, t)
        steps = _step_shape(bins, rows, limits.token_budget_tokens, limits.seq_cap)
    running, running_source = steps.get("running_fill_queued"), None
    if running is not None:
        running_source = Source.STEPS
    elif (got := _running_elsewhere(inp, timing, grid, queued)) is not None:
        running, running_source = got
    kv = steps.get("kv_usage_queued")
    if kv is None and inp.metrics is not None and queued.any():
        kv = _gauge_mean_in(inp.metrics, "kv_usage", grid, queued)
    return WindowVerdicts(
        queue_source=qw.source, growing_windows=int(grow.sum()),
        queued_windows=int(queued.sum()),
        growth_requests=float(rise[grow].sum()) if grow.any() else 0.0,
        **burst, busy_queued=steps.get("busy_queued"),
        idle_waiting_queued=steps.get("idle_waiting_queued"),
        tokens_per_step_queued=steps.get("tokens_per_step_queued"),
        step_fill_queued=steps.get("step_fill_queued"),
        running_fill_queued=running, running_source=running_source, kv_usage_queued=kv,
        kv_blocked_queued=steps.get("kv_blocked_queued"),
    )


def _burst(timing: RequestTiming, grid: Windows, grow: np.ndarray,
           service_rate: float | None) -> dict[str, float | None]:
    """Arrival rate in the growing windows against the other windows of the arrival span,
    and offered work there against the service rate (none without requests)."""
    if not grow.any() or timing.arrival.size == 0:
        return {}
    arrivals = _arrivals(timing.arrival, grid)
    last = int(np.clip(np.floor((timing.arrival.max() - grid.t0_s) / grid.width_s), 0,
                       grid.count - 1))
    span = np.zeros(grid.count, dtype=bool)
    span[: last + 1] = True
    other = span & ~grow
    rate_grow = float(arrivals[grow].sum() / (grow.sum() * grid.width_s))
    rate_other = (float(arrivals[other].sum() / (other.sum() * grid.width_s))
                  if other.any() else None)
    burst_ratio = (None if rate_other is None
                   else float("inf") if rate_other == 0 else rate_grow / rate_other)
    rho = None
    if service_rate:
        idx = np.clip(np.floor((timing.arrival - grid.t0_s) / grid.width_s).astype(np.int64),
                      0, grid.count - 1)
        offered = np.bincount(idx, weights=timing.work, minlength=grid.count)
        rho = float(offered[grow].sum() / (grow.sum() * grid.width_s)) / service_rate
    return {"arrival_rate_growing_per_s": rate_grow, "arrival_rate_other_per_s": rate_other,
            "burst_ratio": burst_ratio, "growth_rho": rho}


def _queued_rows(inp: AxisInput, timing: RequestTiming, grid: Windows, bins: WindowBins,
                 queued: np.ndarray, t: Thresholds) -> np.ndarray:
    """The queued windows of each row of the step log's sums (rows × windows): each instance
    judged where its own queue is (`growth_windows` on its num_waiting, with the arrivals the
    request table routes to it), else the cluster's queued windows for every row."""
    rows = len(bins.instances)
    if bins.waiting_at_edges is None or bins.instances == ("all",):
        return np.broadcast_to(queued, (rows, grid.count))
    arrivals = np.zeros((rows, grid.count))
    if inp.has("instance"):
        names = inp.requests["instance"].astype("string").fillna("").to_numpy(dtype=object)
        for r, name in enumerate(bins.instances):
            arrivals[r] = _arrivals(timing.arrival[names == name], grid)
    out = np.zeros((rows, grid.count), dtype=bool)
    for r in range(rows):
        _, out[r] = growth_windows(bins.waiting_at_edges[r], arrivals[r],
                                   float(t.growth_min_requests), float(t.growth_min_share))
    return out


def _step_shape(bins: WindowBins, queued: np.ndarray, budget: float | None,
                seq_cap: float | None) -> dict[str, float | None]:
    """Busy, idle-while-waiting, tokens per step, running and KV usage where each instance's
    queue is (`queued`: rows × windows), from the step log's per-window sums.

    The step means (tokens, running, KV usage, the share of steps blocked on KV) are each
    instance's own, weighed against the other instances' by the queue each held there
    (`held_s`): a disaggregated decode pool runs ten times the steps of its prefill pool, and
    counted step by step its few waiting requests outweighed the prefill pool's long queue.
    One instance (or a log without num_waiting) is its own mean."""
    if not queued.any():
        return {}
    covered = float(bins.covered_s[queued].sum())
    # A step that starts in a window may end after it: shares are capped at 1.
    out: dict[str, float | None] = {
        "busy_queued": _share(float(bins.busy_s[queued].sum()), covered),
        "idle_waiting_queued": (_share(float(bins.idle_waiting_s[queued].sum()), covered)
                                if bins.idle_waiting_s is not None else None),
    }
    weight = None if bins.held_s is None else _per_row(bins.held_s, queued)

    def mean(sums: np.ndarray | None, counts: np.ndarray | None) -> float | None:
        if sums is None or counts is None:
            return None
        return _weighed(_per_row(sums, queued), _per_row(counts, queued), weight)

    tokens = mean(bins.tokens_sum, bins.steps)
    if tokens is not None:
        out["tokens_per_step_queued"] = tokens
        out["step_fill_queued"] = ratio(tokens, budget)
    running = mean(bins.running_sum, bins.steps)
    if running is not None:
        out["running_fill_queued"] = ratio(running, seq_cap)
    kv = mean(bins.kv_usage_sum, bins.steps)
    if kv is not None:
        out["kv_usage_queued"] = kv
    if bins.admission_steps is not None and bins.kv_blocked_steps is not None:
        out["kv_blocked_queued"] = mean(bins.kv_blocked_steps, bins.admission_steps)
    return out


def _per_row(values: np.ndarray, queued: np.ndarray) -> np.ndarray:
    """Each row's (instance's) sum over its queued windows."""
    return np.where(queued, values, 0.0).sum(axis=1)


def _weighed(sums: np.ndarray, counts: np.ndarray, weight: np.ndarray | None) -> float | None:
    """The rows' means (sum / count) weighed by `weight` (None, or every weight 0: the pooled
    mean, Σ sums / Σ counts); rows without a count are left out."""
    has = counts > 0
    if not has.any():
        return None
    if weight is None or not (weight[has] > 0).any():
        return float(sums[has].sum() / counts[has].sum())
    means = sums[has] / counts[has]
    return float(np.average(means, weights=weight[has]))


def _share(part: float, whole: float) -> float | None:
    value = ratio(part, whole)
    return None if value is None else min(value, 1.0)


def _gauge_mean_in(metrics: EngineMetrics, key: str, grid: Windows,
                   mask: np.ndarray) -> float | None:
    """Mean of a gauge's per-instance scrapes that fall in the masked windows while requests
    wait: that instance's waiting gauge when the two share labels, else the cluster's (every
    scrape there when the waiting gauge is not exported). Each instance's (label set's) mean
    is weighed by what waited at its scrapes, as the step log's means weigh the queue each
    instance held (`_step_shape`); one instance is its own mean."""
    name = metrics.name_of(key)
    if name is None:
        return None
    frame = metrics.frame
    rows = frame.loc[frame["metric"] == name, ["time_s", "labels", "value"]]
    if rows.empty:
        return None
    times = rows["time_s"].to_numpy(dtype=np.float64)
    idx = np.floor((times - grid.t0_s) / grid.width_s).astype(np.int64)
    inside = (idx >= 0) & (idx < grid.count)
    inside[inside] = mask[idx[inside]]
    waiting_name = metrics.name_of("num_waiting")
    if waiting_name is not None:
        waiting = frame.loc[frame["metric"] == waiting_name, ["time_s", "labels", "value"]]
        own = rows.merge(waiting, on=["time_s", "labels"], how="left", suffixes=("", "_w"))
        at = own["value_w"].to_numpy(dtype=np.float64)
        if np.isnan(at).all():  # no shared labels: the cluster's queue at that scrape
            total = waiting.groupby("time_s")["value"].sum()
            at = total.reindex(times).to_numpy(dtype=np.float64)
        weights: np.ndarray | None = np.nan_to_num(at)
        inside &= np.nan_to_num(at) > 0
    else:
        weights = None
    if not inside.any():
        return None
    values = rows["value"].to_numpy(dtype=np.float64)[inside]
    if weights is None:
        return float(values.mean())
    label_sets, instance = np.unique(
        rows["labels"].to_numpy(dtype=object)[inside].astype(str), return_inverse=True)
    count = np.bincount(instance, minlength=label_sets.size)
    means = np.bincount(instance, weights=values, minlength=label_sets.size) / count
    held = np.bincount(instance, weights=weights[inside], minlength=label_sets.size)
    return float(np.average(means, weights=held))


def _running_elsewhere(inp: AxisInput, timing: RequestTiming, grid: Windows,
                       queued: np.ndarray) -> tuple[float | None, Source] | None:
    """Running per instance in the queued windows against the seat cap (max_num_seqs, else
    the most seen): the metrics' running gauge, else the request table's concurrency; None
    when neither is there."""
    if not queued.any():
        return None
    given = inp.settings.max_num_seqs
    seq_cap = float(given) if given else None
    m = inp.metrics
    if m is not None and (name := m.name_of("num_running")) is not None:
        mean = _gauge_mean_in(m, "num_running", grid, queued)
        cap = seq_cap
        if cap is None:
            per_label = m.frame.loc[m.frame["metric"] == name, "value"]
            cap = float(per_label.max()) if len(per_label) else None
        if mean is not None:
            return ratio(mean, cap), Source.METRICS
    if timing.scheduled is None or timing.finish is None:
        return None
    instances = 1
    if inp.has("instance"):
        instances = max(1, int(inp.requests["instance"].nunique()))
    edges = grid.edges()
    points = (edges[:-1, None] + grid.width_s * (np.arange(CONCURRENCY_SAMPLES) + 0.5)[None, :]
              / CONCURRENCY_SAMPLES)
    ok = np.isfinite(timing.scheduled) & np.isfinite(timing.finish)
    begin, end = np.sort(timing.scheduled[ok]), np.sort(timing.finish[ok])
    running = (np.searchsorted(begin, points, side="right")
               - np.searchsorted(end, points, side="right")) / instances
    cap = seq_cap if seq_cap is not None else float(running.max()) or None
    # At the instants requests wait, as the step log's steps that leave some waiting.
    arrived = timing.scheduled if timing.scheduled is not None else timing.arrival
    waiting = waiting_at(points.ravel(), timing.arrival, arrived).reshape(points.shape) > 0
    seen = queued[:, None] & waiting
    if not seen.any():
        return None
    return ratio(float(running[seen].mean()), cap), Source.REQUESTS
