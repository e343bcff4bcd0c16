"""KV-memory axis: is work lost to preemption, and is the KV pool what limits it (§5, B1–B4).

Metrics (units in the names):

- preempted_requests = #{num_preemptions > 0}; preemptions_total = Σ num_preemptions (request
  table), else Σ num_preempted (step log), else the increase of vllm:num_preemptions_total /
  sglang:num_retracted_requests_total (metrics). preempted_request_share = preempted / requests.
- recomputed_tokens: a recompute re-prefills p + g tokens (prompt plus tokens generated so far,
  cost-model §5). g is not logged, so the estimate takes g = output_len / 2:
  Σ num_preemptions · (prompt_len + output_len / 2) (tokens), bounded below by g = 0 and above
  by g = output_len. SGLang's retracted input + output token counters, when exported, are
  used as the exact figure. Metrics-only counts use the mean per-request estimate.
- recompute_token_fraction = recomputed_tokens / Σ (prompt_len + output_len) (ratio); the
  axis score ("work lost").
- kv_usage = kv_blocks_used / kv_blocks_total per step (step log), else vllm:kv_cache_usage_perc
  / sglang:token_usage (metrics, the fullest engine per sample): mean, P95, max (ratio);
  kv_usage_at_preemption = mean usage over steps with num_preempted > 0 (or metric samples at
  which the preemption counter rose); kv_usage_over_time = (bucket start, mean usage) over up to
  20 equal time buckets of the step log or export (s, ratio); full_share = share of steps
  with usage ≥ kv_preempt_usage.
- kv_capacity_tokens per instance: --kv-capacity, else max kv_blocks_total × block size (step
  log), else sglang:max_total_num_tokens (metrics).
- demand_tokens(t) per instance = Σ over requests holding KV at t of ceil((prompt_len + g(t)) /
  B) · B, a request holding KV from scheduled_s (else first_token_s, else arrival_s) to
  finish_s, g(t) growing linearly from 0 at first_token_s to output_len at finish_s. Prefix
  sharing is not subtracted, so this is an upper bound. peak_demand_tokens = max over t and
  instances; extra_kv_tokens = peak − capacity; extra_kv_bytes = that · kv_bytes_per_token.
- n_safe_p95 = kv_capacity_tokens / P95(prompt_len + output_len): concurrency that never
  preempts (requests).
- block_waste_fraction = Σ (ceil(len/B)·B − len) / Σ ceil(len/B)·B over final lengths len =
  prompt_len + output_len at block size B (ratio): PagedAttention's internal fragmentation.
- shared_block_fraction = 1 − distinct prefix-chained full prompt blocks / all full prompt
  blocks (ratio): blocks a prefix cache can share; needs prompt content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

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
from yaotu_trace.data.order_stats import BlockSum, KeyedBlockSum, summarize
from yaotu_trace.data.steplog import StepLog, column, kv_usage, kv_usage_summary
from yaotu_trace.diagnosis.rules import SEVERITY_OF
from yaotu_trace.diagnosis.thresholds import Thresholds
from yaotu_trace.errors import YaotuError

_MAX_POINTS = 4000  # demand evaluation points (all finishes up to this many)
_CHUNK = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class KvMetrics:
    """The KV-memory axis' measurements (None when their inputs are absent)."""

    preemption_source: str | None
    preempted_requests: int | None
    preemptions_total: int | None
    preempted_request_share: float | None
    recomputed_tokens: float | None
    recomputed_tokens_low: float | None
    recomputed_tokens_high: float | None
    recompute_basis: str | None
    recompute_token_fraction: float | None
    kv_usage_source: str | None
    kv_usage_mean: float | None
    kv_usage_p95: float | None
    kv_usage_max: float | None
    kv_usage_at_preemption: float | None
    kv_usage_over_time: tuple[tuple[float, float], ...]
    full_share: float | None
    block_size_tokens: int
    kv_capacity_tokens: float | None
    capacity_source: str | None
    peak_demand_tokens: float | None
    mean_demand_tokens: float | None
    demand_over_capacity_share: float | None
    extra_kv_tokens: float | None
    extra_kv_bytes: float | None
    n_safe_p95: float | None
    block_waste_fraction: float | None
    shared_block_fraction: float | None


