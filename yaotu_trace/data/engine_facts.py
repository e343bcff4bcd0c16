"""What the engines' labelled and per-request series say, as quantities the axes read.

`EngineMetrics` maps names to series; this module turns the series that the 2026 engines split
by a label, or keep per request, into the few numbers an axis needs (engines.md §1.9, §2.7):

- why requests wait: vLLM's `num_requests_waiting_by_reason{reason=capacity|deferred}` (or the
  stats line's `Deferred: N`), for queueing;
- preemptions per finished request: vLLM's `request_num_preemptions` histogram, for kv_memory;
- where prompt tokens came from: vLLM's `prompt_tokens_by_source{source=local_compute|
  local_cache_hit|external_kv_transfer}`, SGLang's `cached_tokens_total{cache_source=device|
  host|storage}` within its prompt tokens, and vLLM's external (connector) prefix cache
  queries and hits, for prefix_reuse;
- KV moved between instances: the KV connector's `KV Transfer metrics` log line, SGLang's
  `kv_transfer_latency_ms` and `kv_transfer_total_mb` histograms (a disaggregated prefill
  server's), for placement.

Each function returns None when the export lacks the series, never a zero it did not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yaotu_trace.data.engine_metrics import EngineMetrics


@dataclass(frozen=True, slots=True)
class WaitingReasons:
    """Mean requests waiting (summed over engines per sample) by why they wait."""

    capacity_mean: float
    deferred_mean: float
    source: str

    @property
    def deferred_share(self) -> float | None:
        total = self.capacity_mean + self.deferred_mean
        return self.deferred_mean / total if total > 0 else None


def waiting_reasons(m: EngineMetrics) -> WaitingReasons | None:
    capacity = m.gauge("num_waiting_by_reason", value="capacity")
    deferred = m.gauge("num_waiting_by_reason", value="deferred")
    if capacity is None or deferred is None or (capacity.empty and deferred.empty):
        return None
    return WaitingReasons(
        capacity_mean=float(capacity["value"].mean()) if len(capacity) else 0.0,
        deferred_mean=float(deferred["value"].mean()) if len(deferred) else 0.0,
        source=str(m.name_of("num_waiting_by_reason")))


@dataclass(frozen=True, slots=True)
class RequestPreemptions:
    """Preemptions of the requests that finished over the export, from vLLM's histogram."""

    requests: float
    preemptions: float
    # Requests preempted at least once (count less the `le="0"` bucket), None without it.
    preempted_requests: float | None

    @property
    def per_request(self) -> float | None:
        return self.preemptions / self.requests if self.requests > 0 else None


def request_preemptions(m: EngineMetrics) -> RequestPreemptions | None:
    name = m.name_of("request_preemptions")
    count, total = m.histogram_count("request_preemptions"), m.histogram_sum(
        "request_preemptions")
    if name is None or count is None or total is None:
        return None
    zero = m.bucket_increase("request_preemptions", 0.0)
    return RequestPreemptions(requests=count, preemptions=total,
                              preempted_requests=None if zero is None else count - zero)


@dataclass(frozen=True, slots=True)
class CacheSources:
    """Prompt tokens over the export by where they came from (tokens), and the series read."""

    tokens: dict[str, float]
    source: str

    @property
    def total(self) -> float:
        return float(sum(self.tokens.values()))

    def share(self, *names: str) -> float | None:
        total = self.total
        return sum(self.tokens.get(n, 0.0) for n in names) / total if total > 0 else None


# vLLM's sources of prompt tokens: computed here, hit in this engine's cache, or loaded by the
# KV connector (another instance, LMCache, a storage tier).
LOCAL_COMPUTE = "local_compute"
CACHE_HIT_SOURCES = ("local_cache_hit", "external_kv_transfer")


def cache_sources(m: EngineMetrics) -> CacheSources | None:
    """vLLM's prompt tokens by source; else SGLang's cached tokens by cache source, with the
    rest of its prompt tokens as computed (`local_compute`): both count finished requests,
    so they share a basis (its `realtime_tokens` count batches, recomputed work included)."""
    values = m.label_values("prompt_tokens_by_source")
    if values:
        tokens = {v: m.counter_increase("prompt_tokens_by_source", v) or 0.0 for v in values}
        return CacheSources(tokens=tokens, source=str(m.name_of("prompt_tokens_by_source")))
    cached = m.label_values("cached_tokens")
    prompt = m.counter_increase("prompt_tokens")
    if not cached or prompt is None:
        return None
    tokens = {f"cache_{v}": m.counter_increase("cached_tokens", v) or 0.0 for v in cached}
    tokens[LOCAL_COMPUTE] = max(0.0, prompt - sum(tokens.values()))
    return CacheSources(tokens=tokens, source=str(m.name_of("cached_tokens")))


