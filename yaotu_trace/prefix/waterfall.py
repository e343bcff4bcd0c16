"""The loss waterfall (spec §6): where the ideal prefix reuse of a trace is lost, rule by rule.

Each step is one replay with one more rule than the step before, in this order:

1. ideal: longest common prefix with any earlier request at the finest granularity the trace
   allows (tokens, see `ideal.py`; the source block size for block-id traces, partial last ids
   included), one namespace for all, one unlimited cache;
2. block granularity: blocks of B tokens (partial blocks as the rules say);
3. last-token rule;
4. tenant isolation (namespaces: model/adapter, plus tenant when isolation is on);
5. scope/routing: per-instance caches;
6. capacity: the same finite caches with optimal eviction (Belady, `optimal.py`): what a cache
   of that size loses whatever the policy;
7. eviction policy: the rules' own policy and touch order instead (= the achieved hits), i.e.
   what the policy itself costs against optimal. Under prefix affinity the optimal replay keeps
   the achieved replay's routes (the routes follow the cache contents, and optimal needs them
   fixed), so the two steps differ in the policy only.

A step whose rule is off repeats the previous replay (zero loss). The drop between steps is
integer tokens per request, so the steps sum exactly to ideal − achieved. Per-request losses may
be negative for a step that reorders work (routing decisions can depend on cache contents;
optimal eviction keeps what serves the trace best, not each request); their totals still
telescope.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from yaotu_trace.prefix.chain_cache import holds_streamed_chains
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.compact import CompactChains
from yaotu_trace.prefix.kernels.result import ReplayResult, hits_result
from yaotu_trace.prefix.kernels.unlimited import replay
from yaotu_trace.prefix.partition import (
    SERIAL_RUNNER,
    Partitions,
    ReplayJob,
    Runner,
    cache_partitions,
    replay_many,
)
from yaotu_trace.prefix.prepare import PreparedTrace
from yaotu_trace.prefix.rules import Accounting, Eviction, ReplayRules, Route, Scope

STEPS: tuple[tuple[str, str], ...] = (
    ("block_granularity", "block granularity"),
    ("last_token_rule", "last-token rule"),
    ("tenant_isolation", "tenant isolation and model/adapter namespaces"),
    ("routing", "scope and routing"),
    ("capacity", "capacity (even with optimal eviction)"),
    ("eviction_policy", "eviction policy (vs optimal)"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WaterfallStep:
    """Reuse lost to one rule: tokens and share of the ideal."""

    step: str
    label: str
    hit_tokens: int  # Σ hits after this rule
    loss_tokens: int  # Σ hits before − after
    loss_share_of_ideal: float  # loss / ideal, 0 when the ideal is 0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"step": self.step, "label": self.label, "hit_tokens": self.hit_tokens,
                "loss_tokens": self.loss_tokens, "loss_share_of_ideal": self.loss_share_of_ideal}


@dataclass(frozen=True, slots=True, kw_only=True)
class Waterfall:
    """The waterfall totals plus what `hot.py` and `--out` need per request."""

    ideal_hit_tokens: int
    achieved_hit_tokens: int
    steps: tuple[WaterfallStep, ...]
    ideal_per_request: np.ndarray  # int64
    loss_per_request: dict[str, np.ndarray]  # step -> int64 per request
    # Block-level inputs of the hot-prefix analysis (all at block size B):
    shared_chains: CompactChains  # one namespace: the identity of a shared prefix (as runs)
    # Hit blocks after "last_token_rule" and each later step; "capacity" holds the achieved
    # hits (after both capacity steps: the hot prefixes charge them to eviction).
    hit_blocks: dict[str, np.ndarray]
    achieved: ReplayResult
    achieved_chains: BlockChains
    # Per request, the leading blocks any earlier request had under the rules' namespaces, with
    # no last-token rule: AIPerf's numerator (`rates.leading_seen_blocks`), a replay this
    # waterfall makes anyway.
    seen_blocks: np.ndarray

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins (totals only)."""
        return {
            "ideal_hit_tokens": self.ideal_hit_tokens,
            "achieved_hit_tokens": self.achieved_hit_tokens,
            "steps": [s.to_dict() for s in self.steps],
        }


def _ideal_rules(rules: ReplayRules, unit_tokens: int, block_ids: bool) -> ReplayRules:
    return rules.with_(block_size_tokens=unit_tokens, last_token_rule=False,
                       cache_partial_blocks=block_ids or rules.cache_partial_blocks,
                       capacity_blocks=None, scope=Scope.GLOBAL, route=None,
                       tenant_isolation=False)


