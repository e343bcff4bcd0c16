"""Queueing across instances (rule Q010): requests wait on one instance while another has idle
seats, and how much of that queue even or least-loaded routing would remove.

Instances come from the request table's `instance` column, else the step log's, else the
`instance`, `pod` and `engine` labels of the engine metrics, joined to the trace's names by
`data/instance_join.py` (`instance="i0",engine="0"` is the trace's `i0`); the other sources add
what they measure for instances of the same name. Per instance:

- requests and work_share: requests routed to it and their share of prompt + output tokens
  (request table; else its step-log tokens, else its prompt + generation token counters);
- queue_seconds and queue_share: Σ queue_time_s of its requests (else ∫ num_waiting dt of its
  steps or its `num_requests_waiting` series), and its share of the cluster's;
- waiting_share: share of its steps (or metric samples) with num_waiting > 0; busy_share: its
  steps' time over the cluster's span (step log);
  queue_share_of_ttft: its requests' Σ queue / Σ TTFT;
- running_mean and seat_fill: time-weighted mean num_running of its steps (else the mean of its
  samples, else Σ finish_s − scheduled_s of its requests / the cluster's span) over the seat
  cap (max_num_seqs when given, else the most running seen on any instance);
- preemptions and preemption_share: num_preempted (else num_readmitted) of its steps, else
  num_preemptions of its requests, else the rise of its preemption counter; and its share of
  the cluster's.

Disaggregated traces (prefill_instance and decode_instance) are not judged here: their
instances do different work.

Routing estimate: each instance is a work-conserving FCFS server of μ tokens/s, a request's
wait being the unfinished work ahead of it / μ (Lindley's recursion, `fcfs_waits_s`). μ is the
highest tokens/s any instance served in a window (the instances are taken as identical). The
queue is modelled three times on the trace's arrivals and work: as routed (each request on its
instance; without per-request instances, every request split by the work shares), round-robin
(even) and least-loaded (each request to the instance with the least work ahead,
`least_work_waits_s`). vanish_share = 1 − modelled / modelled as routed, so the model's bias
largely cancels; the seconds that vanish are that share of the measured queue seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.axes.base import AxisInput, ratio
from yaotu_trace.axes.queueing.instances import InstanceQueue, LoadBalance
from yaotu_trace.axes.queueing.metrics import RequestTiming, Windows, spread_work
from yaotu_trace.data.instance_join import samples_by_instance, trace_instance_names
from yaotu_trace.data.metric_names import COUNTERS, GAUGES
from yaotu_trace.data.steplog import PREEMPTION_COLUMNS, column, preemptions

if TYPE_CHECKING:
    import pandas as pd

_STEP_COLUMNS = ("instance", "num_waiting", "num_running", *PREEMPTION_COLUMNS, "prefill_tokens",
                 "decode_tokens")


def fcfs_waits_s(arrival_s: np.ndarray, work: np.ndarray, rate: float) -> np.ndarray:
    """Each arrival's wait at a work-conserving FCFS server of `rate` work/s, starting empty:
    the work ahead of it / rate. With S the work arrived before j, the backlog j finds is
    max over k ≤ j of (S_j − S_k) − rate·(t_j − t_k) = x_j − min_{k≤j} x_k, x = S − rate·t."""
    before = np.concatenate([[0.0], np.cumsum(work)[:-1]])
    x = before - rate * arrival_s
    return (x - np.minimum.accumulate(x)) / rate


def least_work_waits_s(arrival_s: np.ndarray, work: np.ndarray, rate: float,
                       instances: int) -> np.ndarray:
    """Each arrival's wait when a router sends it to the instance with the least work ahead
    (ties: the lowest index), `instances` FCFS servers of `rate` work/s, arrivals in order."""
    # NOTE: the compiled loop starts numba; a diagnosis that routes no work never loads it.
    from yaotu_trace.axes.queueing.least_work import least_work_waits

    return least_work_waits(np.ascontiguousarray(arrival_s, dtype=np.float64),
                            np.ascontiguousarray(work, dtype=np.float64), float(rate),
                            int(instances))


def _table_rows(inp: AxisInput, timing: RequestTiming) -> dict[str, dict[str, float]]:
    """Per-instance requests, work, queue and TTFT sums from the request table."""
    if not inp.has("instance"):
        return {}
    import pandas as pd

    names = inp.requests["instance"].astype("string").fillna("").to_numpy(dtype=object)
    frame = pd.DataFrame({"name": names, "work": timing.work, "one": 1.0})
    if timing.queue is not None:
        frame["queue"] = timing.queue
        if timing.ttft is not None:
            both = np.isfinite(timing.queue) & np.isfinite(timing.ttft)
            frame["q_both"] = np.where(both, timing.queue, 0.0)
            frame["ttft_both"] = np.where(both, timing.ttft, 0.0)
    if timing.scheduled is not None and timing.finish is not None:
        served = timing.finish - timing.scheduled
        frame["service"] = np.where(np.isfinite(served) & (served >= 0), served, 0.0)
    if inp.has("num_preemptions"):
        frame["preempt"] = inp.requests["num_preemptions"].to_numpy(dtype=np.float64,
                                                                     na_value=0.0)
    frame = frame[frame["name"] != ""]
    sums = frame.groupby("name", sort=True).sum(min_count=1)
    out = {str(k): {c: float(v) for c, v in row.items() if pd.notna(v)}
           for k, row in sums.iterrows()}
    if "service" in frame and timing.finish is not None and timing.scheduled is not None:
        # Little's law: mean requests in service = Σ service time / the cluster's span.
        span = float(np.nanmax(timing.finish) - timing.arrival.min())
        for name, row in out.items():
            sel = names == name
            row["running_mean"] = ratio(row["service"], span) or 0.0
            row["running_max"] = _most_at_once(timing.scheduled[sel], timing.finish[sel])
    return out


def _most_at_once(start_s: np.ndarray, end_s: np.ndarray) -> float:
    """The most intervals [start, end) open at one instant."""
    ok = np.isfinite(start_s) & np.isfinite(end_s) & (end_s >= start_s)
    starts, ends = np.sort(start_s[ok]), np.sort(end_s[ok])
    if not starts.size:
        return 0.0
    return float((np.arange(1, starts.size + 1) - np.searchsorted(ends, starts, "right")).max())


def _step_batch(b: pd.DataFrame, grid: Windows) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """One batch of steps summed per instance, and the tokens each served per window."""
    import pandas as pd

    start, end = column(b, "start_s"), column(b, "end_s")
    dur = np.clip(end - start, 0.0, None)
    names = b["instance"].astype("string").fillna("").to_numpy(dtype=object)
    nan = np.full(len(b), np.nan)
    waiting = column(b, "num_waiting") if "num_waiting" in b else nan
    running = column(b, "num_running") if "num_running" in b else nan
    served = np.zeros(len(b))
    for name in ("prefill_tokens", "decode_tokens"):
        if name in b:
            served += column(b, name, 0.0)
    frame = pd.DataFrame({
        "name": names, "steps": 1.0, "busy_s": dur, "waiting_steps": (waiting > 0) * 1.0,
        "waiting_known": np.isfinite(waiting) * 1.0,
        # Each step's count is held for its own duration.
        "waiting_integral": np.nan_to_num(waiting) * dur,
        "running_integral": np.nan_to_num(running) * dur,
        "running_dur": np.where(np.isfinite(running), dur, 0.0),
        "preempt": preemptions(b),
        "tokens": served,
    })
    grouped = frame.groupby("name", sort=True).sum()
    grouped["running_max"] = pd.Series(running, index=names).groupby(level=0).max()
    idx = np.floor((start - grid.t0_s) / grid.width_s).astype(np.int64)
    keep = (idx >= 0) & (idx < grid.count)
    codes, uniques = pd.factorize(names)
    per = np.bincount(codes[keep] * grid.count + idx[keep], weights=served[keep],
                      minlength=len(uniques) * grid.count).reshape(len(uniques), -1)
    return grouped, {str(name): per[k] for k, name in enumerate(uniques)}


def _step_rows(inp: AxisInput, grid: Windows) -> tuple[dict[str, dict[str, float]],
                                                        dict[str, np.ndarray]]:
    """Per-instance sums over the step log, batch by batch, and the tokens each served per
    window (only per-instance sums are held, never the log)."""
    log = inp.steps
    if log is None or not log.has("instance") or log.num_rows == 0:
        return {}, {}
    import pandas as pd

    parts: list[pd.DataFrame] = []
    tokens: dict[str, np.ndarray] = {}
    lo, hi = np.inf, -np.inf
    for b in log.batches(_STEP_COLUMNS):
        grouped, served = _step_batch(b, grid)
        parts.append(grouped)
        if len(b):
            lo, hi = min(lo, float(b["start_s"].min())), max(hi, float(b["end_s"].max()))
        for name, add in served.items():
            tokens[name] = tokens.get(name, np.zeros(grid.count)) + add
    frame = pd.concat(parts)
    frame = frame[frame.index != ""]
    sums = frame.drop(columns="running_max").groupby(level=0, sort=True).sum()
    sums["running_max"] = frame["running_max"].groupby(level=0).max()
    # Busy share: the instance's step time over the cluster's span (first start, last end).
    sums["busy_share"] = sums["busy_s"] / (hi - lo) if hi > lo else np.nan
    return ({str(k): {c: float(v) for c, v in row.items() if pd.notna(v)}
             for k, row in sums.iterrows()}, tokens)


def _labelled(inp: AxisInput, names: tuple[str, ...]) -> pd.DataFrame | None:
    """The samples of the first metric in `names` the export has, with an `inst` column."""
    m = inp.metrics
    if m is None:
        return None
    name = next((n for n in names if n in m.names), None)
    if name is None:
        return None
    steps = () if inp.steps is None or not inp.steps.has("instance") else inp.steps.instances()
    rows = samples_by_instance(m.frame[m.frame["metric"] == name],
                               trace_instance_names(inp.requests, steps))
    return rows if len(rows) else None


def _metric_rows(inp: AxisInput, grid: Windows) -> tuple[dict[str, dict[str, float]],
                                                          dict[str, np.ndarray]]:
    """Per-instance waiting, running, preemptions and tokens per window from labelled series."""
    out: dict[str, dict[str, float]] = {}
    waiting = _labelled(inp, GAUGES["num_waiting"])
    running = _labelled(inp, GAUGES["num_running"])
    for key, rows in (("waiting", waiting), ("running", running)):
        for inst, g in ([] if rows is None else rows.groupby("inst", sort=True)):
            t, v = g["time_s"].to_numpy(), g["value"].to_numpy(dtype=np.float64)
            row = out.setdefault(str(inst), {})
            row[f"{key}_integral"] = float((v[:-1] * np.diff(t)).sum())
            row[f"{key}_mean"] = float(v.mean())
            row[f"{key}_max"] = float(v.max())
            row[f"{key}_steps"] = float((v > 0).sum())
            row["samples"] = float(v.size)
    tokens: dict[str, np.ndarray] = {}
    for key in ("prompt_tokens", "generation_tokens", "preemptions"):
        rows = _labelled(inp, COUNTERS[key])
        for inst, g in ([] if rows is None else rows.groupby("inst", sort=True)):
            t, v = g["time_s"].to_numpy(), g["value"].to_numpy(dtype=np.float64)
            delta = np.diff(v)
            delta = np.where(delta < 0, v[1:], delta)  # a reset starts again from zero
            row = out.setdefault(str(inst), {})
            if key == "preemptions":
                row["preempt"] = float(delta.sum())
                continue
            row["tokens"] = row.get("tokens", 0.0) + float(delta.sum())
            idx = np.clip(np.floor((t[1:] - grid.t0_s) / grid.width_s).astype(np.int64), 0,
                          grid.count - 1)
            add = np.bincount(idx, weights=delta, minlength=grid.count)
            tokens[str(inst)] = tokens.get(str(inst), np.zeros(grid.count)) + add
    return out, tokens


def _rows(inp: AxisInput, timing: RequestTiming, grid: Windows
          ) -> tuple[str, list[InstanceQueue], dict[str, np.ndarray], float | None, bool]:
    """(source, per-instance rows, tokens per window per instance, seat cap, inferred)."""
    table = _table_rows(inp, timing)
    steps, step_tokens = _step_rows(inp, grid)
    metrics, metric_tokens = _metric_rows(inp, grid)
    source, names = next(((s, tuple(rows)) for s, rows in
                          (("requests", table), ("steps", steps), ("metrics", metrics))
                          if len(rows) > 1), ("", ()))
    seen = [r.get("running_max") for src in (steps, metrics, table) for r in src.values()]
    most = max((v for v in seen if v is not None and np.isfinite(v)), default=None)
    cap = (float(inp.settings.max_num_seqs) if inp.settings.max_num_seqs
           else most if most else None)
    total_work = sum(r.get("work", 0.0) for r in table.values()) or \
        sum(r.get("tokens", 0.0) for r in (steps or metrics).values())
    rows = [_row(name, table.get(name, {}), steps.get(name, {}), metrics.get(name, {}),
                 total_work, cap) for name in names]
    queue_total = sum(r.queue_seconds for r in rows if r.queue_seconds is not None) or None
    preempted = sum(r.preemptions for r in rows if r.preemptions is not None) or None
    rows = [_with_share(r, queue_total, preempted) for r in rows]
    tokens = step_tokens if any(n in step_tokens for n in names) else metric_tokens
    return source, rows, tokens, cap, not inp.settings.max_num_seqs


def _row(name: str, table: Mapping[str, float], steps: Mapping[str, float],
         metrics: Mapping[str, float], total_work: float, cap: float | None) -> InstanceQueue:
    """One instance's row: each measure from the first source that has it."""
    work = table.get("work", steps.get("tokens", metrics.get("tokens")))
    queue = table.get("queue")
    if queue is None:
        queue = steps.get("waiting_integral") if steps.get("waiting_known") else \
            metrics.get("waiting_integral")
    waiting_share = (ratio(steps.get("waiting_steps"), steps.get("waiting_known"))
                     if steps.get("waiting_known") else
                     ratio(metrics.get("waiting_steps"), metrics.get("samples"))
                     if "waiting_steps" in metrics else None)
    running = (ratio(steps.get("running_integral"), steps.get("running_dur"))
               if steps.get("running_dur") else metrics.get("running_mean",
                                                             table.get("running_mean")))
    preempt = steps.get("preempt", table.get("preempt", metrics.get("preempt")))
    return InstanceQueue(
        instance=name, requests=int(table["one"]) if "one" in table else None,
        work_share=ratio(work, total_work) if work is not None else None,
        queue_seconds=queue, queue_share_of_ttft=ratio(table.get("q_both"),
                                                       table.get("ttft_both")),
        waiting_share=waiting_share, busy_share=steps.get("busy_share"), running_mean=running,
        seat_fill=ratio(running, cap) if running is not None else None, preemptions=preempt)


