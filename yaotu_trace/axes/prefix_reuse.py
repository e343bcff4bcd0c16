"""Prefix-reuse axis: prompt prefixes computed again and again, and where reuse is lost (§6).

Built on the prefix replay (`yaotu_trace.replay.replay_trace`). Metrics (tokens unless noted):

- prompt_tokens = Σ prompt_len over replayed requests.
- ideal_hit_tokens: the replay's ideal (longest prefix shared with any earlier request, one
  namespace, unlimited cache); ideal_hit_rate = ideal / prompt_tokens (ratio).
- achievable_hit_tokens: hits of the replay under the engine's rules (preset, block size, and
  when given the KV capacity per instance and the trace's instances); achievable_hit_rate =
  achievable / prompt_tokens (ratio) — H_inf of cost-model §6 when no capacity is given.
- observed_hit_tokens: Σ cached_tokens (request table); else the increase of
  vllm:prefix_cache_hits over vllm:prefix_cache_queries (metrics, a rate only), else cached over
  prompt tokens (vllm:prompt_tokens_cached / sglang:cached_tokens_total over *_prompt_tokens),
  else the mean of sglang:cache_hit_rate. observed_hit_rate = observed / prompt_tokens (ratio).
- reuse_gap = achievable_hit_rate − observed_hit_rate (ratio points).
- recomputed_reusable_tokens = achievable − observed hit tokens when observed hits are known;
  otherwise the reuse the waterfall loses to cache keys, routing and capacity (the actionable
  steps); recomputed_share_of_prefill = that / prompt_tokens (ratio); the axis score.
- loss waterfall: tokens lost to block granularity, the last-token rule, tenant isolation and
  model/adapter namespaces (key_loss), scope and routing (routing_loss), capacity and eviction
  (capacity_loss); *_share = loss / prompt_tokens (ratio points of hit rate).
- hot prefixes: the shared prefixes whose loss recomputed the most tokens, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
from yaotu_trace.errors import YaotuError

_BASIS = "share of prefill tokens recomputed although a prefix was reusable"


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


def _empty(observed_source: str | None = None, observed_rate: float | None = None,
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
    req = inp.requests
    if inp.has("cached_tokens"):
        hits = int(req["cached_tokens"].fillna(0).sum())
        prompt = int(req["prompt_len"].sum())
        return "cached_tokens", hits, ratio(hits, prompt)
    m = inp.metrics
    if m is not None:
        if m.name_of("prefix_hits") is not None and m.name_of("prefix_queries") is not None:
            rate = ratio(m.counter_increase("prefix_hits"), m.counter_increase("prefix_queries"))
            if rate is not None:
                return str(m.name_of("prefix_hits")), None, rate
        if m.name_of("cached_tokens") is not None and m.name_of("prompt_tokens") is not None:
            rate = ratio(m.counter_increase("cached_tokens"), m.counter_increase("prompt_tokens"))
            if rate is not None:
                return str(m.name_of("cached_tokens")), None, rate
        g = m.gauge("cache_hit_rate", how="max")
        if g is not None and len(g):
            return "sglang:cache_hit_rate", None, float(g["value"].mean())
    return None, None, None


def analyze_prefix_reuse(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Replay the prompts' prefixes and compare achievable with observed reuse."""
    obs_source, obs_tokens, obs_rate = observed_hits(inp)
    sources: list[Source] = []
    if obs_source == "cached_tokens":
        sources.append(Source.REQUESTS)
    elif obs_source is not None:
        sources.append(Source.METRICS)
    trace = inp.trace
    if trace is None or trace.content_column is None:
        return AxisResult(
            axis=AxisName.PREFIX_REUSE, status=Status.INSUFFICIENT_DATA, cause=None,
            score=None, score_basis=_BASIS, sources=tuple(sources),
            metrics=_empty(obs_source, obs_rate, obs_tokens),
            missing=("prompt_tokens or prompt_block_ids (request table): prompt content for "
                     "the prefix replay",),
            next_steps=("log prompt token ids (or block hashes) so achievable reuse can be "
                        "replayed",),
        )
    try:
        summary = _replay(inp)
    except YaotuError as err:
        return AxisResult(
            axis=AxisName.PREFIX_REUSE, status=Status.INSUFFICIENT_DATA, cause=None,
            score=None, score_basis=_BASIS, sources=tuple(sources),
            metrics=_empty(obs_source, obs_rate, obs_tokens),
            missing=("a prefix replay this trace supports",), notes=(str(err),),
            next_steps=("run `trace replay` on the trace to see why the replay is refused",),
        )
    sources.insert(0, Source.REQUESTS)
    prompt = int(summary.prompt_tokens)
    ideal = summary.ideal_hit_tokens
    achievable = int(summary.saved_prefill_tokens)
    steps = {s.step: s for s in summary.waterfall}

    def loss(*names: str) -> float | None:
        if not steps:
            return None
        return float(sum(steps[n].loss_tokens for n in names if n in steps))

    key_loss, routing_loss, capacity_loss = (loss("tenant_isolation"), loss("routing"),
                                             loss("capacity"))
    achievable_rate = ratio(achievable, prompt)
    gap = recomputed = basis = None
    if obs_rate is not None and achievable_rate is not None:
        gap = achievable_rate - obs_rate
        observed_tok = obs_tokens if obs_tokens is not None else obs_rate * prompt
        recomputed = max(0.0, achievable - float(observed_tok))
        basis = "achievable − observed hit tokens"
    elif steps:
        recomputed = float((key_loss or 0.0) + (routing_loss or 0.0) + (capacity_loss or 0.0))
        basis = "waterfall losses to cache keys, routing and capacity (no observed hits)"
    share = ratio(recomputed, prompt)
    instances = len(summary.per_instance) or (summary.rules.instances
                                             if summary.rules.scope == "instance" else 1)
    metrics = PrefixMetrics(
        preset=summary.preset,
        rules=summary.rules.to_dict(),
        prompt_tokens=prompt,
        ideal_hit_tokens=ideal,
        ideal_hit_rate=ratio(ideal, prompt),
        achievable_hit_tokens=achievable,
        achievable_hit_rate=achievable_rate,
        observed_source=obs_source,
        observed_hit_tokens=obs_tokens,
        observed_hit_rate=obs_rate,
        reuse_gap=gap,
        recomputed_reusable_tokens=recomputed,
        recomputed_basis=basis,
        recomputed_share_of_prefill=share,
        instances=instances,
        waterfall=tuple(s.to_dict() for s in summary.waterfall),
        key_loss_share=ratio(key_loss, prompt),
        routing_loss_share=ratio(routing_loss, prompt),
        capacity_loss_share=ratio(capacity_loss, prompt),
        hot_prefixes=tuple(h.to_dict() for h in summary.hot_prefixes[:5]),
    )
    hits = _prefix_rules(metrics, t)
    status = status_from(hits, SEVERITY_OF)
    ids = {h.rule_id for h in hits}
    cause = ("cache_keys" if "P005" in ids else "routing" if "P003" in ids
             else "capacity" if "P004" in ids
             else "prefix_recompute" if ids & {"P001", "P002"} else None)
    missing: list[str] = []
    next_steps: list[str] = []
    if obs_rate is None:
        missing.append("cached_tokens (request table) or vllm:prefix_cache_hits_total and "
                       "vllm:prefix_cache_queries_total (metrics): observed hits")
    if ids & {"P001", "P002"}:
        next_steps.append("compare the hot prefixes' requests: salts, adapters and template "
                          "bytes before the first block, and the instances they were routed to")
    if "P003" in ids:
        next_steps.append("replay with --route prefix-affinity to size the routing gain")
    next_steps += [f"add {m}" for m in missing]
    return AxisResult(
        axis=AxisName.PREFIX_REUSE, status=status, cause=cause, score=finite(share),
        score_basis=_BASIS, sources=tuple(dict.fromkeys(sources)), metrics=metrics,
        hits=tuple(hits), missing=tuple(missing), next_steps=tuple(next_steps),
        notes=tuple(summary.notes),
    )


