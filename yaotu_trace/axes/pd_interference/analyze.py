"""The pd_interference axis' analyzer: measure, evaluate its rules, name the cause."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    Source,
    Status,
    finite,
    ratio,
    status_from,
)
from yaotu_trace.axes.pd_interference.metrics import (
    InterferenceMetrics,
    decode_only_s,
    gap_summary_of,
    instances_of,
    prefill_overlap,
)
from yaotu_trace.axes.pd_interference.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.rule import evaluate
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.order_stats import summarize
from yaotu_trace.data.token_times import (
    has_token_times,
    stalls,
)


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
    gs = gap_summary_of(inp)
    counts, token_first, n_gaps = gs.counts, gs.first, gs.summary.count
    instance = instances_of(inp)
    if not (inp.has("instance") or inp.has("decode_instance")):
        notes.append("no instance column: all requests are taken as co-located on one instance")

    steps = inp.steps if inp.step_has("prefill_tokens") else None
    median_step = step_source = None
    if steps is not None:
        sources.append(Source.STEPS)
        # Passes over the log's batches: exact, and never every duration at once.
        decode_only = summarize(steps.reader(("prefill_tokens",), decode_only_s), median=True)
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
               else prefill_overlap(steps, gap_start, gap_end, gap_inst, labels, by_instance))
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
    hits = evaluate(RULES, metrics, t)
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