def demand_tokens(
    times: np.ndarray, begin: np.ndarray, first: np.ndarray, finish: np.ndarray,
    prompt: np.ndarray, output: np.ndarray, block: int,
) -> np.ndarray:
    """Block-rounded KV tokens held at each time (see the module docstring)."""
    out = np.zeros(times.size)
    first = np.where(np.isfinite(first), first, begin)
    decode = np.maximum(finish - first, 1e-12)
    order = np.argsort(times)
    for lo in range(0, times.size, _CHUNK):
        idx = order[lo:lo + _CHUNK]
        t = times[idx]
        # Only requests alive somewhere in this chunk's time range can hold KV at its points,
        # so the matrix is (points × concurrency), not (points × requests).
        near = (begin <= t.max()) & (finish > t.min())
        b, f, fi, d = begin[near], finish[near], first[near], decode[near]
        p, o = prompt[near], output[near]
        tt = t[:, None]
        live = (b[None, :] <= tt) & (tt < f[None, :])
        g = np.clip((tt - fi[None, :]) / d[None, :], 0.0, 1.0) * o[None, :]
        tokens = np.ceil((p[None, :] + np.floor(g)) / block) * block
        out[idx] = np.where(live, tokens, 0.0).sum(axis=1)
    return out


def usage_timeline(
    read: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]], span: tuple[float, float],
    mean: float, buckets: int = 20,
) -> tuple[tuple[float, float], ...]:
    """Mean KV usage over up to `buckets` equal time buckets: (bucket start s, mean ratio).

    `read()` passes over (times, usage) batches of a non-empty sample; `span` is its first and
    last time and `mean` its mean usage. The bucket sums are taken in fixed blocks, so a step
    log streamed from disk gives the same numbers as one in memory.
    """
    lo, hi = span
    if hi <= lo:
        return ((lo, mean),)
    width = (hi - lo) / buckets
    sums = KeyedBlockSum(buckets)
    counts = np.zeros(buckets, dtype=np.int64)
    for times, usage in read():
        idx = np.minimum(((times - lo) / width).astype(np.int64), buckets - 1)
        sums.add(idx, usage)
        counts += np.bincount(idx, minlength=buckets)
    means = sums.totals()
    return tuple((lo + b * width, float(means[b] / counts[b]))
                 for b in range(buckets) if counts[b])


@dataclass(frozen=True, slots=True, kw_only=True)
class _StepKv:
    """What one pass over the step log gives the memory axis."""

    preempted_total: int | None
    max_blocks_total: float | None
    usage_at_preemption: float | None
    full_steps: int
    usage_span: tuple[float, float] | None  # first and last start of a step with a usage


def _step_kv(log: StepLog, full_usage: float) -> _StepKv:
    """Preemptions, the largest pool, the usage at preemption and the time range of the usage
    from one pass over the log."""
    preempted = 0 if "num_preempted" in log.columns else None
    largest = -np.inf
    lo, hi = np.inf, -np.inf
    at_pre, at_pre_steps, full = BlockSum(), 0, 0
    for b in log.batches(("num_preempted", "kv_blocks_used", "kv_blocks_total")):
        pre = (column(b, "num_preempted", 0.0) if "num_preempted" in b.columns
               else np.zeros(len(b)))
        if preempted is not None:
            preempted += int(b["num_preempted"].fillna(0).sum())
        if "kv_blocks_total" in b.columns:
            largest = float(np.fmax(largest, np.fmax.reduce(column(b, "kv_blocks_total"),
                                                            initial=-np.inf)))
        if "kv_blocks_used" in b.columns and "kv_blocks_total" in b.columns:
            usage = kv_usage(b)
            ok = np.isfinite(usage)
            hit = ok & (pre > 0)
            at_pre.add(usage[hit])
            at_pre_steps += int(hit.sum())
            full += int((usage[ok] >= full_usage).sum())
            if ok.any():
                times = column(b, "start_s")[ok]
                lo, hi = min(lo, float(times.min())), max(hi, float(times.max()))
    return _StepKv(
        preempted_total=preempted,
        max_blocks_total=largest if np.isfinite(largest) else None,
        usage_at_preemption=at_pre.total() / at_pre_steps if at_pre_steps else None,
        full_steps=full,
        usage_span=(lo, hi) if lo <= hi else None,
    )


def _step_usage(log: StepLog) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(start s, usage) of the steps with a finite KV usage, one pass per call."""
    def read() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for b in log.batches(("kv_blocks_used", "kv_blocks_total")):
            usage = kv_usage(b)
            ok = np.isfinite(usage)
            yield column(b, "start_s")[ok], usage[ok]
    return read


def shared_fraction(inp: AxisInput, block: int) -> float | None:
    """Share of full prompt blocks that repeat an earlier request's chained prefix block."""
    found = _chains(inp, block)
    if found is None:
        return None
    chains, _ = found
    total = int(chains.ids.size)
    return None if total == 0 else 1.0 - chains.num_distinct / total


