"""The queueing axis' analyzer: measure, evaluate its rules, name the cause."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    Cause,
    Source,
    Status,
    finite,
    ratio,
    status_from,
)
from yaotu_trace.axes.failures import measure_failures, with_failure_hits
from yaotu_trace.axes.queueing.confidence import confirm_steps, evidence_note
from yaotu_trace.axes.queueing.imbalance import measure_load_balance
from yaotu_trace.axes.queueing.metrics import (
    MIN_GRID_WINDOWS,
    WINDOWS_PER_EVENT,
    Load,
    QueueingMetrics,
    RequestTiming,
    Windows,
    grid_limit,
    offered_load,
    request_timing,
    windows_of,
)
from yaotu_trace.axes.queueing.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts
from yaotu_trace.axes.queueing.steps import (
    STEP_PERCENTILES,
    StepStats,
    sampled_waiting_s,
    step_stats,
)
from yaotu_trace.axes.queueing.windows import Limits, WindowVerdicts, judge, queue_windows
from yaotu_trace.axes.rule import Mark, cause_of, evaluate, said_when_fired
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.engine_facts import waiting_reasons
from yaotu_trace.data.handoff import decode_queue_s
from yaotu_trace.data.order_stats import summarize
from yaotu_trace.data.report import Distribution
from yaotu_trace.profile.workload import arrival_profile

# Rules that judge the failed requests, evaluated even when no queue time decides the axis.
FAILURE_RULES = tuple(r for r in RULES if Mark.FAILURES in r.marks)


def _p75(values: np.ndarray | None) -> float | None:
    if values is None or values.size == 0:
        return None
    return float(np.percentile(values, 75))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Shape:
    """Batch shape and caps: tokens per step against the budget, running against the seat cap,
    KV usage and the waiting share (step log, else engine metrics)."""

    tokens_per_step: Distribution | None
    budget: float | None
    budget_inferred: bool | None
    step_fill: float | None
    running: Distribution | None
    seq_cap: float | None
    seq_cap_inferred: bool | None
    running_fill: float | None
    kv_usage_p75: float | None
    waiting_share: float | None


def _batch_shape(inp: AxisInput, st: StepStats, sources: list[Source]) -> _Shape:
    """Step fill and running fill against the engine's caps (given, else the largest seen)."""
    s, m = inp.settings, inp.metrics
    tokens = st.tokens
    tokens_dist = Distribution.from_summary(tokens) if tokens is not None else None
    budget = budget_inferred = step_fill = None
    if tokens is not None and tokens.count:
        budget_inferred = s.max_batched_tokens is None
        # A log of empty steps shows no budget: none is inferred (not a budget of 0).
        budget = float(s.max_batched_tokens or tokens.max or 0) or None
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
            running = summarize(lambda: [samples], STEP_PERCENTILES)
            sources.append(Source.METRICS)
    running_dist = Distribution.from_summary(running) if running is not None else None
    seq_cap = seq_cap_inferred = running_fill = None
    if running is not None and running.count:
        logged = None if m is None else m.gauge("max_running")  # the engine's own cap
        cap = s.max_num_seqs or (float(logged["value"].max()) if logged is not None
                                 and len(logged) else None)
        seq_cap_inferred = cap is None
        seq_cap = float(cap or running.max or 0)
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
    return _Shape(tokens_per_step=tokens_dist, budget=budget, budget_inferred=budget_inferred,
                  step_fill=step_fill, running=running_dist, seq_cap=seq_cap,
                  seq_cap_inferred=seq_cap_inferred, running_fill=running_fill,
                  kv_usage_p75=kv_p75, waiting_share=waiting_share)


def _littles_law(
    inp: AxisInput, st: StepStats, timing: RequestTiming
) -> tuple[float | None, float | None, float | None]:
    """(little_expected_waiting, little_expected_sampled, little_mismatch): mean waiting seen by
    the engine against λ·W̄q from the request table (see the package docstring)."""
    queue, arrival, scheduled = timing.queue, timing.arrival, timing.scheduled
    if queue is None or st.waiting_mean is None or st.waiting_span is None:
        return None, None, None
    lo, hi = st.waiting_span
    inside = (arrival >= lo) & (arrival <= hi) & np.isfinite(queue)
    span = hi - lo
    if not (inside.any() and span > 0):
        return None, None, None
    expected = finite(float(queue[inside].sum()) / span)
    assert scheduled is not None
    sampled = finite(sampled_waiting_s(inp, st, arrival, scheduled, inside) / span)
    if expected is None:
        return expected, sampled, None
    low = min(expected, sampled if sampled is not None else expected)
    high = max(expected, sampled if sampled is not None else expected)
    # NOTE: engines count preempted requests as waiting again, time the request
    # table's queue_time_s does not hold: with preemptions only the low end binds.
    preempting = ((inp.has("num_preemptions")
                   and bool((inp.requests["num_preemptions"].fillna(0) > 0).any()))
                  or (inp.steps is not None and inp.steps.has_preemptions() and st.preempted))
    if preempting:
        high = np.inf
    observed = st.waiting_mean
    outside = max(0.0, low - observed, observed - high)
    mismatch = 0.0 if outside == 0 else ratio(outside, max(observed, high))
    return expected, sampled, mismatch