def _with_share(row: InstanceQueue, queue_s: float | None,
                preempted: float | None) -> InstanceQueue:
    """The row with its shares of the cluster's queue seconds and preemptions."""
    return replace(row, queue_share=ratio(row.queue_seconds, queue_s),
                   preemption_share=ratio(row.preemptions, preempted))


def _service_rate(timing: RequestTiming, grid: Windows, names: tuple[str, ...],
                  codes: np.ndarray | None, tokens: Mapping[str, np.ndarray]) -> float | None:
    """μ: the most tokens/s one instance served in a window (its steps or token counters,
    else its requests' work spread over their service time)."""
    peaks = [float(tokens[n].max()) / grid.width_s for n in names if n in tokens]
    if not peaks and codes is not None and timing.finish is not None:
        begin = timing.scheduled if timing.scheduled is not None else timing.arrival
        edges = grid.edges()
        for k in range(len(names)):
            sel = codes == k
            done = spread_work(edges, begin[sel], timing.finish[sel], timing.work[sel])
            peaks.append(float(done.max()) / grid.width_s if done.size else 0.0)
    best = max(peaks, default=0.0)
    return best if best > 0 else None


def _modelled_queue_s(arrival: np.ndarray, work: np.ndarray, rate: float,
                      codes: np.ndarray | None, shares: np.ndarray) -> float:
    """Σ modelled waits with each request on its instance (`codes`), or split by `shares`."""
    if codes is not None:
        return float(sum(fcfs_waits_s(arrival[codes == k], work[codes == k], rate).sum()
                         for k in range(shares.size)))
    return float(sum(s * fcfs_waits_s(arrival, work * s, rate).sum() for s in shares if s > 0))


