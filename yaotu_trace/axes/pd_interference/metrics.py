"""The pd_interference axis' measurements (see the package docstring for the definitions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.axes.base import AxisInput, Evidence, fact, measured
from yaotu_trace.axes.pd_interference.placement import PlacementMetrics
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.data.steplog import column as step_column
from yaotu_trace.data.token_times import (
    GapSummary,
    trace_gap_summary,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True, kw_only=True)
class InterferenceMetrics:
    """The interference axis' measurements (None when their inputs are absent)."""

    requests_with_tokens: int | None
    gaps: int | None
    tbt_s: Distribution | None
    tbt_p25_s: float | None
    median_decode_step_s: float | None
    median_step_source: str | None
    stall_factor: float
    stall_threshold_s: float | None
    stalls: int | None
    stalls_with_prefill: int | None
    prefill_coincidence: float | None
    coincidence_source: str | None
    decode_seconds_total: float | None
    decode_seconds_lost: float | None
    interference_share: float | None
    stall_seconds_unexplained: float | None
    metrics_itl_mean_s: float | None = None
    placement: PlacementMetrics | None = None
    # Several instances: each one's share of the stalls (request table's instance column).
    stall_share_by_instance: dict[str, float] | None = None
    # KV the engines moved between instances, as their telemetry counts it: the KV
    # connector's transfers (count, mean ms, mean MB) and the share of prompt tokens that
    # arrived by transfer instead of being computed (vLLM's prompt_tokens_by_source).
    engine_kv_transfers: float | None = None
    engine_kv_transfer_mean_ms: float | None = None
    engine_kv_transfer_mean_mb: float | None = None
    external_kv_token_share: float | None = None

    def headline(self) -> tuple[Evidence, ...]:
        """The measurements shown as the axis' evidence when no rule fired on it (with telemetry
        alone, what it measures)."""
        return measured(
            (
                fact("interference_share", self.interference_share, "ratio"),
                fact("stalls", self.stalls, "gaps"),
                fact("prefill_coincidence", self.prefill_coincidence, "ratio"),
            ),
            (
                fact("metrics_itl_mean_s", self.metrics_itl_mean_s, "s"),
            ),
        )


def instances_of(inp: AxisInput) -> np.ndarray:
    req = inp.requests
    for column in ("decode_instance", "instance"):
        if inp.has(column):
            return req[column].fillna("").astype(str).to_numpy()
    return np.full(len(req), "")


def gap_summary_of(inp: AxisInput) -> GapSummary:
    """The gap summary, shared with the profile."""
    return trace_gap_summary(inp.trace)


def decode_only_s(b: pd.DataFrame) -> np.ndarray:
    """Durations of the batch's decode-only steps (prefill_tokens 0 or missing)."""
    decode = step_column(b, "prefill_tokens", 0.0) == 0
    return (step_column(b, "end_s") - step_column(b, "start_s"))[decode]


class _Overlap:
    """Which of a group's stalls overlap one of its prefill steps (step start < stall end and
    step end > stall start), fed the steps batch by batch in start order.

    A stall joins the active set once a step has ended after its start, and leaves it when it
    is hit or when the steps start at or after its end (later ones start later still), so the
    work per batch follows the stalls open at that time, not all stalls.
    """

    def __init__(self, rows: np.ndarray, gap_start: np.ndarray) -> None:
        self.pending = rows[np.argsort(gap_start[rows], kind="stable")]
        self.admitted = 0
        self.active = np.empty(0, dtype=np.int64)
        self.latest_end = -np.inf

    def feed(self, start: np.ndarray, end: np.ndarray, gap_start: np.ndarray,
             gap_end: np.ndarray, hit: np.ndarray, last_start: float) -> None:
        self.latest_end = float(np.fmax(self.latest_end, np.fmax.reduce(end)))
        upto = int(np.searchsorted(gap_start[self.pending], self.latest_end, side="left"))
        if upto > self.admitted:
            self.active = np.concatenate([self.active, self.pending[self.admitted:upto]])
            self.admitted = upto
        if not self.active.size:
            return
        idx = np.searchsorted(start, gap_end[self.active], side="left") - 1
        ok = idx >= 0
        ends = np.maximum.accumulate(end)
        now = np.zeros(self.active.size, dtype=bool)
        now[ok] = ends[idx[ok]] > gap_start[self.active[ok]]
        hit[self.active[now]] = True
        self.active = self.active[~now & (gap_end[self.active] > last_start)]


def prefill_overlap(log: StepLog, gap_start: np.ndarray, gap_end: np.ndarray,
                     gap_inst: np.ndarray, labels: np.ndarray,
                     by_instance: bool) -> np.ndarray | None:
    """Per stall, whether a prefill step overlaps it on its instance (or on any instance when
    not matched by instance), in one pass over the log; None when the log has no prefill step.

    Both matchings are kept when instances may be matched: steps are matched by instance only
    if some prefill step names one, which is known at the end of the pass.
    """
    import pandas as pd

    n = gap_start.size
    every = _Overlap(np.arange(n), gap_start)
    hit_any = np.zeros(n, dtype=bool)
    hit_own = np.zeros(n, dtype=bool)
    own: dict[int, _Overlap] = {}
    if by_instance:
        order = np.argsort(gap_inst, kind="stable")
        bounds = np.searchsorted(gap_inst[order], np.arange(labels.size + 1))
        own = {code: _Overlap(order[bounds[code]:bounds[code + 1]], gap_start)
               for code in range(labels.size) if bounds[code + 1] > bounds[code]}
    prefill_steps = named = 0
    for b in log.batches(("prefill_tokens", "instance")):
        sel = step_column(b, "prefill_tokens", 0.0) > 0
        if not sel.any():
            continue
        start, end = step_column(b, "start_s")[sel], step_column(b, "end_s")[sel]
        last_start = float(step_column(b, "start_s")[-1])
        prefill_steps += start.size
        every.feed(start, end, gap_start, gap_end, hit_any, last_start)
        if not by_instance:
            continue
        instance = b["instance"][sel]
        named += int(instance.notna().sum())
        local, uniques = pd.factorize(instance, use_na_sentinel=True)
        names = np.array([*(str(u) for u in uniques), ""], dtype=object)  # missing: ""
        at = np.searchsorted(labels, names)
        found = (at < labels.size) & (labels[np.minimum(at, labels.size - 1)] == names)
        code = np.where(found, at, -1)[local]  # -1: no request ran on this instance
        grouped = np.argsort(code, kind="stable")
        cuts = np.flatnonzero(np.diff(code[grouped])) + 1
        for rows in np.split(grouped, cuts):
            c = int(code[rows[0]])
            if c in own:
                own[c].feed(start[rows], end[rows], gap_start, gap_end, hit_own, last_start)
    if not prefill_steps:
        return None
    return hit_own if by_instance and named else hit_any
