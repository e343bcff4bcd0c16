"""The prefix_reuse axis' analyzer: measure, evaluate its rules, name the cause."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    Cause,
    Source,
    Status,
    finite,
    metrics_of,
    ratio,
    status_from,
)
from yaotu_trace.axes.prefix_reuse.metrics import (
    BASIS,
    PrefixMetrics,
    empty_metrics,
    observed_hits,
)
from yaotu_trace.axes.prefix_reuse.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.prefix_reuse.tier import tier_candidate
from yaotu_trace.axes.rule import cause_of, evaluate, said_when_fired
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.engine_facts import cache_sources, external_hit_rate
from yaotu_trace.data.handoff import handed_off
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import YaotuError


def _undecided(sources: list[Source], observed: tuple[str | None, int | None, float | None],
               missing: str, next_step: str, notes: tuple[str, ...] = ()) -> AxisResult:
    """The axis when the prefixes cannot be replayed."""
    obs_source, obs_tokens, obs_rate = observed
    return AxisResult(
        axis=AxisName.PREFIX_REUSE, status=Status.INSUFFICIENT_DATA, cause=None,
        score=None, score_basis=BASIS, sources=tuple(sources),
        metrics=empty_metrics(obs_source, obs_rate, obs_tokens),
        missing=(missing,), notes=notes, next_steps=(next_step,),
    )


def analyze_prefix_reuse(inp: AxisInput, t: Thresholds) -> AxisResult:
    """Replay the prompts' prefixes and compare achievable with observed reuse; say where the
    engine's own hits came from when its telemetry splits them (`engine_facts`)."""
    result = _analyze(inp, t)
    m = inp.metrics
    found = None if m is None else cache_sources(m)
    external = None if m is None else external_hit_rate(m)
    if found is None and external is None:
        return result
    shares = None if found is None or found.total <= 0 else {
        name: tokens / found.total for name, tokens in sorted(found.tokens.items())}
    metrics = replace(metrics_of(result, PrefixMetrics), observed_hit_sources=shares,
                      external_hit_rate=external)
    notes = result.notes
    if found is not None and shares is not None:
        split = ", ".join(f"{name} {100 * share:.1f} %" for name, share in shares.items())
        notes = (*notes, f"the engine's prompt tokens by source ({found.source}): {split}")
    elif external is not None:
        notes = (*notes, f"the KV connector's external prefix cache hit {100 * external:.1f} % "
                 "of its queries, beside the engine's own cache (the observed hit rate is the "
                 "engine's own; prompt_tokens_by_source in /metrics gives both on one basis)")
    return replace(result, metrics=metrics, notes=notes)


def _analyze(inp: AxisInput, t: Thresholds) -> AxisResult:
    observed = observed_hits(inp)
    sources: list[Source] = []
    if observed[0] == "cached_tokens":
        sources.append(Source.REQUESTS)
    elif observed[0] is not None:
        sources.append(Source.METRICS)
    trace = inp.trace
    if trace is None or trace.content_column is None:
        return _undecided(
            sources, observed,
            "prompt_tokens or prompt_block_ids (request table): prompt content for the prefix "
            "replay",
            "log prompt token ids (or block hashes) so achievable reuse can be replayed")
    try:
        summary = _replay(inp)
    except YaotuError as err:
        return _undecided(
            sources, observed, "a prefix replay this trace supports",
            "run `trace replay` on the trace to see why the replay is refused", (str(err),))
    sources.insert(0, Source.REQUESTS)
    metrics = _with_affinity(_metrics(summary, observed), inp)
    if (metrics.capacity_loss_share is not None and metrics.capacity_loss_share > t.capacity_gap
            and metrics.prompt_tokens):
        metrics = replace(metrics, tier_candidate=tier_candidate(
            inp, trace, summary.rules, str(summary.preset),
            metrics.capacity_loss_share * metrics.prompt_tokens))
    hits = evaluate(RULES, metrics, t)
    missing: list[str] = []
    if observed[2] is None:
        missing.append("cached_tokens (request table) or vllm:prefix_cache_hits_total and "
                       "vllm:prefix_cache_queries_total (metrics): observed hits")
    said, next_steps = said_when_fired(RULES, hits, metrics, t)
    next_steps += [f"add {m}" for m in missing]
    cause = cause_of(RULES, hits)
    score = metrics.recomputed_share_of_prefill
    # The named cause's own loss where it is larger: with observed hits the score above is
    # only the engine's gap to the replay, which keeps the same keys, routes and pool, so a
    # loss to any of those would leave the axis a concern scored 0.
    lost = {Cause.CACHE_KEYS: metrics.key_loss_share,
            Cause.ROUTING: metrics.affinity_gain_share,
            Cause.CACHE_CAPACITY: metrics.capacity_loss_share}.get(cause) if cause else None
    if lost is not None:
        score = max(score or 0.0, lost)
    return AxisResult(
        axis=AxisName.PREFIX_REUSE, status=status_from(hits, SEVERITY_OF),
        cause=cause, score=finite(score),
        score_basis=BASIS, sources=tuple(dict.fromkeys(sources)), metrics=metrics,
        hits=tuple(hits), missing=tuple(missing), next_steps=tuple(next_steps),
        notes=(*summary.notes, *said),
    )


