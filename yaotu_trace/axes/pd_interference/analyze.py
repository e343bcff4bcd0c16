"""The pd_interference axis' analyzer: measure, evaluate its rules (the P/D network check's
among them), name the cause."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache

import numpy as np

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    Cause,
    RuleHit,
    Source,
    Status,
    finite,
    metrics_of,
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
from yaotu_trace.axes.pd_interference.network import network_check
from yaotu_trace.axes.pd_interference.placement import PlacementMetrics, placement_of, split_rows
from yaotu_trace.axes.pd_interference.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.pd_interference.rules.shared import InterferenceFacts
from yaotu_trace.axes.rule import cause_of, evaluate, said_when_fired
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.engine_facts import cache_sources, kv_transfers
from yaotu_trace.data.order_stats import summarize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.data.token_times import (
    GapSummary,
    Stalls,
    has_token_times,
    stalls,
)

_BASIS = "share of decode time lost to stalls during prefill"


def _queued_pool_share(pm: PlacementMetrics) -> float | None:
    """The larger of the two pools' waits as a share of TTFT: the pool that is short."""
    waits = [w for w in (pm.prefill_wait_share, pm.decode_wait_share) if w is not None]
    return max(waits) if waits else None


# A disaggregated deployment's causes: the axis' score and its words when one is the cause.
_PLACEMENT_SCORES: dict[Cause, tuple[Callable[[PlacementMetrics], float | None], str]] = {
    Cause.KV_TRANSFER: (lambda pm: pm.transfer_ttft_share, "share of TTFT spent moving KV"),
    Cause.PD_RATIO: (_queued_pool_share, "share of TTFT queued for the short pool"),
    Cause.TRANSFER_FAILURES: (lambda pm: pm.failure_share,
                              "share of handed-off requests whose transfer failed or fell back"),
}


def _facts(metrics: InterferenceMetrics, inp: AxisInput, t: Thresholds) -> InterferenceFacts:
    """What the rules judge: the metrics, and the network check of the same input and
    thresholds, computed when D003/D004 first ask."""
    return InterferenceFacts(metrics=metrics, network=cache(lambda: network_check(inp, t)))


def _empty(t: Thresholds, itl_mean: float | None) -> InterferenceMetrics:
    """The measurements when stalls cannot be measured (the metrics' mean ITL only)."""
    empty = InterferenceMetrics(
        requests_with_tokens=None, gaps=None, tbt_s=None, tbt_p25_s=None,
        median_decode_step_s=None, median_step_source=None, stall_factor=float(t.stall_factor),
        stall_threshold_s=None, stalls=None, stalls_with_prefill=None,
        prefill_coincidence=None, coincidence_source=None, decode_seconds_total=None,
        decode_seconds_lost=None, interference_share=None, stall_seconds_unexplained=None,
    )
    return empty if itl_mean is None else replace(empty, metrics_itl_mean_s=itl_mean)


def _no_token_times(metrics: InterferenceMetrics, itl_mean: float | None) -> AxisResult:
    """The axis without per-token times: undecided (placement decided when disaggregated)."""
    return AxisResult(
        axis=AxisName.PD_INTERFERENCE, status=Status.INSUFFICIENT_DATA, cause=None,
        score=None, score_basis=_BASIS,
        sources=(Source.METRICS,) if itl_mean is not None else (), metrics=metrics,
        missing=("token_times_s (request table): per-token emission times",
                 "instance (request table) or a step log with start_s, end_s, "
                 "prefill_tokens to locate co-located prefill"),
        next_steps=("record per-token timestamps (streaming client or engine output "
                    "processor) with the serving instance",),
    )


def _one_token_each(metrics: InterferenceMetrics, sources: list[Source]) -> AxisResult:
    """The axis when no request has two tokens: no gap to measure."""
    return AxisResult(
        axis=AxisName.PD_INTERFERENCE, status=Status.INSUFFICIENT_DATA, cause=None,
        score=None, score_basis=_BASIS,
        sources=tuple(sources), metrics=metrics,
        missing=("token_times_s with at least two tokens per request",),
        next_steps=("record every token's emission time, not only the first",),
    )


def _median_step(steps: StepLog | None, gs: GapSummary,
                 sources: list[Source]) -> tuple[float | None, str | None]:
    """The median decode step (s): of decode-only steps in the log, else the median gap."""
    median_step = step_source = None
    if steps is not None:
        sources.append(Source.STEPS)
        # Passes over the log's batches: exact, and never every duration at once.
        decode_only = summarize(steps.reader(("prefill_tokens",), decode_only_s), median=True)
        if decode_only.count:
            median_step, step_source = decode_only.median, "decode-only steps"
    if median_step is None and gs.summary.count:
        median_step, step_source = gs.summary.median, "median inter-token gap"
    return median_step, step_source


