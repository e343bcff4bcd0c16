"""Prefill/decode interference axis: decode time lost to other requests' prefill (§3.1, D1–D5).

Metrics (units in the names):

- inter-token gaps (s): consecutive differences of each request's token_times_s (the first
  token onwards); decode_seconds_total = Σ gaps over all requests.
- median_decode_step_s: the median duration (end_s − start_s) of decode-only steps
  (prefill_tokens = 0) in the step log, else the median inter-token gap.
- stall: a gap > stall_factor × median_decode_step_s (the `k` of cost-model §3.1).
- a stall coincides with prefill when, on the same instance, a step with prefill_tokens > 0
  overlaps the gap (step log), or else another request's first token (first_token_s, or its
  first entry of token_times_s) falls inside the gap — its prefill ran then. Without an
  instance column all requests are taken as co-located.
- prefill_coincidence = stalls coinciding with prefill / stalls (ratio).
- decode_seconds_lost = Σ over coinciding stalls of (gap − median_decode_step_s) (s): each
  decoding request loses the excess of its gap, so this is Σ_k stall_k · B_k of §3.1.
- interference_share = decode_seconds_lost / decode_seconds_total (ratio); the axis score.
- tbt_s: distribution of the gaps; tbt_p25_s their 25th percentile.
- metrics_itl_mean_s: mean of vllm:inter_token_latency_seconds (or SGLang's) over the export (s);
  context only — a mean cannot show stalls or their coincidence with prefill.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    RuleHit,
    Source,
    Status,
    check,
    fact,
    finite,
    ratio,
    status_from,
)
from yaotu_trace.data.order_stats import summarize
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.data.steplog import column as step_column
from yaotu_trace.data.token_times import (
    GapSummary,
    gap_summary,
    has_token_times,
    stalls,
    trace_gap_summary,
)
from yaotu_trace.diagnosis.rules import SEVERITY_OF
from yaotu_trace.diagnosis.thresholds import Thresholds


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


def _instances(inp: AxisInput) -> np.ndarray:
    req = inp.requests
    for column in ("decode_instance", "instance"):
        if inp.has(column):
            return req[column].fillna("").astype(str).to_numpy()
    return np.full(len(req), "")


def _gap_summary(inp: AxisInput) -> GapSummary:
    """The gap summary, shared with the profile when the rows are the trace's own."""
    if inp.trace is not None and inp.trace.requests is inp.requests:
        return trace_gap_summary(inp.trace)
    return gap_summary(inp.requests, None)