def _metrics(summary: Any,
             observed: tuple[str | None, int | None, float | None]) -> PrefixMetrics:
    """Achievable against observed reuse, and the waterfall's losses, from the replay."""
    obs_source, obs_tokens, obs_rate = observed
    prompt = int(summary.prompt_tokens)
    ideal = summary.ideal_hit_tokens
    achievable = int(summary.saved_prefill_tokens)
    steps = {s.step: s for s in summary.waterfall}

    def loss(*names: str) -> float | None:
        if not steps:
            return None
        return float(sum(steps[n].loss_tokens for n in names if n in steps))

    key_loss, routing_loss, capacity_loss = (loss("tenant_isolation"), loss("routing"),
                                             loss("capacity", "eviction_policy"))
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
    instances = len(summary.per_instance) or (summary.rules.instances
                                             if summary.rules.scope == "instance" else 1)
    return PrefixMetrics(
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
        recomputed_share_of_prefill=ratio(recomputed, prompt),
        instances=instances,
        waterfall=tuple(s.to_dict() for s in summary.waterfall),
        key_loss_share=ratio(key_loss, prompt),
        routing_loss_share=ratio(routing_loss, prompt),
        capacity_loss_share=ratio(capacity_loss, prompt),
        hot_prefixes=tuple(h.to_dict() for h in summary.hot_prefixes[:5]),
    )


def cache_trace(trace: Trace) -> Trace:
    """The trace with `instance` naming the cache each prompt was looked up in: a handed-off
    request's prefill instance (a disaggregated deployment prefills there; `instance` often
    names the decode instance), else its own."""
    if not (trace.has("prefill_instance") and trace.has("decode_instance")):
        return trace  # no request names both: none was handed off
    req = trace.requests
    split = handed_off(req)
    if not split.any():
        return trace
    import pandas as pd

    own = (req["instance"].astype("string") if "instance" in req.columns
           else pd.Series(pd.NA, index=req.index, dtype="string"))
    cache = own.where(~split, req["prefill_instance"].astype("string"))
    return replace(trace, table=req.assign(instance=cache))


def _rules(inp: AxisInput, trace: Trace) -> tuple[Any, Any, tuple[str, ...]]:
    """The engine's replay rules: capacity per instance, one cache per instance when the trace
    names several."""
    s = inp.settings
    rules, preset, notes = s.replay_rules(trace)
    changes: dict[str, Any] = {}
    if s.kv_capacity_tokens is not None:
        changes["capacity_blocks"] = max(1, int(s.kv_capacity_tokens // rules.block_size_tokens))
    if trace.has("instance") and trace.requests["instance"].nunique() > 1:
        changes["scope"] = "instance"
    if changes:
        rules = rules.with_(**changes)
    return rules, preset, notes


def _with_affinity(metrics: PrefixMetrics, inp: AxisInput) -> PrefixMetrics:
    """The metrics with what cache-aware routing reaches over the same instances: the replay
    under prefix-affinity routing (sgl-router's cache_aware, without its load override), and
    its gain over the trace's own routing as a share of prompt tokens."""
    from yaotu_trace.prefix import Parallelism, replay_trace

    trace = inp.trace
    n = metrics.instances or 1
    if trace is None or n < 2 or metrics.achievable_hit_tokens is None:
        return metrics
    trace = cache_trace(trace)
    rules, preset, notes = _rules(inp, trace)
    if rules.scope != "instance":
        return metrics
    # NOTE: an engine's own accounting cannot route by prefix (the router would read its
    # pools); the clean model gives the same hits at unlimited capacity.
    try:
        summary = replay_trace(trace, rules.with_(route="prefix-affinity", instances=n,
                                                  accounting="clean"),
                               preset=preset, notes=notes, waterfall=False,
                               parallel=Parallelism(jobs=inp.settings.replay_jobs,
                                                    dask=inp.settings.replay_dask))
    except YaotuError:
        return metrics
    hits = int(summary.saved_prefill_tokens)
    gain = max(0, hits - metrics.achievable_hit_tokens)
    return replace(metrics, affinity_hit_tokens=hits,
                   affinity_hit_rate=ratio(hits, metrics.prompt_tokens),
                   affinity_gain_share=ratio(gain, metrics.prompt_tokens))


def _replay(inp: AxisInput) -> Any:
    """The replay under the engine's rules: capacity per instance and instances when known."""
    # NOTE: the replay's modules (its kernels, multiprocessing) load only for a trace with
    # prompt content; a diagnosis of timing or telemetry alone never pays for them.
    from yaotu_trace.prefix import Parallelism, replay_trace

    trace = inp.trace
    assert trace is not None
    trace = cache_trace(trace)
    rules, preset, notes = _rules(inp, trace)
    return replay_trace(trace, rules, preset=preset, notes=notes,
                        parallel=Parallelism(jobs=inp.settings.replay_jobs,
                                             dask=inp.settings.replay_dask))