def _ideal(prepared: PreparedTrace, rules: ReplayRules, flat: ReplayRules,
           shared: CompactChains, r_block: ReplayResult) -> np.ndarray:
    """Per-request ideal hit tokens (longest common prefix with any earlier request)."""
    block_ids = prepared.source_block_size is not None
    outputs = rules.cache_outputs and prepared.output_offsets is not None
    if block_ids or outputs:
        # Block ids are as fine as the trace allows and cheap to chain one id per block; with
        # outputs the earlier sequences are prompt + output: replay at the finest unit.
        ideal_rules = _ideal_rules(rules, prepared.unit_tokens, block_ids)
        return replay(prepared.chains(ideal_rules, namespaces=False), ideal_rules).hit_tokens
    full_only = flat.with_(cache_partial_blocks=False)
    base: BlockChains | CompactChains = shared
    hits = r_block.hit_blocks
    if flat.cache_partial_blocks:
        base = prepared.chains(full_only, namespaces=False)
        hits = replay(base, full_only).hit_blocks
    # NOTE: the token-granular pass is compiled (numba); a block-id trace never needs it.
    from yaotu_trace.prefix.kernels.ideal import ideal_hit_tokens, ideal_hit_tokens_streaming

    if prepared.stream is not None:
        return ideal_hit_tokens_streaming(prepared.stream, base, hits, seed=rules.seed)
    assert prepared.offsets is not None and prepared.values is not None
    return ideal_hit_tokens(prepared.offsets, prepared.values, base, hits, seed=rules.seed)


def partitions_of(prepared: PreparedTrace, rules: ReplayRules, chains: BlockChains
                  ) -> Partitions:
    """The independent caches of a replay of `prepared` under `rules` (see `partition.py`)."""
    return cache_partitions(rules, prepared.num_requests, instance_codes=prepared.instance_codes,
                            tenant_codes=prepared.tenant_codes, arrival_s=prepared.arrival_s,
                            finish_s=prepared.finish_s, chains=chains)


def cache_replays(prepared: PreparedTrace, chains: BlockChains, rules_list: list[ReplayRules],
                  runner: Runner | None) -> list[ReplayResult]:
    """Replays of the same chains under several rules, partitioned where the caches split.

    Without a runner the engine replays each in this process, except per-tenant caches,
    which exist only as partitions; with one, every partition of every replay is one task.
    """
    times: dict[str, Any] = {"arrival_s": prepared.arrival_s, "finish_s": prepared.finish_s}
    if runner is None and not any(r.capacity_per_tenant for r in rules_list):
        return [replay(chains, r, prepared.instance_codes, **times) for r in rules_list]
    jobs = []
    for r in rules_list:
        parts = partitions_of(prepared, r, chains)
        jobs.append(ReplayJob(chains=chains, rules=r, instance_codes=prepared.instance_codes,
                              partitions=parts, **times))
    return replay_many(jobs, runner or SERIAL_RUNNER)