def analyze_pd_interference(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure decode stalls and how many of them line up with other requests' prefill."""
    req = inp.requests
    notes: list[str] = []
    k = float(t.stall_factor)
    empty = InterferenceMetrics(
        requests_with_tokens=None, gaps=None, tbt_s=None, tbt_p25_s=None,
        median_decode_step_s=None, median_step_source=None, stall_factor=k,
        stall_threshold_s=None, stalls=None, stalls_with_prefill=None,
        prefill_coincidence=None, coincidence_source=None, decode_seconds_total=None,
        decode_seconds_lost=None, interference_share=None, stall_seconds_unexplained=None,
    )
    itl_mean = None if inp.metrics is None else inp.metrics.histogram_mean("itl_s")
    if itl_mean is not None:
        empty = replace(empty, metrics_itl_mean_s=itl_mean)
    # Token times left on disk belong to the trace's own rows only.
    lazy = (inp.trace.lazy if inp.trace is not None and inp.trace.requests is req else None)
    if not has_token_times(req, lazy):
        return AxisResult(
            axis=AxisName.PD_INTERFERENCE, status=Status.INSUFFICIENT_DATA, cause=None,
            score=None, score_basis="share of decode time lost to stalls during prefill",
            sources=(Source.METRICS,) if itl_mean is not None else (), metrics=empty,
            missing=("token_times_s (request table): per-token emission times",
                     "instance (request table) or a step log with start_s, end_s, "
                     "prefill_tokens to locate co-located prefill"),
            next_steps=("record per-token timestamps (streaming client or engine output "
                        "processor) with the serving instance",),
        )
    sources = [Source.REQUESTS] + ([Source.METRICS] if itl_mean is not None else [])
    # Passes over the token times (streamed when left on disk): only the gaps' summary and the
    # stalls are held, never every gap.
    gs = _gap_summary(inp)
    counts, token_first, n_gaps = gs.counts, gs.first, gs.summary.count
    instance = _instances(inp)
    if not (inp.has("instance") or inp.has("decode_instance")):
        notes.append("no instance column: all requests are taken as co-located on one instance")

    steps = inp.steps if inp.step_has("prefill_tokens") else None
    median_step = step_source = None
    if steps is not None:
        sources.append(Source.STEPS)
        # Passes over the log's batches: exact, and never every duration at once.
        decode_only = summarize(steps.reader(("prefill_tokens",), _decode_only_s), median=True)
        if decode_only.count:
            median_step, step_source = decode_only.median, "decode-only steps"
    if median_step is None and n_gaps:
        median_step, step_source = gs.summary.median, "median inter-token gap"
    if not n_gaps or median_step is None:
        return AxisResult(
            axis=AxisName.PD_INTERFERENCE, status=Status.INSUFFICIENT_DATA, cause=None,
            score=None, score_basis="share of decode time lost to stalls during prefill",
            sources=tuple(sources), metrics=empty,
            missing=("token_times_s with at least two tokens per request",),
            next_steps=("record every token's emission time, not only the first",),
        )
    threshold_s = k * median_step
    st = stalls(req, lazy, threshold_s)
    gap, gap_start, gap_end = st.gap, st.start, st.end
    coincide = np.zeros(gap.size, dtype=bool)
    labels, inst_code = np.unique(instance, return_inverse=True)
    gap_inst = inst_code[st.owner]
    # Steps are matched by instance only when both tables name instances.
    by_instance = (bool(inp.has("instance") or inp.has("decode_instance"))
                   and steps is not None and steps.has("instance"))
    overlap = (None if steps is None
               else _prefill_overlap(steps, gap_start, gap_end, gap_inst, labels, by_instance))
    if overlap is not None:
        coin_source = "prefill steps in the step log"
        coincide = overlap
    else:
        coin_source = "first tokens of co-located requests"
        first = (req["first_token_s"].to_numpy(dtype=np.float64, na_value=np.nan)
                 if inp.has("first_token_s") else np.full(len(req), np.nan))
        first = np.where(np.isfinite(first), first, token_first)
        for code in np.unique(gap_inst):
            sel = gap_inst == code
            f = np.sort(first[(inst_code == code) & np.isfinite(first)])
            inside = (np.searchsorted(f, gap_end[sel], side="right")
                      - np.searchsorted(f, gap_start[sel], side="right"))
            coincide[np.flatnonzero(sel)] = inside > 0
    lost = float((gap[coincide] - median_step).sum())
    unexplained = float((gap[~coincide] - median_step).sum())
    total = gs.summary.total
    n_stalls = int(gap.size)
    with_prefill = int(coincide.sum())
    share = ratio(lost, total)
    metrics = InterferenceMetrics(
        requests_with_tokens=int((counts > 1).sum()),
        gaps=n_gaps,
        tbt_s=gs.distribution,
        tbt_p25_s=gs.summary.percentiles[25],
        median_decode_step_s=median_step,
        median_step_source=step_source,
        stall_factor=k,
        stall_threshold_s=threshold_s,
        stalls=n_stalls,
        stalls_with_prefill=with_prefill,
        prefill_coincidence=ratio(with_prefill, n_stalls),
        coincidence_source=coin_source,
        decode_seconds_total=total,
        decode_seconds_lost=lost,
        interference_share=share,
        stall_seconds_unexplained=unexplained,
        metrics_itl_mean_s=itl_mean,
    )
    if inp.has("prefill_instance") and inp.has("decode_instance"):
        notes.append("the trace has separate prefill and decode instances (already "
                     "disaggregated); stalls are matched on the decode instance")
    hits = _interference_rules(metrics, t)
    status = status_from(hits, SEVERITY_OF)
    ids = {h.rule_id for h in hits}
    cause = "prefill_interference" if ids & {"D001", "D002"} else None
    next_steps: list[str] = []
    if cause:
        next_steps.append("compare chunked prefill and P/D disaggregation in the ledger; pass "
                          "--model and --link-gbps for the transfer cost")
    if "D006" in ids:
        next_steps.append("line stalls up with preemptions and host-side gaps (step log)")
    if Source.STEPS not in sources:
        next_steps.append("add a step log with prefill_tokens per step to confirm co-location")
    return AxisResult(
        axis=AxisName.PD_INTERFERENCE, status=status, cause=cause, score=finite(share),
        score_basis="share of decode time lost to stalls during prefill",
        sources=tuple(sources), metrics=metrics, hits=tuple(hits), missing=(),
        next_steps=tuple(next_steps), notes=tuple(notes),
    )


def _decode_only_s(b: pd.DataFrame) -> np.ndarray:
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


def _prefill_overlap(log: StepLog, gap_start: np.ndarray, gap_end: np.ndarray,
                     gap_inst: np.ndarray, labels: np.ndarray,
                     by_instance: bool) -> np.ndarray | None:
    """Per stall, whether a prefill step overlaps it on its instance (or on any instance when
    not matched by instance), in one pass over the log; None when the log has no prefill step.

    Both matchings are kept when instances may be matched: steps are matched by instance only
    if some prefill step names one, which is known at the end of the pass.
    """
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


def _interference_rules(mt: InterferenceMetrics, t: Thresholds) -> list[RuleHit]:
    """Rules D1, D5 and unexplained stalls (D3/D4 are decided with the ledger)."""
    hits: list[RuleHit] = []
    share, coin = mt.interference_share, mt.prefill_coincidence
    ev_common = (
        fact("decode_seconds_lost", mt.decode_seconds_lost, "s"),
        fact("stalls", mt.stalls, "gaps"),
        fact("stall_threshold_s", mt.stall_threshold_s, "s"),
    )
    coin_check = check("prefill_coincidence", coin, ">=", "prefill_coincidence",
                       t.prefill_coincidence)
    if share is not None and coin is not None and coin >= t.prefill_coincidence:
        if share >= t.interference_material:
            hits.append(RuleHit(rule_id="D001", evidence=(
                check("interference_share", share, ">=", "interference_material",
                      t.interference_material), coin_check, *ev_common)))
        if share >= t.interference_dominant:
            hits.append(RuleHit(rule_id="D002", evidence=(
                check("interference_share", share, ">=", "interference_dominant",
                      t.interference_dominant), coin_check, *ev_common)))
    if share is not None and share < t.interference_material:
        hits.append(RuleHit(rule_id="D005", evidence=(
            check("interference_share", share, "<", "interference_material",
                  t.interference_material),
            fact("decode_seconds_lost", mt.decode_seconds_lost, "s"),
        )))
    if (mt.stalls or 0) > 0 and coin is not None and coin < t.prefill_coincidence:
        hits.append(RuleHit(rule_id="D006", evidence=(
            coin_check,
            fact("stalls", mt.stalls, "gaps"),
            fact("stall_seconds_unexplained", mt.stall_seconds_unexplained, "s"),
        )))
    return hits
