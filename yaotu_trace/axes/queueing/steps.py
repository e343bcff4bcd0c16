"""The queueing axis' pass over the step log: busy and idle time, idle-while-waiting, batch
shape, KV usage, the waiting count and the tokens served per window.

The log is read in record batches (`yaotu_trace.data.steplog`): only each instance's last step
is carried from one batch to the next, and sums are taken in fixed blocks (`order_stats`), so
the numbers do not depend on how the log is cut into batches, or whether it is on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from yaotu_trace.axes.base import AxisInput, ratio
from yaotu_trace.axes.queueing.metrics import Windows
from yaotu_trace.data.handoff import decode_queue_s, handed_off
from yaotu_trace.data.order_stats import BlockSum, Summary, summarize
from yaotu_trace.data.report import PERCENTILES
from yaotu_trace.data.steplog import (
    KV_USAGE_COLUMNS,
    PREEMPTION_COLUMNS,
    InstanceIds,
    StepLog,
    column,
    kv_usage,
    kv_usage_summary,
    preemptions,
)

if TYPE_CHECKING:
    import pandas as pd

# Percentiles of per-step samples: the Distribution's and the P75 the rules compare.
STEP_PERCENTILES = (*PERCENTILES, 75)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStats:
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
    # Per window of the load grid (None without one): `WindowBins`.
    bins: WindowBins | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowBins:
    """The step log per instance and window of the load grid, for judging causes where each
    instance's queue is (`windows`): arrays of shape (rows, windows), one row per instance
    named in `instances`, or one row summed over the cluster (`instances` == ("all",)) when
    instances × windows exceeds `MAX_CELLS`.

    A step counts in the window its start lies in, an idle gap in the window it starts in;
    `steps` and the running, token and KV sums hold only the steps that leave requests
    waiting (num_waiting > 0; every step when the log has no num_waiting); `covered_s` is the
    time each window lies inside the instance's [first start, last end], the denominator of
    busy and idle shares. `waiting_at_edges` (rows, windows + 1) is the num_waiting of the
    instance's last step started at or before each edge (None without num_waiting).
    `admission_steps` counts the steps that leave requests waiting and carry the admission
    signal (`head_blocks_needed`, `kv_blocks_free`), `kv_blocked_steps` those of them whose
    first waiting request needed more KV blocks than were free (None without the signal).
    `held_s` is the queue those steps held: Σ num_waiting × duration (request-seconds; None
    without num_waiting), which weighs each instance's means against the others'.
    """

    instances: tuple[str, ...]
    covered_s: np.ndarray
    busy_s: np.ndarray
    idle_waiting_s: np.ndarray | None
    steps: np.ndarray
    running_sum: np.ndarray | None
    tokens_sum: np.ndarray | None
    kv_usage_sum: np.ndarray | None
    waiting_at_edges: np.ndarray | None
    admission_steps: np.ndarray | None = None
    kv_blocked_steps: np.ndarray | None = None
    held_s: np.ndarray | None = None


# Instance × window cells kept per instance; beyond it the sums are the cluster's (one row).
MAX_CELLS = 1 << 20


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


# The unit of each per-window sum: 1 ns of time, 1e-9 of a usage ratio, whole counts.
QUANTUM = {"busy_s": 1e-9, "idle_waiting_s": 1e-9, "kv_usage_sum": 1e-9, "steps": 1.0,
           "running_sum": 1.0, "tokens_sum": 1.0, "admission_steps": 1.0,
           "kv_blocked_steps": 1.0, "held_s": 1e-9}


def _exact_bincount(cells: np.ndarray, values: np.ndarray, shape: tuple[int, int],
                    quantum: float) -> np.ndarray:
    """Sums of `values` per flat (row, window) cell, in integer units of `quantum`: integer
    sums are exact, so they do not depend on how the step log is cut into batches."""
    units = np.round(np.nan_to_num(values) / quantum)
    # NOTE: whole numbers sum exactly in float64 below 2^53 (104 days in ns per window and
    # batch), so bincount's float sums are the integer sums.
    out = np.bincount(cells, weights=units, minlength=shape[0] * shape[1])
    return out.astype(np.int64).reshape(shape)


def _tokens(b: pd.DataFrame) -> np.ndarray:
    tokens = np.zeros(len(b))
    for name in ("prefill_tokens", "decode_tokens"):
        if name in b.columns:
            tokens += column(b, name, 0.0)
    return tokens


class _StepPass:
    """One pass over the step log's batches: busy time, idle gaps while requests wait, the
    duration-weighted waiting count, the span and the tokens served per window.

    Rows come in start order, so each instance's steps do too: only the last step of each
    instance is carried across batches (`_PerInstance`).
    """

    def __init__(self, inp: AxisInput, log: StepLog, windows: Windows | None) -> None:
        arrival = inp.floats("arrival_s")
        scheduled = inp.floats("scheduled_s")
        # Requests queued at a time t, from the request table, for instances without
        # num_waiting: (sorted arrivals, sorted schedules), or None without the table.
        self.queued_table: tuple[np.ndarray, np.ndarray] | None = None
        if arrival is not None and scheduled is not None:
            ok = np.isfinite(scheduled) & (scheduled >= arrival)
            self.queued_table = (np.sort(arrival[ok]), np.sort(scheduled[ok]))
        self.ids = InstanceIds()
        self.has_waiting = inp.step_has("num_waiting")
        # Instances whose steps report num_waiting use it; the others the request table.
        self.reports = (_instances_with(log, "num_waiting", self.ids)
                        if self.has_waiting and log.has("instance")
                        and not log.complete("num_waiting") else None)
        self.has_tokens = inp.step_has("prefill_tokens") or inp.step_has("decode_tokens")
        self.has_running = inp.step_has("num_running")
        self.has_kv = inp.step_has_kv_usage()
        self.has_admission = (inp.step_has("head_blocks_needed")
                              and inp.step_has("kv_blocks_free"))
        self.windows = windows
        self.state = _PerInstance()
        self.busy, self.idle_wait, self.waiting_weighted = BlockSum(), BlockSum(), BlockSum()
        self.waiting_steps = 0
        self.lo, self.hi = np.inf, -np.inf
        self.achieved = (np.zeros(windows.count) if windows is not None and self.has_tokens
                         else None)
        self.preempted = False
        self.n = windows.count if windows is not None else 0
        # Per instance (rows) and window: sums in integer units of `QUANTUM` (exact, so the
        # same whatever the batches) and num_waiting as a difference array over the edges.
        self.per_instance = True
        self.bin = {name: np.zeros((0, self.n), dtype=np.int64) for name in QUANTUM}
        self.waiting_diff = np.zeros((0, self.n + 2))

    def feed(self, b: pd.DataFrame) -> None:
        """Add one batch of steps."""
        state = self.state
        start, end = column(b, "start_s"), column(b, "end_s")
        inst = self.ids.codes(b)
        state.grow(len(self.ids))
        prev, order, bounds, lasts = _previous(inst)
        inside = prev >= 0
        p = np.where(inside, prev, 0)
        has_prev = inside | state.seen[inst]
        prev_start = np.where(inside, start[p], state.last_start[inst])
        prev_end = np.where(inside, end[p], state.last_end[inst])
        waiting = (column(b, "num_waiting", 0.0) if "num_waiting" in b.columns
                   else np.zeros(len(b)))
        prev_waiting = np.where(inside, waiting[p], state.last_waiting[inst])
        reporting = (np.full(len(b), self.has_waiting) if self.reports is None
                     else self.reports[inst])
        self.busy.add(end - start)
        gap = np.clip(start - prev_end, 0.0, None)
        from_log = has_prev & reporting
        idle = from_log & (prev_waiting > 0)
        from_table = has_prev & ~reporting
        if self.queued_table is not None and from_table.any():
            sorted_arrival, sorted_scheduled = self.queued_table
            rows = np.flatnonzero(from_table)
            t = prev_end[rows]
            queued = (np.searchsorted(sorted_arrival, t, side="right")
                      - np.searchsorted(sorted_scheduled, t, side="right"))
            idle[rows[queued > 0]] = True
        self.idle_wait.add(gap[idle])
        if self.windows is not None:
            row = self._rows(inst)
            self._bin(b, row, start, prev_end, gap, idle & has_prev)
            self._hold_waiting(row[from_log], prev_start[from_log], start[from_log],
                               prev_waiting[from_log])
        # Each step's count holds until the next step of its instance starts.
        self.waiting_weighted.add((prev_waiting * (start - prev_start))[from_log])
        self.waiting_steps += int(np.count_nonzero(waiting > 0))

        groups = inst[lasts]
        state.first_start[groups] = np.minimum(state.first_start[groups],
                                               np.minimum.reduceat(start[order], bounds))
        state.max_end[groups] = np.maximum(state.max_end[groups],
                                           np.maximum.reduceat(end[order], bounds))
        state.seen[groups] = True
        state.last_start[groups], state.last_end[groups] = start[lasts], end[lasts]
        state.last_waiting[groups] = waiting[lasts]
        self.lo = np.fmin(self.lo, np.fmin.reduce(start))
        self.hi = np.fmax(self.hi, np.fmax.reduce(end))
        self._served(b, start)
        self.preempted = self.preempted or bool((preemptions(b) > 0).any())

    def _window_of(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(window index, inside the grid) of each time."""
        assert self.windows is not None
        w = self.windows
        idx = np.floor((t - w.t0_s) / w.width_s).astype(np.int64)
        return idx, (idx >= 0) & (idx < w.count)

    def _rows(self, inst: np.ndarray) -> np.ndarray:
        """Each step's row: its instance, until instances × windows exceeds MAX_CELLS; then
        every row is summed into one, the cluster's."""
        if self.per_instance and len(self.ids) * (self.n + 2) > MAX_CELLS:
            self.per_instance = False
            self.bin = {k: v.sum(axis=0, keepdims=True) for k, v in self.bin.items()}
            self.waiting_diff = self.waiting_diff.sum(axis=0, keepdims=True)
        rows = len(self.ids) if self.per_instance else 1
        extra = rows - self.waiting_diff.shape[0]
        if extra > 0:
            self.bin = {k: np.vstack([v, np.zeros((extra, self.n), dtype=np.int64)])
                        for k, v in self.bin.items()}
            self.waiting_diff = np.vstack([self.waiting_diff, np.zeros((extra, self.n + 2))])
        return inst if self.per_instance else np.zeros_like(inst)

    def _bin(self, b: pd.DataFrame, row: np.ndarray, start: np.ndarray, prev_end: np.ndarray,
             gap: np.ndarray, idle: np.ndarray) -> None:
        """The batch's steps and idle gaps into the windows they start in, per row."""
        n = self.n
        shape = self.waiting_diff.shape[0], n
        idx, keep = self._window_of(start)
        cells = row[keep] * n + idx[keep]
        end = column(b, "end_s")

        def add(name: str, values: np.ndarray) -> None:
            self.bin[name] += _exact_bincount(cells, values[keep], shape, QUANTUM[name])

        add("busy_s", end - start)
        # The batch is judged at the steps that leave requests waiting (all steps when the
        # log does not count them): what the engine ran while it could not admit more.
        left = (column(b, "num_waiting", 0.0) > 0 if "num_waiting" in b.columns
                else np.ones(len(b), dtype=bool)).astype(np.float64)
        add("steps", left)
        if "num_waiting" in b.columns:
            add("held_s", column(b, "num_waiting", 0.0) * np.maximum(end - start, 0.0))
        if "num_running" in b.columns:
            add("running_sum", column(b, "num_running", 0.0) * left)
        add("tokens_sum", _tokens(b) * left)
        if self.has_kv:
            add("kv_usage_sum", np.nan_to_num(kv_usage(b)) * left)
        if "head_blocks_needed" in b.columns and "kv_blocks_free" in b.columns:
            need = column(b, "head_blocks_needed")
            free = column(b, "kv_blocks_free")
            signal = (left > 0) & np.isfinite(need) & np.isfinite(free)
            add("admission_steps", signal.astype(np.float64))
            add("kv_blocked_steps", (signal & (need > free)).astype(np.float64))
        gap_idx, gap_keep = self._window_of(prev_end)
        gap_keep &= idle
        self.bin["idle_waiting_s"] += _exact_bincount(
            row[gap_keep] * n + gap_idx[gap_keep], gap[gap_keep], shape,
            QUANTUM["idle_waiting_s"])

    def _hold_waiting(self, row: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      waiting: np.ndarray) -> None:
        """Count `waiting` at each edge in [lo, hi) of its row: a step's num_waiting holds from
        its start until the next step of its instance starts."""
        edges = cast(Windows, self.windows).edges()
        width = self.n + 2
        first = row * width + np.searchsorted(edges, lo, side="left")
        last = row * width + np.searchsorted(edges, hi, side="left")
        size = self.waiting_diff.size
        # num_waiting counts are whole numbers: these float sums are exact in any order.
        diff = (np.bincount(first, weights=waiting, minlength=size)
                - np.bincount(last, weights=waiting, minlength=size))
        self.waiting_diff += diff.reshape(self.waiting_diff.shape)

    def bins(self) -> WindowBins | None:
        """The per-window sums, once every batch is in (after `totals`)."""
        w = self.windows
        if w is None:
            return None
        edges = w.edges()
        state, names = self.state, self.ids.names
        self._rows(np.zeros(0, dtype=np.int64))
        covered = np.zeros((len(names), w.count))
        for i in range(len(names)):
            lo, hi = state.first_start[i], state.max_end[i]
            covered[i] = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0,
                                 None)
        if not self.per_instance:
            covered = covered.sum(axis=0, keepdims=True)
        waiting = (np.cumsum(self.waiting_diff, axis=1)[:, : edges.size] if self.has_waiting
                   else None)
        b = {name: values * QUANTUM[name] for name, values in self.bin.items()}
        return WindowBins(
            instances=tuple(names) if self.per_instance else ("all",),
            covered_s=covered, busy_s=b["busy_s"],
            idle_waiting_s=b["idle_waiting_s"] if self.has_waiting else None,
            steps=b["steps"], running_sum=b["running_sum"] if self.has_running else None,
            tokens_sum=b["tokens_sum"] if self.has_tokens else None,
            kv_usage_sum=b["kv_usage_sum"] if self.has_kv else None,
            waiting_at_edges=waiting,
            admission_steps=b["admission_steps"] if self.has_admission else None,
            kv_blocked_steps=b["kv_blocked_steps"] if self.has_admission else None,
            held_s=b["held_s"] if self.has_waiting else None)

    def _served(self, b: pd.DataFrame, start: np.ndarray) -> None:
        """Tokens of the batch's steps into the window each starts in."""
        windows = self.windows
        if self.achieved is None or windows is None:
            return
        idx = np.floor((start - windows.t0_s) / windows.width_s).astype(np.int64)
        keep = (idx >= 0) & (idx < windows.count)
        # Token counts are whole numbers: these sums are exact in any order.
        self.achieved += np.bincount(idx[keep], weights=_tokens(b)[keep],
                                     minlength=windows.count)

    def totals(self) -> dict[str, object]:
        """Wall, busy and idle-while-waiting time per instance, summed, once every batch is in."""
        state, names = self.state, self.ids.names
        reported = (np.full(len(names), self.has_waiting) if self.reports is None
                    else self.reports)
        wall = 0.0
        tails = []
        for i in sorted(range(len(names)), key=names.__getitem__):
            wall += float(state.max_end[i] - state.first_start[i])
            if reported[i]:  # the last step's count holds until its own end
                tails.append(state.last_waiting[i] * (state.last_end[i] - state.last_start[i]))
                if self.windows is not None:  # and, as a gauge, until the log ends
                    row = self._rows(np.array([i], dtype=np.int64))
                    self._hold_waiting(row, state.last_start[i:i + 1], np.array([np.inf]),
                                       state.last_waiting[i:i + 1])
        self.waiting_weighted.add(np.asarray(tails, dtype=np.float64))
        known = self.queued_table is not None or bool(reported.all())
        idle_s = self.idle_wait.total()
        return {
            "wall_s": wall,
            "busy_fraction": ratio(self.busy.total(), wall),
            "idle_waiting_s": idle_s if known else None,
            "idle_waiting_fraction": ratio(idle_s, wall) if known else None,
            "instances": tuple(names),
            "achieved_tokens": self.achieved,
            "preempted": self.preempted,
        }


