"""The kv_memory axis' analyzer: measure, evaluate its rules, name the cause."""

from __future__ import annotations

from dataclasses import dataclass

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
from yaotu_trace.axes.kv_memory.metrics import (
    MAX_DEMAND_POINTS,
    KvMetrics,
    StepKv,
    demand_tokens,
    read_step_kv,
    shared_fraction,
    step_usage,
    usage_timeline,
)
from yaotu_trace.axes.kv_memory.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.rule import cause_of, evaluate, said_when_fired
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.engine_facts import request_preemptions
from yaotu_trace.data.handoff import handed_off
from yaotu_trace.data.order_stats import Summary, summarize
from yaotu_trace.data.steplog import kv_usage_summary


@dataclass(frozen=True, slots=True, kw_only=True)
class _Preemption:
    """Preemptions and the work they redo (tokens), with where the count came from."""

    source: str | None = None
    basis: str | None = None
    preempted: int | None = None
    total: int | None = None
    recomputed: float | None = None
    low: float | None = None
    high: float | None = None
    per_request: float | None = None  # of the finished requests (vLLM's histogram)


# What the note on an estimated recompute adds: where the run hits the prefix cache, that the
# estimate is likely high; elsewhere, that it may be (a readmission's prefix-cache hits are
# what it does not see), with the one number that shows by how much.
_ESTIMATE_HIGH_HERE = (
    "; likely high here: the run hits the prefix cache (its cached_tokens or the engine's hit "
    "counter), where a preempted request finds its own freed blocks until another takes them "
    "(docs/axes.md, recomputed_tokens)")
_ESTIMATE_MAY_BE_HIGH = (
    "; high where the engine's prefix cache keeps a preempted request's freed blocks for its "
    "readmission (vLLM's default: on the simulated diag-kv-churn sample the engine computed "
    "39,775 tokens again where this estimate says 95,996); a step log with recomputed_tokens "
    "counts them (docs/axes.md, recomputed_tokens)")


def _cache_hits(inp: AxisInput) -> bool:
    """Whether the run shows prefix-cache hits: `cached_tokens` > 0 in the request table, or
    the engine's prefix-cache hit counter rising in its metrics."""
    if inp.has("cached_tokens") and bool(
            (inp.requests["cached_tokens"].fillna(0).to_numpy(dtype=np.float64) > 0).any()):
        return True
    m = inp.metrics
    return m is not None and m.name_of("prefix_hits") is not None and (
        m.counter_increase("prefix_hits") or 0.0) > 0