def hit_share(sources: CacheSources) -> float | None:
    """The share of prompt tokens not computed here (any cache, any tier, any transfer)."""
    total = sources.total
    if total <= 0:
        return None
    return 1.0 - sources.tokens.get(LOCAL_COMPUTE, 0.0) / total


def gauge_hit_rate(m: EngineMetrics) -> float | None:
    """A hit rate the engine reports as a gauge. vLLM's stats line gives the rate over its
    most recent requests (a sliding window of 1,000), so each engine's last line holds the
    run's rate, or the latest part of it: the engines' last values, averaged (the log has no
    query counts to weight them). SGLang's gauge is per batch: its mean over time, the
    fullest engine at each time."""
    name = m.name_of("cache_hit_rate")
    if name is None:
        return None
    if name.startswith("log:"):
        rows = m.frame[m.frame["metric"] == name].sort_values("time_s", kind="stable")
        last = rows.groupby("labels", sort=False)["value"].last()
        return None if last.empty else float(last.mean())
    g = m.gauge("cache_hit_rate", how="max")
    return None if g is None or g.empty else float(g["value"].mean())


def external_hit_rate(m: EngineMetrics) -> float | None:
    """vLLM's KV-connector prefix cache: Δhits / Δqueries, else the stats line's rate."""
    hits = m.counter_increase("external_prefix_hits")
    queries = m.counter_increase("external_prefix_queries")
    if hits is not None and queries:
        return hits / queries
    g = m.gauge("external_hit_rate", how="max")
    return None if g is None or g.empty else float(g["value"].iloc[-1])


@dataclass(frozen=True, slots=True)
class KvTransfers:
    """KV moved between instances over the export."""

    transfers: float | None
    mean_ms: float | None
    mean_mb: float | None
    source: str


def kv_transfers(m: EngineMetrics) -> KvTransfers | None:
    count = m.counter_increase("kv_transfers")
    if count is not None:
        ms, mb = m.counter_increase("kv_transfer_ms"), m.counter_increase("kv_transfer_mb")
        return KvTransfers(
            transfers=count,
            mean_ms=None if not count or ms is None else ms / count,
            mean_mb=None if not count or mb is None else mb / count,
            source="vLLM's 'KV Transfer metrics' log lines")
    latency_ms = m.histogram_mean("kv_transfer_latency_ms")
    if latency_ms is not None:
        return KvTransfers(transfers=m.histogram_count("kv_transfer_latency_ms"),
                           mean_ms=latency_ms, mean_mb=m.histogram_mean("kv_transfer_size_mb"),
                           source=str(m.name_of("kv_transfer_latency_ms")))
    return None


@dataclass(frozen=True, slots=True)
class TierSources:
    """Cache hits over the export by the tier that supplied them, as the engine labels them.

    `tokens` maps the engine's own label value (vLLM `device`/`host`/`disk`/`p2p`/
    `external_unspecified`, SGLang `device`/`host`/`storage`/`total`, LMCache `engine`/`lmcache`,
    vLLM's older split `local_cache_hit`/`external_kv_transfer`) to tokens; `prompt_tokens` the
    prompt tokens the same export counts (None when it has none); `source` the series read."""

    tokens: dict[str, float]
    prompt_tokens: float | None
    source: str


def tier_sources(m: EngineMetrics) -> TierSources | None:
    """The engine's hits split by tier: vLLM 0.33's `prompt_tokens_cached_by_source`, else
    SGLang's `cached_tokens_total{cache_source}`, else LMCache's lookup lines (the engine's own
    hit and what LMCache loads), else vLLM's `prompt_tokens_by_source` (its own cache against
    every KV-connector tier together). None when the export has none of them."""
    prompt = m.counter_increase("prompt_tokens")
    for key in ("prompt_tokens_cached_by_source", "cached_tokens"):
        values = m.label_values(key)
        if values:
            tokens = {v: m.counter_increase(key, v) or 0.0 for v in values}
            return TierSources(tokens=tokens, prompt_tokens=prompt, source=str(m.name_of(key)))
    load = m.counter_increase("lmcache_load_tokens")
    if load is not None:
        engine = m.counter_increase("lmcache_engine_hit_tokens")
        tokens = {"lmcache": load} if engine is None else {"engine": engine, "lmcache": load}
        return TierSources(tokens=tokens, prompt_tokens=m.counter_increase(
            "lmcache_prompt_tokens"), source=str(m.name_of("lmcache_load_tokens")))
    values = m.label_values("prompt_tokens_by_source")
    if values:
        tokens = {v: m.counter_increase("prompt_tokens_by_source", v) or 0.0 for v in values}
        computed = tokens.pop(LOCAL_COMPUTE, None)
        total = None if computed is None else computed + sum(tokens.values())
        return TierSources(tokens=tokens, prompt_tokens=prompt if prompt is not None else total,
                           source=str(m.name_of("prompt_tokens_by_source")))
    return None