def _coincidence(inp: AxisInput, st: Stalls, steps: StepLog | None,
                 token_first: np.ndarray) -> tuple[np.ndarray, str]:
    """Per stall, whether prefill ran on its instance during it, and how that was judged: a
    prefill step overlapping it (step log), else another request's first token inside it."""
    req = inp.requests
    instance = instances_of(inp)
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
    return coincide, coin_source


def analyze_pd_interference(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure decode stalls and how many of them line up with other requests' prefill; add
    the KV the engines say they moved between instances (`engine_facts`)."""
    result = _unknown_pool_load(_analyze(inp, t), t)
    m = inp.metrics
    moved = None if m is None else kv_transfers(m)
    found = None if m is None else cache_sources(m)
    external = None if found is None or "external_kv_transfer" not in found.tokens else (
        found.share("external_kv_transfer"))
    if moved is None and external is None:
        return result
    metrics = replace(
        metrics_of(result, InterferenceMetrics), external_kv_token_share=external,
        engine_kv_transfers=None if moved is None else moved.transfers,
        engine_kv_transfer_mean_ms=None if moved is None else moved.mean_ms,
        engine_kv_transfer_mean_mb=None if moved is None else moved.mean_mb)
    notes = list(result.notes)
    if moved is not None and moved.transfers is not None:
        mean = "" if moved.mean_ms is None else f", {moved.mean_ms:.1f} ms each on average"
        size = "" if moved.mean_mb is None else f", {moved.mean_mb:.2f} MB each"
        notes.append(f"the engines moved KV {moved.transfers:,.0f} time(s){mean}{size} "
                     f"({moved.source})")
    if external:
        notes.append(f"{100 * external:.1f} % of prompt tokens arrived by KV transfer "
                     "(external_kv_transfer) instead of being computed")
    return replace(result, metrics=metrics, notes=tuple(notes))


def _analyze(inp: AxisInput, t: Thresholds) -> AxisResult:
    notes: list[str] = []
    k = float(t.stall_factor)
    itl_mean = None if inp.metrics is None else inp.metrics.histogram_mean("itl_s")
    placement = placement_of(inp, t)
    if not has_token_times(inp.trace):
        return _placed(_no_token_times(_empty(t, itl_mean), itl_mean), placement, inp, t)
    sources = [Source.REQUESTS] + ([Source.METRICS] if itl_mean is not None else [])
    # Passes over the token times (streamed when left on disk): only the gaps' summary and the
    # stalls are held, never every gap.
    gs = gap_summary_of(inp)
    if not (inp.has("instance") or inp.has("decode_instance")):
        notes.append("no instance column: all requests are taken as co-located on one instance")
    steps = inp.steps if inp.step_has("prefill_tokens") else None
    median_step, step_source = _median_step(steps, gs, sources)
    if not gs.summary.count or median_step is None:
        return _placed(_one_token_each(_empty(t, itl_mean), sources), placement, inp, t)
    threshold_s = k * median_step
    found = stalls(inp.requests, inp.trace.lazy, threshold_s)
    st, handoff_s = _without_handoffs(found, inp, gs.first, placement)
    coincide, coin_source = _coincidence(inp, st, steps, gs.first)
    gap = st.gap
    lost = float((gap[coincide] - median_step).sum())
    n_stalls, with_prefill = int(gap.size), int(coincide.sum())
    decode_total = gs.summary.total - handoff_s
    share = ratio(lost, decode_total)
    metrics = InterferenceMetrics(
        requests_with_tokens=int((gs.counts > 1).sum()),
        gaps=gs.summary.count,
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
        decode_seconds_total=decode_total,
        decode_seconds_lost=lost,
        interference_share=share,
        stall_seconds_unexplained=float((gap[~coincide] - median_step).sum()),
        metrics_itl_mean_s=itl_mean,
        placement=placement,
        stall_share_by_instance=_stall_shares(instances_of(inp)[st.owner]),
    )
    if placement is not None:
        notes.append("the trace has separate prefill and decode instances (already "
                     "disaggregated); stalls are matched on the decode instance, and the gap "
                     "from a request's first token to its first decode step (KV transfer and "
                     "the decode queue) is not a stall")
    facts = _facts(metrics, inp, t)
    return _result(facts, evaluate(RULES, facts, t), sources, notes, t)


def _unknown_pool_load(result: AxisResult, t: Thresholds) -> AxisResult:
    """One pool queues and the other pool's load is unknown: the input that would measure it is
    named. Judged ok (or undecided), the P:D ratio cannot be judged, so the axis is undecided
    (reads pool_wait_share); a queue that is most of TTFT stays the bottleneck (D011) whichever
    way the instances then move, and the missing load only decides between moving and adding
    them."""
    decided = result.status not in (Status.OK, Status.INSUFFICIENT_DATA)
    pm = metrics_of(result, InterferenceMetrics).placement
    if pm is None:
        return result
    sides = (("prefill", pm.prefill_wait_share, "decode", pm.decode_busy_share),
             ("decode", pm.decode_wait_share, "prefill", pm.prefill_busy_share))
    for queued, wait, other, load in sides:
        if wait is not None and wait >= t.pool_wait_share and load is None:
            what = ("--metrics with kv_cache_usage_perc and num_requests_running per decode "
                    "instance, or a step log (--steps) with kv_blocks_used"
                    if other == "decode" else
                    "scheduled_s and first_token_s per request, or a step log (--steps)")
            missing = (*result.missing, f"the {other} pool's load: {what}")
            if decided:
                return replace(result, missing=missing)
            return replace(
                result, status=Status.INSUFFICIENT_DATA,
                missing=missing,
                notes=(*result.notes, f"the {queued} pool's queue is {100 * wait:.0f} % of "
                       f"TTFT, but nothing here measures the {other} pool's load, so whether "
                       "the P:D ratio is off cannot be told"))
    return result


def _without_handoffs(st: Stalls, inp: AxisInput, token_first: np.ndarray,
                      placement: PlacementMetrics | None) -> tuple[Stalls, float]:
    """The stalls minus each handed-off request's first gap (the transfer, not a stall), and
    the seconds removed. NOTE: `data.token_times` already leaves those gaps out of every pass
    (the profile's and the report's too) by the same rule as `split_rows`, so this finds none;
    it stays as the axis' guard should a pass keep them."""
    if placement is None or not st.gap.size:
        return st, 0.0
    handoff = split_rows(inp)[st.owner] & (st.start == token_first[st.owner])
    keep = ~handoff
    kept = Stalls(gap=st.gap[keep], start=st.start[keep], end=st.end[keep],
                  owner=st.owner[keep])
    return kept, float(st.gap[handoff].sum())


def _placed(result: AxisResult, placement: PlacementMetrics | None, inp: AxisInput,
            t: Thresholds) -> AxisResult:
    """An undecided interference result, decided on placement when the run is disaggregated."""
    if placement is None:
        return result
    metrics = replace(metrics_of(result, InterferenceMetrics), placement=placement)
    facts = _facts(metrics, inp, t)
    hits = evaluate(RULES, facts, t)
    if not hits:
        return replace(result, metrics=metrics)
    decided = _result(facts, hits, list(result.sources) or [Source.REQUESTS], [], t)
    return replace(decided, missing=result.missing,
                   next_steps=(*decided.next_steps, *result.next_steps))


def _stall_shares(instance: np.ndarray) -> dict[str, float] | None:
    """Each instance's share of the stalls, when the stalls fall on more than one."""
    names, counts = np.unique(instance[instance != ""], return_counts=True)
    if names.size < 2:
        return None
    return {str(n): float(c / counts.sum()) for n, c in zip(names, counts, strict=True)}


def _result(facts: InterferenceFacts, hits: list[RuleHit], sources: list[Source],
            notes: list[str], t: Thresholds) -> AxisResult:
    """The decided axis: status, cause and what to do next."""
    metrics = facts.metrics
    cause = cause_of(RULES, hits)
    score, basis = finite(metrics.interference_share), _BASIS
    pm = metrics.placement
    placed = None if cause is None or pm is None else _PLACEMENT_SCORES.get(cause)
    next_steps: list[str] = []
    if placed is not None and pm is not None:
        score, basis = finite(placed[0](pm)), placed[1]
        next_steps.append("weigh co-located serving with chunked prefill in the ledger against "
                          "fixing the placement")
    elif cause:
        next_steps.append("compare chunked prefill and P/D disaggregation in the ledger; pass "
                          "--model and --link-gbps for the transfer cost")
    said, steps = said_when_fired(RULES, hits, facts, t)
    next_steps += steps
    if Source.STEPS not in sources:
        next_steps.append("add a step log with prefill_tokens per step to confirm co-location")
    return AxisResult(
        axis=AxisName.PD_INTERFERENCE, status=status_from(hits, SEVERITY_OF), cause=cause,
        score=score, score_basis=basis,
        sources=tuple(sources), metrics=metrics, hits=tuple(hits), missing=(),
        next_steps=tuple(next_steps), notes=(*notes, *said),
    )