def _preemptions(inp: AxisInput, step_kv: StepKv | None, sources: list[Source],
                 notes: list[str]) -> _Preemption:
    """Preemptions from the request table, else the step log, else the metrics; recomputed
    tokens estimated (see the package docstring) or exact from SGLang's counters."""
    m = inp.metrics
    prompt = inp.trace.array("prompt_len", np.float64)
    output = inp.trace.array("output_len", np.float64)
    pre_source = basis = None
    preempted = pre_total = None
    recomputed = low = high = None
    # NOTE: telemetry alone (no request) has no lengths to price a preemption with: None.
    per_request_estimate = float(np.mean(prompt + output / 2.0)) if prompt.size else None
    if inp.has("num_preemptions"):
        counts = inp.requests["num_preemptions"].fillna(0).to_numpy(dtype=np.float64)
        preempted, pre_total = int((counts > 0).sum()), int(counts.sum())
        recomputed = float((counts * (prompt + output / 2.0)).sum())
        low, high = float((counts * prompt).sum()), float((counts * (prompt + output)).sum())
        pre_source, basis = "requests", "Σ num_preemptions · (prompt_len + output_len / 2)"
        sources.append(Source.REQUESTS)
    elif inp.steps is not None and inp.steps.has_preemptions():
        assert step_kv is not None and step_kv.preempted_total is not None
        pre_total = step_kv.preempted_total
        recomputed = None if per_request_estimate is None else pre_total * per_request_estimate
        pre_source, basis = "steps", "preemptions × mean (prompt_len + output_len / 2)"
        sources.append(Source.STEPS)
    elif m is not None and m.name_of("preemptions") is not None:
        pre_total = round(m.counter_increase("preemptions") or 0.0)
        recomputed = None if per_request_estimate is None else pre_total * per_request_estimate
        pre_source, basis = "metrics", "preemptions × mean (prompt_len + output_len / 2)"
        sources.append(Source.METRICS)
    per_request = None if m is None else request_preemptions(m)
    if per_request is not None and pre_source in (None, "metrics"):
        # vLLM's per-request histogram: the finished requests' preemptions, and how many
        # were preempted at all (its le="0" bucket)
        if pre_source is None:
            pre_total = round(per_request.preemptions)
            recomputed = (None if per_request_estimate is None
                          else pre_total * per_request_estimate)
            pre_source, basis = "metrics", "preemptions × mean (prompt_len + output_len / 2)"
            sources.append(Source.METRICS)
        if per_request.preempted_requests is not None:
            preempted = round(per_request.preempted_requests)
    if pre_source in ("requests", "steps") and m is not None and m.name_of("preemptions"):
        engine_count = round(m.counter_increase("preemptions") or 0.0)
        if engine_count != pre_total:
            notes.append(f"the engine metrics count {engine_count} preemption(s) against "
                         f"{pre_total} in the {pre_source}; the {pre_source} are used (the "
                         "export may cover a different time range)")
    if step_kv is not None and step_kv.recomputed_total is not None:
        # An upper bound (vLLM's readmissions count a prefill preempted before it finished
        # whole: `ingest.traces.vcr_steps`); `trace simulate`'s is exact.
        recomputed = high = float(step_kv.recomputed_total)
        low = min(low, high) if low is not None else None
        basis = ("Σ recomputed_tokens of the step log, engine-counted: what the readmissions "
                 "after a preemption computed, an upper bound")
        sources.append(Source.STEPS)
        if inp.steps is not None and not inp.steps.complete("recomputed_tokens"):
            notes.append("recomputed_tokens is empty in some steps of the step log: they "
                         "count as 0, so the recompute may be higher")
    if m is not None and m.name_of("retracted_input_tokens") is not None:
        exact = (m.counter_increase("retracted_input_tokens") or 0.0) + (
            m.counter_increase("retracted_output_tokens") or 0.0)
        recomputed = low = high = exact
        basis = "sglang retracted input + output tokens (exact)"
        sources.append(Source.METRICS)
    if recomputed is not None and basis is not None:
        exact = "engine-counted" in basis or "(exact)" in basis
        if not exact and low is not None and _cache_hits(inp):
            low = 0.0  # a readmission may find all it had computed still cached
        notes.append(f"recomputed tokens counted as {basis}"
                     + ("" if exact else ", an estimate: nothing in the input counts them")
                     + ("" if exact else _ESTIMATE_HIGH_HERE if _cache_hits(inp)
                        else _ESTIMATE_MAY_BE_HIGH))
    return _Preemption(source=pre_source, basis=basis, preempted=preempted, total=pre_total,
                       recomputed=recomputed, low=low, high=high,
                       per_request=None if per_request is None else per_request.per_request)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Usage:
    """KV usage (ratio) over time, at preemption and its summary, with its source."""

    source: str | None = None
    summary: Summary | None = None
    at_preemption: float | None = None
    timeline: tuple[tuple[float, float], ...] = ()
    mean: float | None = None
    p95: float | None = None
    max: float | None = None
    full_share: float | None = None