@holds_streamed_chains
def compute_waterfall(prepared: PreparedTrace, rules: ReplayRules,
                      runner: Runner | None = None, *,
                      measured: np.ndarray | None = None) -> Waterfall:
    """Run the replays of the waterfall; the last one is the achieved replay under `rules`.

    With a `runner`, the scope and capacity replays go out together as independent
    partitions (per instance, per tenant); the totals are identical to one process.
    `measured` (a measurement window, `window.py`) sums the totals over those requests only;
    every request is still replayed, and the per-request arrays keep them all.
    """
    flat = rules.with_(last_token_rule=False, capacity_blocks=None, scope=Scope.GLOBAL,
                       route=None)
    # The shared chains are held as runs between the passes (`compact.py`) and expanded only
    # for the replays that need them flat: at 1e10 tokens their flat ids (2.3 GB) are never
    # held beside the ideal pass's prefix table or the namespaced ids.
    runs = prepared.compact_chains(flat)
    shared = runs.expand()
    r_block = replay(shared, flat)
    ltr_rules = flat.with_(last_token_rule=rules.last_token_rule)
    shared_ltr = runs.with_hit_cap(True) if rules.last_token_rule else runs
    r_ltr = _capped(r_block, shared_ltr.frame) if rules.last_token_rule else r_block
    del shared
    ideal = _ideal(prepared, rules, flat, runs, r_block)

    ns_codes = prepared.namespace_codes(rules.tenant_isolation)
    has_ns = ns_codes is not None
    # The namespaces join each block's identity from the shared chains: no second read of the
    # prompts, and the same ids as hashing them in (`partition.with_namespaces`).
    ns_chains = prepared.namespaced(shared_ltr, ltr_rules)
    r_seen = replay(ns_chains.with_hit_cap(False), flat) if has_ns else r_block
    r_ns = _capped(r_seen, ns_chains) if has_ns and rules.last_token_rule else (
        r_seen if has_ns else r_ltr)

    scope_rules = ltr_rules.with_(scope=rules.scope, route=rules.route, instances=rules.instances)
    per_instance = rules.scope is Scope.INSTANCE
    pending = ([scope_rules] if per_instance else []) + (
        [rules] if rules.capacity_blocks is not None else [])
    best_rules = _optimal_rules(rules)
    if best_rules is not None and rules.route is not Route.PREFIX_AFFINITY:
        pending.append(best_rules)
    done = cache_replays(prepared, ns_chains, pending, runner)
    r_scope = done.pop(0) if per_instance else r_ns
    r_cap = done.pop(0) if rules.capacity_blocks is not None else r_scope
    r_best = r_cap
    if best_rules is not None:
        r_best = (done.pop(0) if rules.route is not Route.PREFIX_AFFINITY else
                  cache_replays(replace(prepared, instance_codes=r_cap.instance), ns_chains,
                                [best_rules], runner)[0])

    per_request = [ideal, *(r.hit_tokens for r in (r_block, r_ltr, r_ns, r_scope, r_best,
                                                   r_cap))]
    totals = [int(h.sum() if measured is None else h[measured].sum()) for h in per_request]
    ideal_total = totals[0]
    steps = []
    losses: dict[str, np.ndarray] = {}
    for k, (name, label) in enumerate(STEPS):
        if name == "eviction_policy":
            label = policy_label(rules)
        loss = totals[k] - totals[k + 1]
        steps.append(WaterfallStep(
            step=name, label=label, hit_tokens=totals[k + 1], loss_tokens=loss,
            loss_share_of_ideal=loss / ideal_total if ideal_total else 0.0,
        ))
        losses[name] = per_request[k] - per_request[k + 1]
    return Waterfall(
        ideal_hit_tokens=ideal_total,
        achieved_hit_tokens=totals[-1],
        steps=tuple(steps),
        ideal_per_request=ideal,
        loss_per_request=losses,
        shared_chains=shared_ltr,
        hit_blocks={"last_token_rule": r_ltr.hit_blocks, "tenant_isolation": r_ns.hit_blocks,
                    "routing": r_scope.hit_blocks, "capacity": r_cap.hit_blocks},
        achieved=r_cap,
        achieved_chains=ns_chains,
        seen_blocks=r_seen.hit_blocks,
    )


def _capped(unlimited: ReplayResult, chains: BlockChains) -> ReplayResult:
    """`unlimited` (one unlimited cache, no last-token rule) under the hit cap of `chains`.

    An unlimited cache holds every block of every earlier request whatever each one hit, so
    the capped replay's hits are the uncapped ones cut at the cap: no second replay (1.3 s at
    1e10 tokens, and its table of a first request per id beside the chains)."""
    hit = np.minimum(unlimited.hit_blocks, chains.max_hit_blocks)
    return hits_result(chains, hit, evicted_blocks=unlimited.evicted_blocks,
                       inserted_blocks=unlimited.inserted_blocks,
                       rejected_requests=unlimited.rejected_requests,
                       instance=unlimited.instance, num_instances=unlimited.num_instances)


def _optimal_rules(rules: ReplayRules) -> ReplayRules | None:
    """The capacity replay's rules with optimal eviction, or None when that replay would repeat
    the achieved one (unlimited, or optimal already)."""
    if rules.capacity_blocks is None or rules.eviction is Eviction.OPTIMAL:
        return None
    affinity = rules.route is Route.PREFIX_AFFINITY  # replayed on the achieved routes instead
    return rules.with_(eviction=Eviction.OPTIMAL, route=None if affinity else rules.route)


def policy_label(rules: ReplayRules) -> str:
    """The eviction-policy step's label: which policy (and, when an engine-exact preset keeps
    the books of a finite cache, whose) is compared with optimal."""
    policy = str(rules.eviction).upper() if rules.eviction is not Eviction.OPTIMAL else "optimal"
    if rules.accounting is not Accounting.CLEAN and rules.capacity_blocks is not None:
        policy = f"{rules.accounting}'s {policy}"
    return f"eviction policy ({policy} vs optimal)"