def _routing(timing: RequestTiming, n: int, codes: np.ndarray | None,
             rows: list[InstanceQueue], rate: float | None
             ) -> tuple[float | None, float | None, float | None, str | None]:
    """(modelled queue s as routed, vanish share least-loaded, even, what the routing was)."""
    shares = np.array([r.work_share or 0.0 for r in rows])
    if rate is None or (codes is None and not shares.sum() > 0):
        return None, None, None, None
    # Every model sees the same requests: those on a named instance, in arrival order.
    known = np.ones(timing.arrival.size, dtype=bool) if codes is None else codes >= 0
    order = np.flatnonzero(known)[np.argsort(timing.arrival[known], kind="stable")]
    arrival = np.ascontiguousarray(timing.arrival[order], dtype=np.float64)
    work = np.ascontiguousarray(timing.work[order], dtype=np.float64)
    routed = _modelled_queue_s(arrival, work, rate, None if codes is None else codes[order],
                               shares / max(shares.sum(), 1e-300))
    even = _modelled_queue_s(arrival, work, rate, np.arange(arrival.size) % n, shares)
    least = float(least_work_waits_s(arrival, work, float(rate), n).sum())
    routed_by = "work shares" if codes is None else "instance column"
    if not routed > 0:
        return routed, None, None, routed_by
    return (routed, float(np.clip(1 - least / routed, 0, 1)),
            float(np.clip(1 - even / routed, 0, 1)), routed_by)