def _usage(inp: AxisInput, step_kv: StepKv | None, t: Thresholds,
           sources: list[Source]) -> _Usage:
    """KV usage from the step log's blocks, else the engine's usage gauge."""
    m = inp.metrics
    usage_source = None
    usage = at_pre = None
    timeline: tuple[tuple[float, float], ...] = ()
    usage_mean = usage_p95 = usage_max = full = None
    if inp.step_has_kv_usage():
        assert inp.steps is not None and step_kv is not None
        # Passes over the log's batches: the usage of every step is never held.
        usage = kv_usage_summary(inp.steps)
        at_pre = step_kv.usage_at_preemption
        if usage.count and step_kv.usage_span is not None and usage.mean is not None:
            full = step_kv.full_steps / usage.count
            timeline = usage_timeline(step_usage(inp.steps), step_kv.usage_span, usage.mean)
        usage_source = "steps"
        sources.append(Source.STEPS)
    elif m is not None and (g := m.gauge("kv_usage", how="max")) is not None:
        samples = g["value"].to_numpy(dtype=np.float64)
        times = g["time_s"].to_numpy(dtype=np.float64)
        usage = summarize(lambda: [samples], (95,))
        if usage.mean is not None and times.size:
            timeline = usage_timeline(lambda: [(times, samples)],
                                      (float(times.min()), float(times.max())), usage.mean)
        usage_source = "metrics"
        bumps = m.counter_steps("preemptions")
        if bumps is not None and len(bumps):
            # The counter rose between the sample before it and the one that shows it, and a
            # preemption frees memory: the fuller of those two samples is the usage it met.
            at = np.searchsorted(g["time_s"].to_numpy(), bumps["time_s"].to_numpy(), "right") - 1
            at = np.clip(at, 0, len(g) - 1)
            before = np.clip(at - 1, 0, len(g) - 1)
            at_pre = float(np.maximum(samples[at], samples[before]).mean())
        if samples.size:
            full = float((samples >= t.kv_preempt_usage).mean())
        sources.append(Source.METRICS)
    if usage is not None and usage.count:
        usage_mean, usage_max = usage.mean, usage.max
        usage_p95 = usage.percentiles[95]

    return _Usage(source=usage_source, summary=usage, at_preemption=at_pre, timeline=timeline,
                  mean=usage_mean, p95=usage_p95, max=usage_max, full_share=full)


def _capacity(inp: AxisInput, step_kv: StepKv | None) -> tuple[float | None, str | None]:
    """The KV pool of one instance (tokens) and where it came from."""
    s, m, block = inp.settings, inp.metrics, int(inp.settings.block_size_tokens)
    capacity = cap_source = None
    if s.kv_capacity_tokens is not None:
        capacity, cap_source = float(s.kv_capacity_tokens), "--kv-capacity"
    elif inp.step_has("kv_blocks_total"):
        assert step_kv is not None and step_kv.max_blocks_total is not None
        capacity = step_kv.max_blocks_total * block
        cap_source = "step log kv_blocks_total × block size"
    elif m is not None and (g := m.gauge("max_total_tokens", how="max")) is not None:
        capacity, cap_source = float(g["value"].max()), m.name_of("max_total_tokens")
    return capacity, cap_source


@dataclass(frozen=True, slots=True, kw_only=True)
class _Demand:
    """Estimated KV demand (tokens) per instance against the capacity."""

    peak: float | None = None
    mean: float | None = None
    over_share: float | None = None
    extra: float | None = None
    extra_bytes: float | None = None