def step_stats(inp: AxisInput, windows: Windows | None = None) -> StepStats:
    """Busy and idle time, idle-while-waiting, batch shape, KV usage and the tokens served per
    window, from the step log in passes over its record batches.

    Sums are taken in fixed blocks (`order_stats`), so the numbers do not depend on how the log
    is cut into batches, or whether it is on disk.
    """
    log = inp.steps
    if log is None or log.num_rows == 0:
        return StepStats()
    one = _StepPass(inp, log, windows)
    for b in log.batches(("instance", "num_waiting", "prefill_tokens", "decode_tokens",
                          *PREEMPTION_COLUMNS, "num_running", *KV_USAGE_COLUMNS,
                          "head_blocks_needed", "kv_blocks_free")):
        one.feed(b)
    stats = one.totals()
    stats["bins"] = one.bins()
    if one.has_tokens:
        stats["tokens"] = summarize(
            log.reader(("prefill_tokens", "decode_tokens"), _tokens), STEP_PERCENTILES)
    if inp.step_has("num_running"):
        stats["running"] = summarize(
            log.reader(("num_running",), lambda b: column(b, "num_running")),
            STEP_PERCENTILES)
    if inp.step_has_kv_usage():
        stats["kv_usage_p75"] = kv_usage_summary(log).percentiles.get(75)
    if one.has_waiting:
        lo, hi = one.lo, one.hi
        stats["waiting_share"] = one.waiting_steps / log.num_rows
        # NOTE: a cluster's waiting count is the sum over its instances at each instant, so the
        # per-instance integrals are summed and divided by the cluster's span, not Σ walls.
        stats["waiting_mean"] = ratio(one.waiting_weighted.total(), float(hi - lo))
        stats["waiting_span"] = (float(lo), float(hi))
    return StepStats(**stats)  # type: ignore[arg-type]