def measure_load_balance(inp: AxisInput, timing: RequestTiming,
                         grid: Windows) -> LoadBalance | None:
    """The per-instance queue and the routing estimate, or None for fewer than 2 instances."""
    if inp.has("prefill_instance") and inp.has("decode_instance"):
        return None  # disaggregated: prefill and decode instances do different work
    source, rows, tokens, cap, inferred = _rows(inp, timing, grid)
    if len(rows) < 2:
        return None
    import pandas as pd

    names = tuple(r.instance for r in rows)
    codes = (np.asarray(pd.Categorical(inp.requests["instance"].astype("string"),
                                       categories=list(names)).codes, dtype=np.int64)
             if source == "requests" else None)
    rate = _service_rate(timing, grid, names, codes, tokens)
    routed, least, even, routed_by = _routing(timing, len(names), codes, rows, rate)
    queued = max(rows, key=lambda r: (r.queue_seconds or 0.0, r.waiting_share or 0.0))
    others = [r for r in rows if r is not queued and r.seat_fill is not None]
    idle = min(others, key=lambda r: r.seat_fill or 0.0) if others else None
    total = timing.queue_total
    if total is None:
        total = sum(r.queue_seconds for r in rows if r.queue_seconds is not None) or None
    return LoadBalance(
        source=source, instances=tuple(rows), seat_cap=cap, seat_cap_inferred=inferred,
        queued_instance=queued.instance if (queued.queue_seconds or queued.waiting_share)
        else None,
        idle_instance=None if idle is None else idle.instance,
        service_rate_tokens_per_s=rate, queue_seconds_total=total,
        modelled_queue_seconds=routed, vanish_share_least_loaded=least,
        vanish_share_even=even,
        queue_seconds_vanish_least_loaded=None if least is None or total is None
        else least * total,
        queue_seconds_vanish_even=None if even is None or total is None else even * total,
        routed_by=routed_by,
        basis=(f"FCFS queue per instance at μ = {rate:.4g} tokens/s (the busiest "
               f"instance's peak window), routed as observed ({routed_by or 'unknown'}), "
               "round-robin, and least-loaded (to the instance with the least work ahead); "
               "vanish share = 1 − modelled / as routed, times the measured queue seconds")
        if rate else ("no modelled queue: the service rate μ is unknown (no request's work "
                      "lies in a window with timing), so the routings are not priced"),
    )


def modelled_queue_s_for(arrival_s: np.ndarray, work: np.ndarray, rate: float,
                         codes: np.ndarray, instances: int) -> float:
    """Σ modelled waits (as `measure_load_balance` models them) with each request on the
    instance `codes` gives it, rows in any order: another router's assignment priced alike."""
    order = np.argsort(arrival_s, kind="stable")
    return _modelled_queue_s(arrival_s[order], work[order], rate, codes[order],
                             np.zeros(instances))
