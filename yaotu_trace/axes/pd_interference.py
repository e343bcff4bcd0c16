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
from yaotu_trace.diagnosis.rules import SEVERITY_OF
from yaotu_trace.diagnosis.thresholds import Thresholds
from yaotu_trace.report import Distribution
from yaotu_trace.token_times import (
    GapSummary,
    gap_summary,
    has_token_times,
    stalls,
    trace_gap_summary,
)


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

    steps = inp.steps
    median_step = step_source = None
    prefill_steps = None
    if steps is not None and inp.step_has("prefill_tokens"):
        sources.append(Source.STEPS)
        prefill = steps["prefill_tokens"].fillna(0).to_numpy(dtype=np.float64)
        dur = (steps["end_s"] - steps["start_s"]).to_numpy(dtype=np.float64)
        if (prefill == 0).any():
            median_step, step_source = float(np.median(dur[prefill == 0])), "decode-only steps"
        prefill_steps = steps[prefill > 0]
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
    if prefill_steps is not None and len(prefill_steps):
        coin_source = "prefill steps in the step log"
        # Steps are matched by instance only when both tables name instances.
        has_inst = (bool(inp.has("instance") or inp.has("decode_instance"))
                    and "instance" in prefill_steps.columns
                    and bool(prefill_steps["instance"].notna().any()))
        groups = (prefill_steps.groupby(prefill_steps["instance"].fillna("").astype(str))
                  if has_inst else [("", prefill_steps)])
        for inst, g in groups:
            if has_inst:
                at = int(np.searchsorted(labels, inst))
                if at == labels.size or labels[at] != inst:
                    continue  # no request ran on this instance
                sel = gap_inst == at
            else:
                sel = np.ones(gap.size, dtype=bool)
            if not sel.any():
                continue
            starts = g["start_s"].to_numpy(dtype=np.float64)
            ends = g["end_s"].to_numpy(dtype=np.float64)
            order = np.argsort(starts)
            starts, ends = starts[order], np.maximum.accumulate(ends[order])
            idx = np.searchsorted(starts, gap_end[sel], side="left") - 1
            ok = idx >= 0
            hit = np.zeros(idx.size, dtype=bool)
            hit[ok] = ends[idx[ok]] > gap_start[sel][ok]
            coincide[np.flatnonzero(sel)] = hit
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
