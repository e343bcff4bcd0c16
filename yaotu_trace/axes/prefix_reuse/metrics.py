"""The prefix_reuse axis' measurements (see the package docstring for the definitions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yaotu_trace.axes.base import AxisInput, Evidence, fact, measured, ratio
from yaotu_trace.data.engine_facts import cache_sources, gauge_hit_rate, hit_share

BASIS = "share of prefill tokens recomputed although a prefix was reusable"


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixMetrics:
    """The prefix-reuse axis' measurements (None when their inputs are absent)."""

    preset: str | None
    rules: dict[str, Any] | None
    prompt_tokens: int | None
    ideal_hit_tokens: int | None
    ideal_hit_rate: float | None
    achievable_hit_tokens: int | None
    achievable_hit_rate: float | None
    observed_source: str | None
    observed_hit_tokens: int | None
    observed_hit_rate: float | None
    reuse_gap: float | None
    recomputed_reusable_tokens: float | None
    recomputed_basis: str | None
    recomputed_share_of_prefill: float | None
    instances: int | None
    waterfall: tuple[dict[str, Any], ...]
    key_loss_share: float | None
    routing_loss_share: float | None
    capacity_loss_share: float | None
    hot_prefixes: tuple[dict[str, Any], ...]
    # The engine's prompt tokens by where they came from (share of each source), and its
    # KV-connector prefix cache's hit rate: vLLM prompt_tokens_by_source, SGLang
    # cached_tokens_total{cache_source}, vLLM external_prefix_cache_hits / queries.
    observed_hit_sources: dict[str, float] | None = None
    external_hit_rate: float | None = None
    # Cache-aware routing over the same instances (the replay under prefix-affinity routing):
    # its hit tokens and rate, and what it gains over the trace's own routing as a share of
    # prompt tokens (the prefill routing recomputes; P003, P007).
    affinity_hit_tokens: int | None = None
    affinity_hit_rate: float | None = None
    affinity_gain_share: float | None = None
    # The CPU tier that wins back the capacity loss, replayed and priced (`tier.py`), when P004
    # fires on a finite global pool.
    tier_candidate: dict[str, Any] | None = None

    def headline(self) -> tuple[Evidence, ...]:
        """The measurements shown as the axis' evidence when no rule fired on it."""
        return measured(
            (
                fact("achievable_hit_rate", self.achievable_hit_rate, "ratio"),
                fact("observed_hit_rate", self.observed_hit_rate, "ratio"),
                fact("recomputed_share_of_prefill", self.recomputed_share_of_prefill, "ratio"),
            ),
        )


def empty_metrics(observed_source: str | None = None, observed_rate: float | None = None,
           observed_tokens: int | None = None) -> PrefixMetrics:
    return PrefixMetrics(
        preset=None, rules=None, prompt_tokens=None, ideal_hit_tokens=None, ideal_hit_rate=None,
        achievable_hit_tokens=None, achievable_hit_rate=None, observed_source=observed_source,
        observed_hit_tokens=observed_tokens, observed_hit_rate=observed_rate, reuse_gap=None,
        recomputed_reusable_tokens=None, recomputed_basis=None,
        recomputed_share_of_prefill=None, instances=None, waterfall=(), key_loss_share=None,
        routing_loss_share=None, capacity_loss_share=None, hot_prefixes=(),
    )


def observed_hits(inp: AxisInput) -> tuple[str | None, int | None, float | None]:
    """(source, hit tokens or None, hit rate) of the engine's own prefix-cache hits."""
    if inp.has("cached_tokens"):
        req = inp.requests
        hits = int(req["cached_tokens"].fillna(0).sum())
        prompt = int(req["prompt_len"].sum())
        return "cached_tokens", hits, ratio(hits, prompt)
    m = inp.metrics
    if m is None:
        return None, None, None
    found = cache_sources(m)
    if found is not None and (rate := hit_share(found)) is not None:
        return found.source, None, rate
    if m.name_of("prefix_hits") is not None and m.name_of("prefix_queries") is not None:
        rate = ratio(m.counter_increase("prefix_hits"), m.counter_increase("prefix_queries"))
        if rate is not None:
            return str(m.name_of("prefix_hits")), None, rate
    if m.name_of("cached_tokens") is not None and m.name_of("prompt_tokens") is not None:
        rate = ratio(m.counter_increase("cached_tokens"), m.counter_increase("prompt_tokens"))
        if rate is not None:
            return str(m.name_of("cached_tokens")), None, rate
    rate = gauge_hit_rate(m)
    return (None, None, None) if rate is None else (str(m.name_of("cache_hit_rate")), None, rate)
