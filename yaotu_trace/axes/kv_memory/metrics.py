"""The kv_memory axis' measurements (see the package docstring for the definitions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from yaotu_trace.axes.base import AxisInput, Evidence, fact, measured
from yaotu_trace.data.order_stats import BlockSum, KeyedBlockSum
from yaotu_trace.data.steplog import (
    KV_USAGE_COLUMNS,
    PREEMPTION_COLUMNS,
    StepLog,
    column,
    kv_usage,
    preemptions,
)
from yaotu_trace.errors import YaotuError
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for

MAX_DEMAND_POINTS = 4000  # demand evaluation points (all finishes up to this many)
_CHUNK = 32  # demand points per matrix: a few, so each spans a short time range


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
    # Mean preemptions of the requests that finished (vLLM's request_num_preemptions).
    preemptions_per_request: float | None = None

    def headline(self) -> tuple[Evidence, ...]:
        """The measurements shown as the axis' evidence when no rule fired on it (with telemetry
        alone, what it measures)."""
        return measured(
            (
                fact("preemptions_total", self.preemptions_total, "preemptions"),
                fact("recompute_token_fraction", self.recompute_token_fraction, "ratio"),
                fact("kv_usage_p95", self.kv_usage_p95, "ratio"),
            ),
            (
                fact("kv_usage_max", self.kv_usage_max, "ratio"),
                fact("kv_capacity_tokens", self.kv_capacity_tokens, "tokens"),
            ),
        )


def demand_tokens(
    times: np.ndarray, begin: np.ndarray, first: np.ndarray, finish: np.ndarray,
    prompt: np.ndarray, output: np.ndarray, block: int,
) -> np.ndarray:
    """Block-rounded KV tokens held at each time (see the module docstring).

    Each chunk of time points sums over the requests alive somewhere in its time range only,
    found by their begin times (sorted once): those that begin within the longest request's
    duration before the range, and finish inside or after it. The points are sampled over the
    whole trace, so a chunk of a few points spans a short range and its matrix is (points ×
    concurrency); a wide chunk held every request of its span (10 s at 1e10 tokens). The sums
    are of whole tokens, so they are exact in any order.
    """
    out = np.zeros(times.size)
    first = np.where(np.isfinite(first), first, begin)
    decode = np.maximum(finish - first, 1e-12)
    order = np.argsort(times)
    by_begin = np.argsort(begin, kind="stable")
    begin_sorted = begin[by_begin]
    longest = float(np.max(finish - begin)) if begin.size else 0.0
    for lo in range(0, times.size, _CHUNK):
        idx = order[lo:lo + _CHUNK]
        t = times[idx]
        low, high = float(t.min()), float(t.max())
        span = by_begin[np.searchsorted(begin_sorted, low - longest, side="left"):
                        np.searchsorted(begin_sorted, high, side="right")]
        near = span[finish[span] > low]
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
class StepKv:
    """What one pass over the step log gives the memory axis."""

    preempted_total: int | None
    max_blocks_total: float | None
    usage_at_preemption: float | None
    full_steps: int
    usage_span: tuple[float, float] | None  # first and last start of a step with a usage
    # Σ recomputed_tokens: what the engine computed again after preemptions (None: not logged).
    recomputed_total: int | None = None


def read_step_kv(log: StepLog, full_usage: float) -> StepKv:
    """Preemptions, the largest pool, the usage at preemption and the time range of the usage
    from one pass over the log."""
    preempted = 0 if log.has_preemptions() else None
    recomputed = 0 if log.has("recomputed_tokens") else None
    largest = -np.inf
    lo, hi = np.inf, -np.inf
    at_pre, at_pre_steps, full = BlockSum(), 0, 0
    usage_logged = log.has_kv_usage()
    for b in log.batches((*PREEMPTION_COLUMNS, "recomputed_tokens", *KV_USAGE_COLUMNS)):
        # Only a step's own preemptions place them at its KV usage (not readmissions).
        pre = (column(b, "num_preempted", 0.0) if "num_preempted" in b.columns
               else np.zeros(len(b)))
        if preempted is not None:
            preempted += int(preemptions(b).sum())
        if recomputed is not None:
            recomputed += int(b["recomputed_tokens"].fillna(0).sum())
        if "kv_blocks_total" in b.columns:
            largest = float(np.fmax(largest, np.fmax.reduce(column(b, "kv_blocks_total"),
                                                            initial=-np.inf)))
        if usage_logged:
            usage = kv_usage(b)
            ok = np.isfinite(usage)
            hit = ok & (pre > 0)
            at_pre.add(usage[hit])
            at_pre_steps += int(hit.sum())
            full += int((usage[ok] >= full_usage).sum())
            if ok.any():
                times = column(b, "start_s")[ok]
                lo, hi = min(lo, float(times.min())), max(hi, float(times.max()))
    return StepKv(
        preempted_total=preempted,
        max_blocks_total=largest if np.isfinite(largest) else None,
        usage_at_preemption=at_pre.total() / at_pre_steps if at_pre_steps else None,
        full_steps=full,
        usage_span=(lo, hi) if lo <= hi else None,
        recomputed_total=recomputed,
    )


def step_usage(log: StepLog) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(start s, usage) of the steps with a finite KV usage, one pass per call."""
    def read() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for b in log.batches(KV_USAGE_COLUMNS):
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