def analyze_queueing(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure queueing and name its cause: burst, dispatch overhead, batch shape or KV."""
    sources: list[Source] = []
    timing = request_timing(inp, sources)
    events = _events(inp)
    grid = windows_of(timing, float(t.window_s), _telemetry_span(inp), events)
    grid_notes = _grid_notes(grid, float(t.window_s), events, bool(inp.num_requests))
    st = step_stats(inp, grid)
    if st.wall_s is not None:
        sources.append(Source.STEPS)
    load = offered_load(timing, st.achieved_tokens, grid, t.overload_rho)
    shape = _batch_shape(inp, st, sources)
    qw = queue_windows(inp, timing, grid, st, t)
    judged = judge(inp, timing, grid, st, qw,
                   Limits(service_rate_tokens_per_s=load.service_rate_tokens_per_s,
                          token_budget_tokens=shape.budget, seq_cap=shape.seq_cap), t)
    reasons = None if inp.metrics is None else waiting_reasons(inp.metrics)
    metrics = replace(_metrics(inp, timing, grid, load, st, shape, judged),
                      load_balance=measure_load_balance(inp, timing, grid),
                      waiting_deferred_share=None if reasons is None else reasons.deferred_share)
    facts = QueueingFacts(metrics=metrics, has_steps=st.wall_s is not None,
                          failures=measure_failures(inp, float(t.window_s)))
    if timing.share_ttft is None and st.wall_s is None and shape.waiting_share is None:
        return with_failure_hits(_undecided(metrics), evaluate(FAILURE_RULES, facts, t),
                                 facts.failures, SEVERITY_OF)
    hits = evaluate(RULES, facts, t)
    said, steps = said_when_fired(RULES, hits, facts, t)
    notes: list[str] = [*grid_notes, *said]
    cause = cause_of(RULES, hits)
    score, basis = _score(timing, st, cause)
    if cause is Cause.REQUEST_FAILURES and facts.failures is not None:
        # the queue is fine: what is wrong is the share of requests that failed
        score, basis = facts.failures.failed_share, "share of requests that failed"
    missing = _missing(timing, st)
    if facts.failures is not None and timing.share_latency is not None:
        ok = facts.failures.requests - facts.failures.failed
        notes.append(f"queue time, TTFT and their shares are of the successful requests only "
                     f"({ok:,} of {facts.failures.requests:,}); the queue seconds and Little's "
                     "law count every request")
    if (note := evidence_note(metrics, t)) is not None:
        notes.append(note)
    if (note := _decode_queue_note(inp, timing)) is not None:
        notes.append(note)
    if not hits and (note := _ttft_queue_note(timing, t)) is not None:
        notes.append(note)
    if reasons is not None and (share := reasons.deferred_share) is not None and share >= 0.5:
        notes.append(f"{100 * share:.0f} % of the requests waiting are deferred ({reasons.source}"
                     "): they wait on remote KV or a grammar, not on capacity; read the "
                     "placement evidence (KV transfers) before adding capacity")
    return AxisResult(
        axis=AxisName.QUEUEING,
        status=status_from(hits, SEVERITY_OF),
        cause=cause,
        score=finite(score),
        score_basis=basis,
        sources=tuple(dict.fromkeys(sources)),
        metrics=metrics,
        hits=tuple(hits),
        missing=tuple(missing),
        next_steps=(*_next_steps(cause, steps, missing),
                    *confirm_steps(metrics, cause, facts.has_steps)),
        notes=tuple(notes),
    )


def _ttft_queue_note(timing: RequestTiming, t: Thresholds) -> str | None:
    """Where the queue is most of TTFT yet too small a share of latency for any rule: the axis
    is ok by latency, which it scores, and a TTFT objective would still be the queue's."""
    ttft, latency = timing.share_ttft, timing.share_latency
    if ttft is None or latency is None or not (ttft >= t.queue_share_of_ttft
                                               and latency < t.queue_share_warn):
        return None
    waits = None if timing.queue is None else timing.queue[timing.timed]
    waits = None if waits is None else waits[np.isfinite(waits)]
    mean = "" if waits is None or not waits.size else f", {float(waits.mean()):.3g} s on average"
    below = math.floor(1000 * latency) / 10  # rounded down: never shown at the threshold
    return (f"the queue is {100 * ttft:.1f} % of TTFT{mean}, but {below:.1f} % of latency, "
            f"under queue_share_warn ({100 * t.queue_share_warn:g} %): no queueing problem by "
            "latency, which this axis scores; against a TTFT objective the wait to be admitted "
            "is what to shorten")


def _decode_queue_note(inp: AxisInput, timing: RequestTiming) -> str | None:
    """What share of the queue a disaggregated run's decode pool holds (`data/handoff.py`)."""
    if not inp.has("decode_start_s") or not timing.queue_total:
        return None
    decode = float(decode_queue_s(inp.requests).sum())
    if decode <= 0:
        return None
    return (f"{100 * decode / timing.queue_total:.1f} % of the queue seconds are handed-off "
            "requests waiting for a decode seat (decode_start_s − first_token_s − "
            "kv_transfer_s); the pools are judged on the pd_interference axis")


def _events(inp: AxisInput) -> int:
    """What the load grid is sized by: the requests, else the steps and scrapes."""
    if inp.num_requests:
        return inp.num_requests
    steps = inp.steps.num_rows if inp.steps is not None else 0
    return steps + (len(inp.metrics.frame) if inp.metrics is not None else 0)


def _grid_notes(grid: Windows, window_s: float, events: int, requests: bool
                ) -> tuple[str, ...]:
    """A note when the span needed wider windows than `window_s` (`grid_limit`)."""
    if grid.width_s == window_s:
        return ()
    what, per = ("requests", "request") if requests else ("steps and scrapes", "step or scrape")
    return (f"load windows are {grid.width_s:g} s wide, not window_s {window_s:g} s: windows "
            f"of {window_s:g} s over this span would number more than {grid_limit(events):,}, "
            f"the most a grid holds for {events:,} {what} (the larger of "
            f"{MIN_GRID_WINDOWS:,} and {WINDOWS_PER_EVENT} per {per}); look for a time on "
            "another clock",)


def _telemetry_span(inp: AxisInput) -> tuple[float, float] | None:
    """The step log's range, else the metrics', for a diagnosis without requests."""
    if inp.num_requests:
        return None
    if inp.steps is not None and (span := inp.steps.span()) is not None:
        return span
    if inp.metrics is not None and len(inp.metrics.frame):
        times = inp.metrics.frame["time_s"]
        return float(times.min()), float(times.max())
    return None


def _metrics(inp: AxisInput, timing: RequestTiming, grid: Windows, load: Load, st: StepStats,
             shape: _Shape, judged: WindowVerdicts) -> QueueingMetrics:
    """The axis' measurements from its phases."""
    prof = arrival_profile(timing.arrival)
    expected, sampled, mismatch = _littles_law(inp, st, timing)
    m = inp.metrics
    return QueueingMetrics(
        queue_time_s=(Distribution.of(timing.queue[timing.timed]) if timing.queue is not None
                      else None),
        ttft_s=Distribution.of(timing.ttft) if timing.ttft is not None else None,
        queue_share_of_ttft=timing.share_ttft,
        queue_share_of_latency=timing.share_latency,
        queue_seconds_total=timing.queue_total,
        interarrival_cv=prof.interarrival_cv,
        peak_to_mean=prof.peak_to_mean,
        window_s=grid.width_s,
        windows=load.windows,
        service_rate_tokens_per_s=load.service_rate_tokens_per_s,
        peak_offered_tokens_per_s=load.peak_offered_tokens_per_s,
        mean_rho=load.mean_rho,
        peak_rho=load.peak_rho,
        overloaded_windows=load.overloaded_windows,
        overloaded_windows_queue_growing=load.overloaded_windows_queue_growing,
        queue_seconds_in_overload=load.queue_seconds_in_overload,
        excess_offered_tokens=load.excess_offered_tokens,
        peak_windows=load.peak_windows,
        wall_s=st.wall_s,
        gpu_busy_fraction=st.busy_fraction,
        idle_while_waiting_s=st.idle_waiting_s,
        idle_while_waiting_fraction=st.idle_waiting_fraction,
        tokens_per_step=shape.tokens_per_step,
        metrics_tokens_per_step_mean=(None if m is None
                                      else m.histogram_mean("iteration_tokens")),
        token_budget_tokens=shape.budget,
        token_budget_inferred=shape.budget_inferred,
        step_fill_p75=shape.step_fill,
        running=shape.running,
        seq_cap=shape.seq_cap,
        seq_cap_inferred=shape.seq_cap_inferred,
        running_fill_p75=shape.running_fill,
        kv_usage_p75=shape.kv_usage_p75,
        waiting_share=shape.waiting_share,
        waiting_mean=st.waiting_mean,
        little_expected_waiting=expected,
        little_mismatch=mismatch,
        little_expected_sampled=sampled,
        queue_source=None if judged.queue_source is None else str(judged.queue_source),
        growing_windows=judged.growing_windows if judged.queue_source else None,
        queued_windows=judged.queued_windows if judged.queue_source else None,
        growth_requests=judged.growth_requests,
        arrival_rate_growing_per_s=judged.arrival_rate_growing_per_s,
        arrival_rate_other_per_s=judged.arrival_rate_other_per_s,
        burst_ratio=judged.burst_ratio,
        growth_rho=judged.growth_rho,
        busy_queued=judged.busy_queued,
        idle_waiting_queued=judged.idle_waiting_queued,
        tokens_per_step_queued=judged.tokens_per_step_queued,
        step_fill_queued=judged.step_fill_queued,
        running_fill_queued=judged.running_fill_queued,
        running_source=None if judged.running_source is None else str(judged.running_source),
        kv_usage_queued=judged.kv_usage_queued,
        kv_blocked_queued=judged.kv_blocked_queued,
    )


def _undecided(metrics: QueueingMetrics) -> AxisResult:
    """The axis when neither the request table, a step log nor the metrics can decide it."""
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


def _score(timing: RequestTiming, st: StepStats, cause: Cause | None) -> tuple[float | None, str]:
    """The axis score and what it is: the share of latency spent queueing, else of TTFT;
    without request timing, the step log's share of wall time the GPU idled while requests
    waited, which is what dispatch overhead costs. A queue behind a busy GPU (its batch
    shape, KV admission, a burst) leaves that share near 0 by definition: it is scored by the
    share of steps that left requests waiting, else a bottleneck would rank as costing
    nothing."""
    share_latency, share_ttft = timing.share_latency, timing.share_ttft
    if share_latency is not None:
        return share_latency, "share of request latency spent queueing"
    if share_ttft is not None:
        return share_ttft, "share of TTFT spent queueing"
    if (cause not in (None, Cause.DISPATCH_OVERHEAD) and st.waiting_share is not None):
        return st.waiting_share, "share of steps that left requests waiting"
    return st.idle_waiting_fraction, "share of wall time the GPU idled while requests waited"


def _missing(timing: RequestTiming, st: StepStats) -> list[str]:
    """The inputs that would sharpen a decided axis."""
    missing: list[str] = []
    if timing.scheduled is None:
        missing.append("scheduled_s (request table)")
    if st.wall_s is None:
        missing.append("a step log (--steps) for GPU busy and idle-while-waiting time")
    elif st.idle_waiting_s is None:
        missing.append("num_waiting (step log) or scheduled_s for idle-while-waiting time")
    return missing


def _next_steps(cause: Cause | None, said: list[str], missing: list[str]) -> tuple[str, ...]:
    """The cause's advice, the fired rules' next steps, then the inputs to add."""
    advice = {
        Cause.KV_ADMISSION: "read the kv_memory axis: admission waits for KV blocks",
        Cause.DISPATCH_OVERHEAD: "profile the host side of a step (nsys): scheduling, input "
        "preparation, detokenisation, HTTP; try async/overlap scheduling and CUDA graphs",
        Cause.ARRIVAL_BURST: "size for the peak window, not the mean: replicas, admission "
        "control or autoscaling on queue depth",
        Cause.BATCH_SHAPE: "raise max_num_batched_tokens / max_num_seqs and check FCFS "
        "head-of-line blocking by long prompts",
        Cause.LOAD_IMBALANCE: "route by load (least-loaded) or by cache and load (sgl-router "
        "cache_aware, Dynamo kv-aware): one instance queues while another has free seats",
        Cause.UNIDENTIFIED: "the queue is too large to ignore but no cause was identified in "
        "the windows where it is: read their measurements (growth_rho, burst_ratio, "
        "running_fill_queued); a step log's GPU busy and idle gaps there tell a saturated "
        "engine (arrival_burst, batch_shape) from host dispatch (dispatch_overhead)",
        Cause.ADMISSION_BLOCKED: "requests wait most of their latency to be admitted and the "
        "data does not say what blocks them (KV blocks, seats, token budget or host dispatch)",
        Cause.REQUEST_FAILURES: "read the failed requests' errors and times (Q009): the "
        "queue itself is not the problem",
    }
    out = [advice[cause]] if cause else []
    out += said
    out += [f"add {m}" for m in missing]
    return tuple(out)