def _demand(inp: AxisInput, capacity: float | None, notes: list[str]) -> _Demand:
    """Block-rounded KV demand over time from the request table (an upper bound)."""
    s, block = inp.settings, int(inp.settings.block_size_tokens)
    prompt = inp.trace.array("prompt_len", np.float64)
    output = inp.trace.array("output_len", np.float64)
    peak = mean_demand = over_share = extra = extra_bytes = None
    if inp.has("finish_s"):
        req = inp.requests
        finish = req["finish_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        begin = None
        for column in ("scheduled_s", "first_token_s", "arrival_s"):
            if inp.has(column):
                begin = req[column].to_numpy(dtype=np.float64, na_value=np.nan)
                if column == "arrival_s":
                    notes.append("KV demand counts requests from arrival (no scheduled_s or "
                                 "first_token_s): queued requests inflate it")
                break
        assert begin is not None
        first = (req["first_token_s"].to_numpy(dtype=np.float64, na_value=np.nan)
                 if inp.has("first_token_s") else np.full(len(req), np.nan))
        if inp.has("decode_start_s"):
            # A handed-off request holds KV on its decode instance from its first decode
            # step (the prefill instance frees it once the first token is out).
            split = handed_off(req)
            start = req["decode_start_s"].to_numpy(dtype=np.float64, na_value=np.nan)
            split &= np.isfinite(start)
            begin = np.where(split, start, begin)
            first = np.where(split, start, first)
        ok = np.isfinite(begin) & np.isfinite(finish) & (finish >= begin)
        instance = (req["instance"].fillna("").astype(str).to_numpy() if inp.has("instance")
                    else np.full(len(req), ""))
        peaks, means, overs = [], [], []
        for inst in np.unique(instance[ok]):
            sel = ok & (instance == inst)
            points = np.unique(finish[sel])
            points = np.nextafter(points, -np.inf)  # just before a finish frees its blocks
            if points.size > MAX_DEMAND_POINTS:
                points = points[np.linspace(0, points.size - 1, MAX_DEMAND_POINTS).astype(int)]
            d = demand_tokens(points, begin[sel], first[sel], finish[sel], prompt[sel],
                              output[sel], block)
            peaks.append(float(d.max()))
            means.append(float(d.mean()))
            if capacity is not None:
                overs.append(float((d > capacity).mean()))
        if peaks:
            peak, mean_demand = max(peaks), float(np.mean(means))
            if capacity is not None:
                over_share = float(np.mean(overs))
                extra = max(0.0, peak - capacity)
                if s.kv_bytes_per_token is not None:
                    extra_bytes = extra * s.kv_bytes_per_token
    return _Demand(peak=peak, mean=mean_demand, over_share=over_share, extra=extra,
                   extra_bytes=extra_bytes)


def analyze_kv_memory(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure preemption, KV usage and demand, and decide whether KV memory is the limit."""
    sources: list[Source] = []
    notes: list[str] = []
    # One pass over the step log for preemptions, the pool size and the usage at preemption.
    step_kv = None if inp.steps is None else read_step_kv(inp.steps, t.kv_preempt_usage)
    pre = _preemptions(inp, step_kv, sources, notes)
    use = _usage(inp, step_kv, t, sources)
    if use.source == "metrics" and inp.metrics is not None and (
            engines := inp.metrics.engines("kv_usage")) > 1:
        notes.append(f"the KV usage is the fullest of the {engines} engines at each sample "
                     f"({inp.metrics.name_of('kv_usage')}), not their mean")
    capacity, cap_source = _capacity(inp, step_kv)
    dem = _demand(inp, capacity, notes)
    metrics = _metrics(inp, pre, use, (capacity, cap_source), dem)
    if dem.peak is not None and Source.REQUESTS not in sources:
        sources.append(Source.REQUESTS)
    missing = _missing(pre, use, capacity, dem)
    if not (pre.total is not None or use.summary is not None
            or (dem.peak is not None and capacity)):
        return AxisResult(
            axis=AxisName.KV_MEMORY, status=Status.INSUFFICIENT_DATA, cause=None, score=None,
            score_basis="share of all tokens recomputed after preemption",
            sources=tuple(dict.fromkeys(sources)), metrics=metrics, missing=tuple(missing),
            next_steps=("export vllm:num_preemptions_total and vllm:kv_cache_usage_perc, or log "
                        "per-request preemption counts",),
            notes=tuple(notes),
        )

    hits = evaluate(RULES, metrics, t)
    status = status_from(hits, SEVERITY_OF)
    fraction = metrics.recompute_token_fraction
    score = fraction if fraction is not None else (0.0 if pre.total == 0 else None)
    said, next_steps = said_when_fired(RULES, hits, metrics, t)
    if status is not Status.OK:
        next_steps.insert(0, "compare capacity options in the ledger (larger pool, FP8 KV, "
                          "lower max_num_seqs) and recheck preemptions after the change")
    next_steps += [f"add {item}" for item in missing]
    return AxisResult(
        axis=AxisName.KV_MEMORY, status=status, cause=cause_of(RULES, hits), score=finite(score),
        score_basis="share of all tokens recomputed after preemption",
        sources=tuple(dict.fromkeys(sources)), metrics=metrics, hits=tuple(hits),
        missing=tuple(missing), next_steps=tuple(next_steps), notes=(*notes, *said),
    )


def _metrics(inp: AxisInput, pre: _Preemption, use: _Usage,
             pool: tuple[float | None, str | None], dem: _Demand) -> KvMetrics:
    """The axis' measurements from its phases (`pool`: the KV capacity of one instance in
    tokens and where it came from), plus the share of requests preempted and of work
    recomputed, the safe concurrency and block waste."""
    block = int(inp.settings.block_size_tokens)
    prompt = inp.trace.array("prompt_len", np.float64)
    output = inp.trace.array("output_len", np.float64)
    share = ratio(pre.preempted, inp.num_requests) if pre.preempted is not None else None
    fraction = ratio(pre.recomputed, float((prompt + output).sum()))
    capacity, cap_source = pool
    n_safe = None
    if capacity is not None and prompt.size:
        n_safe = ratio(capacity, float(np.percentile(prompt + output, 95)))
    lengths = prompt + output
    rounded = np.ceil(lengths / block) * block
    waste = ratio(float((rounded - lengths).sum()), float(rounded.sum()))
    return KvMetrics(
        preemption_source=pre.source,
        preempted_requests=pre.preempted,
        preemptions_total=pre.total,
        preemptions_per_request=pre.per_request,
        preempted_request_share=share,
        recomputed_tokens=pre.recomputed,
        recomputed_tokens_low=pre.low,
        recomputed_tokens_high=pre.high,
        recompute_basis=pre.basis,
        recompute_token_fraction=fraction,
        kv_usage_source=use.source,
        kv_usage_mean=use.mean,
        kv_usage_p95=use.p95,
        kv_usage_max=use.max,
        kv_usage_at_preemption=use.at_preemption,
        kv_usage_over_time=use.timeline,
        full_share=use.full_share,
        block_size_tokens=block,
        kv_capacity_tokens=capacity,
        capacity_source=cap_source,
        peak_demand_tokens=dem.peak,
        mean_demand_tokens=dem.mean,
        demand_over_capacity_share=dem.over_share,
        extra_kv_tokens=dem.extra,
        extra_kv_bytes=dem.extra_bytes,
        n_safe_p95=n_safe,
        block_waste_fraction=waste,
        shared_block_fraction=shared_fraction(inp, block),
    )


def _missing(pre: _Preemption, use: _Usage, capacity: float | None, dem: _Demand) -> list[str]:
    """The inputs that would decide (or sharpen) the axis."""
    missing = []
    if pre.total is None:
        missing.append("num_preemptions (request table), num_preempted or num_readmitted "
                       "(step log) or "
                       "vllm:num_preemptions_total / sglang:num_retracted_requests_total")
    if use.summary is None:
        missing.append("kv_blocks_used and kv_blocks_total or kv_usage (step log) or "
                       "vllm:kv_cache_usage_perc / sglang:token_usage (metrics)")
    if capacity is None or dem.peak is None:
        missing.append("--kv-capacity with scheduled_s, first_token_s and finish_s for the "
                       "demand estimate")
    return missing