def _first_starts(log: StepLog, arrival: np.ndarray, rows: np.ndarray,
                  own: np.ndarray | None) -> np.ndarray:
    """The first step start at or after the arrival of each request in `rows` (inf if none),
    among the steps of the instance `own` names for it (None: among every step), in one pass
    over the log. Requests are in memory, each queue in arrival order; steps are streamed."""
    import pandas as pd

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


def sampled_waiting_s(inp: AxisInput, st: StepStats, arrival: np.ndarray,
                       scheduled: np.ndarray, inside: np.ndarray) -> float:
    """Σ waiting seconds a step log sampled after admission shows: from the first step start at
    or after each arrival (on the request's instance when both tables name instances, its
    prefill instance when it was handed off), plus each handed-off request's decode queue
    (decode instances step every few milliseconds, so their count sees it whole)."""
    if not st.instances or inp.steps is None:
        return float("nan")
    names = None
    if inp.has("instance") and set(st.instances) != {"all"}:
        names = inp.requests["instance"].fillna("").astype(str).to_numpy()
        if inp.has("prefill_instance"):
            # A handed-off request queued for its prefill instance, whatever `instance` says.
            split = handed_off(inp.requests)
            prefill = inp.requests["prefill_instance"].fillna("").astype(str).to_numpy()
            names = np.where(split, prefill, names)
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
    return total + float(decode_queue_s(inp.requests)[inside].sum())