def _replay(inp: AxisInput) -> Any:
    """The replay under the engine's rules: capacity per instance and instances when known."""
    from yaotu_trace.replay import Parallelism, effective_rules, replay_trace

    trace = inp.trace
    assert trace is not None
    s = inp.settings
    overrides: dict[str, Any] = {}
    if s.block_size_given:
        overrides["block_size_tokens"] = int(s.block_size_tokens)
    rules, preset, notes = effective_rules(trace, s.replay_preset, **overrides)
    changes: dict[str, Any] = {}
    if s.kv_capacity_tokens is not None:
        changes["capacity_blocks"] = max(1, int(s.kv_capacity_tokens // rules.block_size_tokens))
    if trace.has("instance") and trace.requests["instance"].nunique() > 1:
        changes["scope"] = "instance"
    if changes:
        rules = rules.with_(**changes)
    return replay_trace(trace, rules, preset=preset, notes=notes, top_prefixes=5,
                        parallel=Parallelism(jobs=s.replay_jobs, dask=s.replay_dask))


def _prefix_rules(mt: PrefixMetrics, t: Thresholds) -> list[RuleHit]:
    """Rules C1–C3 of cost-model §7 plus cache-key losses, in id order."""
    hits: list[RuleHit] = []
    share = mt.recomputed_share_of_prefill
    gap_ok = mt.reuse_gap is None or mt.reuse_gap > t.reuse_gap
    if share is not None and share > t.recompute_waste and gap_ok:
        ev = [check("recomputed_share_of_prefill", share, ">", "recompute_waste",
                    t.recompute_waste),
              fact("recomputed_reusable_tokens", mt.recomputed_reusable_tokens, "tokens")]
        if mt.reuse_gap is not None:
            ev.insert(0, check("reuse_gap", mt.reuse_gap, ">", "reuse_gap", t.reuse_gap))
            ev.append(fact("observed_hit_rate", mt.observed_hit_rate, "ratio"))
        ev.append(fact("achievable_hit_rate", mt.achievable_hit_rate, "ratio"))
        hits.append(RuleHit(rule_id="P001", evidence=tuple(ev)))
        if share >= t.reuse_dominant:
            hits.append(RuleHit(rule_id="P002", evidence=(
                check("recomputed_share_of_prefill", share, ">=", "reuse_dominant",
                      t.reuse_dominant),
                fact("recomputed_reusable_tokens", mt.recomputed_reusable_tokens, "tokens"),
            )))
    if (mt.instances or 1) > 1 and mt.routing_loss_share is not None and (
            mt.routing_loss_share > t.routing_gap):
        hits.append(RuleHit(rule_id="P003", evidence=(
            check("routing_loss_share", mt.routing_loss_share, ">", "routing_gap",
                  t.routing_gap),
            fact("instances", mt.instances, "instances"),
        )))
    if mt.capacity_loss_share is not None and mt.capacity_loss_share > t.capacity_gap:
        hits.append(RuleHit(rule_id="P004", evidence=(
            check("capacity_loss_share", mt.capacity_loss_share, ">", "capacity_gap",
                  t.capacity_gap),
        )))
    if mt.key_loss_share is not None and mt.key_loss_share > t.reuse_gap:
        hits.append(RuleHit(rule_id="P005", evidence=(
            check("key_loss_share", mt.key_loss_share, ">", "reuse_gap", t.reuse_gap),
        )))
    if (mt.observed_hit_rate is None and mt.achievable_hit_rate is not None
            and mt.achievable_hit_rate > t.reuse_gap):
        hits.append(RuleHit(rule_id="P006", evidence=(
            check("achievable_hit_rate", mt.achievable_hit_rate, ">", "reuse_gap", t.reuse_gap),
            fact("achievable_hit_tokens", mt.achievable_hit_tokens, "tokens"),
        )))
    return hits
