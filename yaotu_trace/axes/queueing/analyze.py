"""The queueing axis' analyzer: measure, evaluate the rules Q000–Q006, name the cause."""

from __future__ import annotations

from enum import StrEnum

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
from yaotu_trace.axes.queueing.metrics import (
    TOP_WINDOWS,
    PeakWindow,
    QueueingMetrics,
    Windows,
    spread_work,
    times_of,
    waiting_at,
)
from yaotu_trace.axes.queueing.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, saturated
from yaotu_trace.axes.queueing.steps import STEP_PERCENTILES, sampled_waiting_s, step_stats
from yaotu_trace.axes.rule import evaluate
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.order_stats import summarize
from yaotu_trace.data.report import Distribution
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
    scheduled = times_of(req, "scheduled_s")
    first = times_of(req, "first_token_s")
    finish = times_of(req, "finish_s")
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
        top = np.argsort(-rho, kind="stable")[:TOP_WINDOWS]
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
            running = summarize(lambda: [samples], STEP_PERCENTILES)
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
            sampled = finite(sampled_waiting_s(inp, st, arrival, scheduled, inside) / span)
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

    facts = QueueingFacts(metrics=metrics, has_steps=st.wall_s is not None)
    hits = evaluate(RULES, facts, t)
    if "Q001" in {h.rule_id for h in hits} and saturated(facts, t) is None:
        notes.append("arrival burst judged from the request table alone; add a step log to "
                     "confirm the GPU was saturated")
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