def shared_prefix_tokens(inp: AxisInput, block: int) -> float | None:
    """Tokens of KV that hold every shared prefix once: distinct chained prompt blocks that
    more than one request uses, × the block size."""
    found = _chains(inp, block)
    if found is None:
        return None
    chains, used_block = found
    if chains.ids.size == 0:
        return 0.0
    counts = np.bincount(np.asarray(chains.ids, dtype=np.int64))
    return float((counts >= 2).sum() * used_block)


def _chains(inp: AxisInput, block: int) -> tuple[Any, int] | None:
    """The prompts' chained block ids under plain rules (and the block size used), or None."""
    trace = inp.trace
    if trace is None or trace.content_column is None:
        return None
    from yaotu_trace.replay.prepare import prepare
    from yaotu_trace.replay.rules import rules_for

    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    if source is not None and block % source:
        block = source
    try:
        rules = rules_for("none", block_size_tokens=block)
        # Streams the prompts from a Parquet file left on disk (`Trace.lazy`): out of core.
        chains = prepare(trace, stream=True).chains(rules, namespaces=False)
    except (YaotuError, ValueError):
        return None
    return chains, block


def analyze_kv_memory(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Measure preemption, KV usage and demand, and decide whether KV memory is the limit."""
    req = inp.requests
    s = inp.settings
    block = int(s.block_size_tokens)
    m = inp.metrics
    sources: list[Source] = []
    notes: list[str] = []
    prompt = req["prompt_len"].to_numpy(dtype=np.float64)
    output = req["output_len"].to_numpy(dtype=np.float64)
    total_work = float((prompt + output).sum())

    # Preemptions and the work they redo.
    pre_source = basis = None
    preempted = pre_total = None
    recomputed = low = high = None
    per_request_estimate = float(np.mean(prompt + output / 2.0)) if prompt.size else 0.0
    # One pass over the step log for preemptions, the pool size and the usage at preemption.
    step_kv = None if inp.steps is None else _step_kv(inp.steps, t.kv_preempt_usage)
    if inp.has("num_preemptions"):
        counts = req["num_preemptions"].fillna(0).to_numpy(dtype=np.float64)
        preempted, pre_total = int((counts > 0).sum()), int(counts.sum())
        recomputed = float((counts * (prompt + output / 2.0)).sum())
        low, high = float((counts * prompt).sum()), float((counts * (prompt + output)).sum())
        pre_source, basis = "requests", "Σ num_preemptions · (prompt_len + output_len / 2)"
        sources.append(Source.REQUESTS)
    elif inp.step_has("num_preempted"):
        assert step_kv is not None and step_kv.preempted_total is not None
        pre_total = step_kv.preempted_total
        recomputed = pre_total * per_request_estimate
        pre_source, basis = "steps", "preemptions × mean (prompt_len + output_len / 2)"
        sources.append(Source.STEPS)
    elif m is not None and m.name_of("preemptions") is not None:
        pre_total = round(m.counter_increase("preemptions") or 0.0)
        recomputed = pre_total * per_request_estimate
        pre_source, basis = "metrics", "preemptions × mean (prompt_len + output_len / 2)"
        sources.append(Source.METRICS)
    if pre_source in ("requests", "steps") and m is not None and m.name_of("preemptions"):
        engine_count = round(m.counter_increase("preemptions") or 0.0)
        if engine_count != pre_total:
            notes.append(f"the engine metrics count {engine_count} preemption(s) against "
                         f"{pre_total} in the {pre_source}; the {pre_source} are used (the "
                         "export may cover a different time range)")
    if m is not None and m.name_of("retracted_input_tokens") is not None:
        exact = (m.counter_increase("retracted_input_tokens") or 0.0) + (
            m.counter_increase("retracted_output_tokens") or 0.0)
        recomputed = low = high = exact
        basis = "sglang retracted input + output tokens (exact)"
        sources.append(Source.METRICS)
    share = ratio(preempted, len(req)) if preempted is not None else None
    fraction = ratio(recomputed, total_work)

    # KV usage over time, and at the moments of preemption.
    usage_source = None
    usage = at_pre = None
    timeline: tuple[tuple[float, float], ...] = ()
    usage_mean = usage_p95 = usage_max = full = None
    if inp.step_has("kv_blocks_used") and inp.step_has("kv_blocks_total"):
        assert inp.steps is not None and step_kv is not None
        # Passes over the log's batches: the usage of every step is never held.
        usage = kv_usage_summary(inp.steps)
        at_pre = step_kv.usage_at_preemption
        if usage.count and step_kv.usage_span is not None and usage.mean is not None:
            full = step_kv.full_steps / usage.count
            timeline = usage_timeline(_step_usage(inp.steps), step_kv.usage_span, usage.mean)
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
            idx = np.searchsorted(g["time_s"].to_numpy(), bumps["time_s"].to_numpy(), "right") - 1
            idx = np.clip(idx, 0, len(g) - 1)
            at_pre = float(samples[idx].mean())
        if samples.size:
            full = float((samples >= t.kv_preempt_usage).mean())
        sources.append(Source.METRICS)
    if usage is not None and usage.count:
        usage_mean, usage_max = usage.mean, usage.max
        usage_p95 = usage.percentiles[95]

    # Capacity and estimated demand.
    capacity = cap_source = None
    if s.kv_capacity_tokens is not None:
        capacity, cap_source = float(s.kv_capacity_tokens), "--kv-capacity"
    elif inp.step_has("kv_blocks_total"):
        assert step_kv is not None and step_kv.max_blocks_total is not None
        capacity = step_kv.max_blocks_total * block
        cap_source = "step log kv_blocks_total × block size"
    elif m is not None and (g := m.gauge("max_total_tokens", how="max")) is not None:
        capacity, cap_source = float(g["value"].max()), "sglang:max_total_num_tokens"
    peak = mean_demand = over_share = extra = extra_bytes = None
    if inp.has("finish_s"):
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
        ok = np.isfinite(begin) & np.isfinite(finish) & (finish >= begin)
        instance = (req["instance"].fillna("").astype(str).to_numpy() if inp.has("instance")
                    else np.full(len(req), ""))
        peaks, means, overs = [], [], []
        for inst in np.unique(instance[ok]):
            sel = ok & (instance == inst)
            points = np.unique(finish[sel])
            points = np.nextafter(points, -np.inf)  # just before a finish frees its blocks
            if points.size > _MAX_POINTS:
                points = points[np.linspace(0, points.size - 1, _MAX_POINTS).astype(int)]
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
    n_safe = None
    if capacity is not None and prompt.size:
        n_safe = ratio(capacity, float(np.percentile(prompt + output, 95)))

    lengths = prompt + output
    rounded = np.ceil(lengths / block) * block
    waste = ratio(float((rounded - lengths).sum()), float(rounded.sum()))
    shared = shared_fraction(inp, block)

    metrics = KvMetrics(
        preemption_source=pre_source,
        preempted_requests=preempted,
        preemptions_total=pre_total,
        preempted_request_share=share,
        recomputed_tokens=recomputed,
        recomputed_tokens_low=low,
        recomputed_tokens_high=high,
        recompute_basis=basis,
        recompute_token_fraction=fraction,
        kv_usage_source=usage_source,
        kv_usage_mean=usage_mean,
        kv_usage_p95=usage_p95,
        kv_usage_max=usage_max,
        kv_usage_at_preemption=at_pre,
        kv_usage_over_time=timeline,
        full_share=full,
        block_size_tokens=block,
        kv_capacity_tokens=capacity,
        capacity_source=cap_source,
        peak_demand_tokens=peak,
        mean_demand_tokens=mean_demand,
        demand_over_capacity_share=over_share,
        extra_kv_tokens=extra,
        extra_kv_bytes=extra_bytes,
        n_safe_p95=n_safe,
        block_waste_fraction=waste,
        shared_block_fraction=shared,
    )
    if peak is not None and Source.REQUESTS not in sources:
        sources.append(Source.REQUESTS)

    decided = pre_total is not None or usage is not None or (peak is not None and capacity)
    missing = []
    if pre_total is None:
        missing.append("num_preemptions (request table), num_preempted (step log) or "
                       "vllm:num_preemptions_total / sglang:num_retracted_requests_total")
    if usage is None:
        missing.append("kv_blocks_used and kv_blocks_total (step log) or "
                       "vllm:kv_cache_usage_perc / sglang:token_usage (metrics)")
    if capacity is None or peak is None:
        missing.append("--kv-capacity with scheduled_s, first_token_s and finish_s for the "
                       "demand estimate")
    if not decided:
        return AxisResult(
            axis=AxisName.KV_MEMORY, status=Status.INSUFFICIENT_DATA, cause=None, score=None,
            score_basis="share of all tokens recomputed after preemption",
            sources=tuple(dict.fromkeys(sources)), metrics=metrics, missing=tuple(missing),
            next_steps=("export vllm:num_preemptions_total and vllm:kv_cache_usage_perc, or log "
                        "per-request preemption counts",),
            notes=tuple(notes),
        )

    hits = _kv_rules(metrics, t)
    status = status_from(hits, SEVERITY_OF)
    ids = {h.rule_id for h in hits}
    cause = ("kv_capacity" if ids & {"K001", "K004"} else
             "spiky_demand" if "K005" in ids else
             "preemption" if ids & {"K002", "K003"} else None)
    score = fraction if fraction is not None else (0.0 if pre_total == 0 else None)
    next_steps = []
    if status is not Status.OK:
        next_steps.append("compare capacity options in the ledger (larger pool, FP8 KV, lower "
                          "max_num_seqs) and recheck preemptions after the change")
    next_steps += [f"add {item}" for item in missing]
    return AxisResult(
        axis=AxisName.KV_MEMORY, status=status, cause=cause, score=finite(score),
        score_basis="share of all tokens recomputed after preemption",
        sources=tuple(dict.fromkeys(sources)), metrics=metrics, hits=tuple(hits),
        missing=tuple(missing), next_steps=tuple(next_steps), notes=tuple(notes),
    )


def _kv_rules(mt: KvMetrics, t: Thresholds) -> list[RuleHit]:
    """Rules B1–B4 of cost-model §7 (plus block waste), in id order."""
    hits: list[RuleHit] = []
    preempting = (mt.preemptions_total or 0) > 0
    # Without preemption times, the P95 of usage stands in for "usage at those times".
    at_name, at_value = "kv_usage_at_preemption", mt.kv_usage_at_preemption
    if at_value is None:
        at_name, at_value = "kv_usage_p95", mt.kv_usage_p95
    if preempting and at_value is not None and at_value >= t.kv_preempt_usage:
        hits.append(RuleHit(rule_id="K001", evidence=(
            fact("preemptions_total", mt.preemptions_total, "preemptions"),
            check(at_name, at_value, ">=", "kv_preempt_usage", t.kv_preempt_usage),
        )))
    frac, share = mt.recompute_token_fraction, mt.preempted_request_share
    if preempting and ((frac is not None and frac > t.recompute_material)
                       or (share is not None and share > t.preempted_material)):
        hits.append(RuleHit(rule_id="K002", evidence=(
            check("recompute_token_fraction", frac, ">", "recompute_material",
                  t.recompute_material),
            check("preempted_request_share", share, ">", "preempted_material",
                  t.preempted_material),
            fact("recomputed_tokens", mt.recomputed_tokens, "tokens"),
        )))
    if preempting and frac is not None and frac > t.recompute_dominant:
        hits.append(RuleHit(rule_id="K003", evidence=(
            check("recompute_token_fraction", frac, ">", "recompute_dominant",
                  t.recompute_dominant),
            fact("recomputed_tokens", mt.recomputed_tokens, "tokens"),
        )))
    if (mt.peak_demand_tokens is not None and mt.kv_capacity_tokens is not None
            and mt.peak_demand_tokens > mt.kv_capacity_tokens):
        hits.append(RuleHit(rule_id="K004", evidence=(
            fact("peak_demand_tokens", mt.peak_demand_tokens, "tokens"),
            fact("kv_capacity_tokens", mt.kv_capacity_tokens, "tokens"),
            fact("demand_over_capacity_share", mt.demand_over_capacity_share, "ratio"),
            fact("extra_kv_bytes", mt.extra_kv_bytes, "bytes"),
        )))
    if preempting and mt.kv_usage_mean is not None and mt.kv_usage_mean < t.kv_low_usage and (
            at_value is None or at_value < t.kv_preempt_usage):
        hits.append(RuleHit(rule_id="K005", evidence=(
            check("kv_usage_mean", mt.kv_usage_mean, "<", "kv_low_usage", t.kv_low_usage),
            fact("preemptions_total", mt.preemptions_total, "preemptions"),
            fact("n_safe_p95", mt.n_safe_p95, "requests"),
        )))
    if mt.block_waste_fraction is not None and mt.block_waste_fraction > t.block_waste:
        hits.append(RuleHit(rule_id="K006", evidence=(
            check("block_waste_fraction", mt.block_waste_fraction, ">", "block_waste",
                  t.block_waste),
            fact("block_size_tokens", mt.block_size_tokens, "tokens"),
        )))
    return hits
