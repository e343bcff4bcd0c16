"""Prefix replay: exact prefix-cache hits of a trace under explicit rules (replay-spec.md).

`replay_trace(trace, rules)` is the public entry point: it prepares the arrays, runs the
waterfall of replays (the last of which is the achieved replay under `rules`), and returns a
`ReplaySummary` whose `to_dict()` is JSON-ready. The primary number is the token-weighted hit
ratio Σ hit_tokens / Σ prompt tokens; every other ratio is labelled as what it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.observed_hits import Reconciliation
from yaotu_trace.data.schema import Trace
from yaotu_trace.prefix import rates
from yaotu_trace.prefix.hot import HotPrefix, hot_prefixes
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.observed import ObservedComparison, compare_observed
from yaotu_trace.prefix.partition import SERIAL, Parallelism, open_runner
from yaotu_trace.prefix.prepare import PreparedTrace, prepare
from yaotu_trace.prefix.reconcile import ENGINE_COUNTED, reconcile
from yaotu_trace.prefix.rules import ReplayRules, Scope, effective_rules
from yaotu_trace.prefix.waterfall import (
    STEPS,
    Waterfall,
    WaterfallStep,
    cache_replays,
    compute_waterfall,
)

# NOTE: `--residency` loads numba's kernels (`prefix/residency.py`), and the tiers and the
# warm-up window their modules: each is imported where it runs.
if TYPE_CHECKING:
    from yaotu_trace.prefix.residency import Residency
    from yaotu_trace.prefix.tiers.result import TieredResult
    from yaotu_trace.prefix.tiers.spec import TierSetup, TierSpec
    from yaotu_trace.prefix.window import MeasurementWindow, WarmupSpec

HIT_SHARE_BUCKETS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)
TOP_PREFIXES = 10  # hot prefixes a summary lists (the waterfall's; none without it)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStats:
    """Hits of one tenant or instance."""

    label: str
    requests: int
    prompt_tokens: int
    hit_tokens: int
    hit_ratio: float  # token-weighted within the group

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"label": self.label, "requests": self.requests,
                "prompt_tokens": self.prompt_tokens, "hit_tokens": self.hit_tokens,
                "hit_ratio": self.hit_ratio}


@dataclass(frozen=True, slots=True, kw_only=True)
class HitLengthDistribution:
    """How long the hits are: quantiles of hit tokens and requests per hit-share bucket."""

    zero_hit_requests: int
    p50_hit_tokens: int
    p90_hit_tokens: int
    p99_hit_tokens: int
    max_hit_tokens: int
    # (lower, upper] shares of each request's prompt that hit; the first bucket is exactly 0.
    share_buckets: tuple[tuple[float, float, int], ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {
            "zero_hit_requests": self.zero_hit_requests,
            "p50_hit_tokens": self.p50_hit_tokens,
            "p90_hit_tokens": self.p90_hit_tokens,
            "p99_hit_tokens": self.p99_hit_tokens,
            "max_hit_tokens": self.max_hit_tokens,
            "share_buckets": [{"lower": lo, "upper": hi, "requests": n}
                              for lo, hi, n in self.share_buckets],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTable:
    """Per-request columns for `--out`, in replay order (NumPy arrays; strings as objects)."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def to_columns(self) -> dict[str, np.ndarray]:
        """Column name → array, in output order."""
        return dict(self.columns)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySummary:
    """Everything `trace replay` reports; `to_dict()` gives JSON-ready builtins only."""

    rules: ReplayRules
    preset: str | None
    requests: int
    prompt_tokens: int
    saved_prefill_tokens: int  # Σ hit tokens
    remaining_prefill_tokens: int  # Σ recompute tokens
    hit_ratio: float  # token-weighted: Σ hit / Σ prompt
    request_averaged_hit_ratio: float  # mean over requests of hit / prompt (labelled)
    cacheable_block_hit_ratio: float  # hit blocks / cacheable blocks (labelled)
    cacheable_blocks: int
    distinct_blocks: int
    evicted_blocks: int
    per_tenant: tuple[GroupStats, ...]
    per_instance: tuple[GroupStats, ...]
    hit_length: HitLengthDistribution
    ideal_hit_tokens: int | None  # the waterfall's ideal (None when it was not computed)
    waterfall: tuple[WaterfallStep, ...]
    hot_prefixes: tuple[HotPrefix, ...]
    observed: ObservedComparison | None
    notes: tuple[str, ...]
    # `--warmup`: the totals above count only the requests after it (None: every request).
    window: MeasurementWindow | None = None
    # Every hit-rate definition (prefix/rates.py), key → value, label, formula, capacity.
    hit_rates: dict[str, dict[str, object]] = field(default_factory=dict)
    # Requests an engine-exact pool cannot admit at all (more blocks than the whole pool).
    rejected_requests: int = 0
    # Observed against replayed over time, for captures whose cached_tokens are the engine's.
    reconciliation: Reconciliation | None = None
    # `--residency`: its own report section (`kv_residency`), not part of `to_dict()`.
    residency: Residency | None = None
    # `--tier`: which source served what (`TieredResult.to_dict`); None without tiers, and
    # then absent from `to_dict()`.
    tiers: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins: no NumPy scalars, no NaN."""
        return {
            "hit_ratio": self.hit_ratio,
            "hit_ratio_definition": "token-weighted: sum of hit tokens / sum of prompt tokens",
            "saved_prefill_tokens": self.saved_prefill_tokens,
            "remaining_prefill_tokens": self.remaining_prefill_tokens,
            "prompt_tokens": self.prompt_tokens,
            "requests": self.requests,
            "other_ratios": {
                "request_averaged_hit_ratio": self.request_averaged_hit_ratio,
                "cacheable_block_hit_ratio": self.cacheable_block_hit_ratio,
            },
            "hit_rates": self.hit_rates,
            "blocks": {"cacheable": self.cacheable_blocks, "distinct": self.distinct_blocks,
                       "evicted": self.evicted_blocks},
            "rejected_requests": self.rejected_requests,
            "preset": self.preset,
            "rules": self.rules.to_dict(),
            "per_tenant": [g.to_dict() for g in self.per_tenant],
            "per_instance": [g.to_dict() for g in self.per_instance],
            "hit_length": self.hit_length.to_dict(),
            "waterfall": None if self.ideal_hit_tokens is None else {
                "ideal_hit_tokens": self.ideal_hit_tokens,
                "achieved_hit_tokens": self.saved_prefill_tokens,
                "steps": [s.to_dict() for s in self.waterfall],
            },
            "hot_prefixes": [h.to_dict() for h in self.hot_prefixes],
            "observed_vs_replayed": None if self.observed is None else self.observed.to_dict(),
            "measurement_window": None if self.window is None else self.window.to_dict(),
            "notes": list(self.notes),
        } | ({} if self.reconciliation is None
             else {"observed_over_time": self.reconciliation.to_dict()}) | (
            {} if self.tiers is None else {"tiers": self.tiers})


def _groups(codes: np.ndarray | None, labels: tuple[str, ...], prompt: np.ndarray,
            hit: np.ndarray) -> tuple[GroupStats, ...]:
    if codes is None:
        return ()
    k = len(labels)
    reqs = np.bincount(codes, minlength=k)
    p = np.bincount(codes, weights=prompt, minlength=k)
    h = np.bincount(codes, weights=hit, minlength=k)
    return tuple(
        GroupStats(label=labels[g], requests=int(reqs[g]), prompt_tokens=int(p[g]),
                   hit_tokens=int(h[g]), hit_ratio=float(h[g] / p[g]) if p[g] else 0.0)
        for g in range(k) if reqs[g]
    )


def _hit_length(hit: np.ndarray, prompt: np.ndarray) -> HitLengthDistribution:
    if hit.size == 0:
        return HitLengthDistribution(zero_hit_requests=0, p50_hit_tokens=0, p90_hit_tokens=0,
                                     p99_hit_tokens=0, max_hit_tokens=0, share_buckets=())
    q = np.quantile(hit, [0.5, 0.9, 0.99], method="lower")
    share = np.divide(hit, prompt, out=np.zeros(hit.size), where=prompt > 0)
    buckets = [(0.0, 0.0, int((share == 0).sum()))]
    for lo, hi in itertools.pairwise(HIT_SHARE_BUCKETS):
        buckets.append((lo, hi, int(((share > lo) & (share <= hi)).sum())))
    return HitLengthDistribution(
        zero_hit_requests=int((hit == 0).sum()), p50_hit_tokens=int(q[0]),
        p90_hit_tokens=int(q[1]), p99_hit_tokens=int(q[2]), max_hit_tokens=int(hit.max()),
        share_buckets=tuple(buckets),
    )


def replay_trace(
    trace: Trace,
    rules: ReplayRules | None = None,
    *,
    preset: str | None = None,
    waterfall: bool = True,
    notes: tuple[str, ...] = (),
    parallel: Parallelism = SERIAL,
    warmup: WarmupSpec | str | None = None,
    tiers: TierSetup | None = None,
) -> ReplaySummary:
    """Replay `trace` under `rules` (default: `effective_rules(trace)`) and summarise it;
    `tiers` puts tiers below the GPU pool (`prefix/tiers/`)."""
    summary, _ = replay_trace_with_requests(trace, rules, preset=preset, waterfall=waterfall,
                                            notes=notes, parallel=parallel, warmup=warmup,
                                            tiers=tiers)
    return summary


def replay_trace_with_requests(
    trace: Trace,
    rules: ReplayRules | None = None,
    *,
    preset: str | None = None,
    waterfall: bool = True,
    notes: tuple[str, ...] = (),
    parallel: Parallelism = SERIAL,
    warmup: WarmupSpec | str | None = None,
    explain: bool = False,
    metrics: EngineMetrics | None = None,
    tiers: TierSetup | None = None,
) -> tuple[ReplaySummary, RequestTable]:
    """`replay_trace` plus the per-request columns that `--out` writes.

    `preset` names the preset `rules` came from and `notes` say how they were chosen (both
    filled in when `rules` is None). `waterfall` adds the loss waterfall (its replays and its
    ideal pass) and the `TOP_PREFIXES` hot prefixes drawn from it.
    `parallel` runs the independent caches (instances, per-tenant caches) of the scope and
    capacity replays in worker processes or on a Dask cluster; the results are identical.
    `warmup` (`window.py`) replays every request but counts the totals after it only; the
    per-request columns keep every request and gain `measured`. `explain` follows the
    achieved replay's caches again for the residency section (`residency.py`: every capacity
    miss explained, reuse distances, a TTL view, vLLM's residency histograms, held against
    `metrics` when they carry them) and its per-request columns.
    `tiers` replays the tiers below the GPU pool too (`prefix/tiers/`): hits become the total
    reused, the waterfall gains one step per tier (the reuse it recovers), the summary a
    `tiers` entry and the columns the hit tokens (and bytes loaded) per source.
    """
    if rules is None:
        rules, preset, chosen = effective_rules(trace)
        notes = notes + chosen
    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    rules.check_source_block_size(source)
    prepared = prepare(trace, with_outputs=rules.cache_outputs, stream=True)
    window = None
    if warmup is not None:
        from yaotu_trace.prefix.window import measurement_window

        window = measurement_window(warmup, prepared.arrival_s)
    measured = None if window is None else window.mask()
    runs = _cache_runs(prepared, rules, waterfall, parallel, measured)
    gpu_result = runs.result  # the GPU pool alone, which the residency pass follows
    tiered = None
    tier_said: tuple[str, ...] = ()  # the notes on the tiers, in their section
    if tiers is not None:
        from yaotu_trace.prefix.tiers.replay import replay_tiers, tier_notes
        from yaotu_trace.prefix.tiers.stops import EngineStops

        try:
            tiered = replay_tiers(runs.chains, rules, tiers.tiers, tiers.policy,
                                  gpu=runs.result, explain=explain)
        except EngineStops as stopped:  # the engine never gets past this request
            raise stopped.named(str(prepared.request_id[stopped.request])) from None
        runs = _with_tiers(runs, tiered, measured)
        tier_said = tier_notes(runs.chains, rules, tiers.tiers, tiers.policy, tiered,
                               tiers.kv_bytes_per_token)
    if parallel.parallel:
        notes = (*notes, _parallel_note(prepared, rules, parallel))
    if window is not None:
        window = _with_fill(window, prepared, rules, runs)
        notes = (*notes, window.describe(), *_window_notes(window, rules))
    # After the chains: a streamed trace learns its list lengths on the first pass.
    all_notes = (*notes, *_rule_notes(trace, prepared, rules))
    summary = _summary(prepared, rules, runs, preset=preset, notes=all_notes, window=window,
                       below=None if tiers is None else tiers.tiers)
    if trace.format_name in ENGINE_COUNTED and prepared.cached_tokens is not None:
        instances = len(prepared.instance_labels) if rules.scope is Scope.GLOBAL else 1
        found = reconcile(prepared.arrival_s, prepared.request_id, prepared.cached_tokens,
                          runs.result.hit_tokens, prepared.prompt_tokens,
                          capacity_blocks=rules.capacity_blocks, instances=instances)
        summary = replace(summary, reconciliation=None if found is None
                          else replace(found, preset=preset))
    columns = _request_columns(prepared, runs)
    if tiered is not None:
        assert tiers is not None
        m = slice(None) if window is None else slice(window.warmup_requests, None)
        summary = replace(summary, tiers={
            **tiered.window(m).to_dict(tiers.kv_bytes_per_token), "notes": list(tier_said)})
        moved = None if runs.waterfall is None else runs.waterfall.loss_per_request.get(
            "gpu_moved_by_tiers")
        columns = _with_tier_columns(columns, tiered, tiers.kv_bytes_per_token, moved)
    if measured is not None:
        columns["measured"] = measured
    if explain:
        from yaotu_trace.prefix.residency import residency

        section, extra = residency(prepared, runs.chains, rules, gpu_result, metrics,
                                   tiered=tiered)
        if tiered is not None:
            other = int((tiered.gpu_hit_tokens != np.asarray(gpu_result.hit_tokens)).sum())
            if other:  # SGLang's one tree: say which GPU hits this section is about
                section = replace(section, notes=(*section.notes, (
                    f"the GPU pool's residency is its replay alone: with the {tiered.policy} "
                    f"host, {other:,} requests get other GPU hits (the load-backs evict in the "
                    "same tree; loss_gpu_moved_by_tiers_tokens)")))
        summary = replace(summary, residency=section)
        columns.update(extra)
    return summary, RequestTable(columns=columns)


def _with_fill(window: MeasurementWindow, prepared: PreparedTrace, rules: ReplayRules,
               runs: CacheRuns) -> MeasurementWindow:
    """The window with whether each finite cache had filled when it began (`window.py`)."""
    if rules.capacity_blocks is None:
        return window
    result, chains = runs.result, runs.chains
    codes = None
    if result.instance is not None:
        codes = np.asarray(result.instance, dtype=np.int64)
    if rules.capacity_per_tenant and prepared.tenant_codes is not None:
        tenants = np.asarray(prepared.tenant_codes, dtype=np.int64)
        k = int(tenants.max()) + 1 if tenants.size else 1
        codes = tenants if codes is None else codes * k + tenants
    from yaotu_trace.prefix.window import distinct_blocks_before

    distinct, caches = distinct_blocks_before(
        chains.offsets, chains.ids, window.warmup_requests, codes,
        chains.output_offsets, chains.output_ids)
    return window.with_fill(rules.capacity_blocks, distinct, caches)


def _window_notes(window: MeasurementWindow, rules: ReplayRules) -> list[str]:
    """What the fill mark means for these rules."""
    notes = []
    if window.caches > 1 and window.capacity_blocks is not None:
        notes.append(f"{window.caches} caches of {window.capacity_blocks} blocks: the window "
                     "counts as filled only when every one of them had filled")
    if window.capacity_blocks is not None and str(rules.accounting) != "clean":
        notes.append(f"the fill mark counts distinct full blocks; {rules.accounting}'s own "
                     "pool also holds what its exact accounting adds, so it may fill earlier")
    return notes


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheRuns:
    """The achieved replay, the chains it ran on, and the waterfall around it (None when it
    was not asked for)."""

    result: ReplayResult
    chains: BlockChains
    waterfall: Waterfall | None


def _cache_runs(prepared: PreparedTrace, rules: ReplayRules, waterfall: bool,
                parallel: Parallelism, measured: np.ndarray | None = None) -> CacheRuns:
    """The achieved replay, inside the waterfall when it is asked for (which replays the same
    chains under every rule step anyway)."""
    with open_runner(parallel) as runner:
        pool = runner if parallel.parallel else None
        if waterfall:
            wf = compute_waterfall(prepared, rules, pool, measured=measured)
            return CacheRuns(result=wf.achieved, chains=wf.achieved_chains, waterfall=wf)
        chains = prepared.chains(rules)
        return CacheRuns(result=cache_replays(prepared, chains, [rules], pool)[0], chains=chains,
                         waterfall=None)


def _with_tiers(runs: CacheRuns, tiered: TieredResult, measured: np.ndarray | None
                ) -> CacheRuns:
    """The achieved replay with the tiers' hits added, and one waterfall step per tier: the
    reuse it recovers below the GPU (a negative loss), so the steps still sum to ideal −
    achieved. Under SGLang's one tree the host's load-backs also move GPU hits; that move is
    a step of its own."""
    result = runs.result
    block = int(runs.chains.block_size_tokens)
    hit_tokens = tiered.hit_tokens
    extra_blocks = (hit_tokens - np.asarray(result.hit_tokens, dtype=np.int64)) // block
    total = replace(result, hit_blocks=np.asarray(result.hit_blocks) + extra_blocks,
                    hit_tokens=hit_tokens, recompute_tokens=tiered.recompute_tokens)
    wf = runs.waterfall
    if wf is None:
        return replace(runs, result=total)
    steps = list(wf.steps)
    losses = dict(wf.loss_per_request)
    reached = wf.achieved_hit_tokens
    moved = tiered.gpu_hit_tokens - np.asarray(result.hit_tokens, dtype=np.int64)
    if moved.any():
        gained = int(moved.sum() if measured is None else moved[measured].sum())
        reached += gained
        steps.append(WaterfallStep(
            step="gpu_moved_by_tiers", label="GPU hits moved by the host's load-backs",
            hit_tokens=reached, loss_tokens=-gained,
            loss_share_of_ideal=-gained / wf.ideal_hit_tokens if wf.ideal_hit_tokens else 0.0))
        losses["gpu_moved_by_tiers"] = -moved
    for spec, hits in zip(tiered.tiers, tiered.tier_hit_tokens, strict=True):
        served = int(hits.sum() if measured is None else hits[measured].sum())
        reached += served
        name = f"{spec.name}_tier"
        steps.append(WaterfallStep(
            step=name, label=f"{spec.name} tier (reuse served below the GPU)",
            hit_tokens=reached, loss_tokens=-served,
            loss_share_of_ideal=-served / wf.ideal_hit_tokens if wf.ideal_hit_tokens else 0.0))
        losses[name] = -hits
    # What the pool and the tiers served together: the hot prefixes' capacity losses are what
    # no tier recovered.
    return replace(runs, result=total, waterfall=replace(
        wf, steps=tuple(steps), loss_per_request=losses, achieved_hit_tokens=reached,
        achieved=total, hit_blocks={**wf.hit_blocks, "tiers": np.asarray(total.hit_blocks)}))


def _with_tier_columns(columns: dict[str, np.ndarray], tiered: TieredResult,
                       kv_bytes_per_token: int | None, moved: np.ndarray | None
                       ) -> dict[str, np.ndarray]:
    """`--out` with the hit tokens per source (and bytes loaded per tier) after
    `recompute_tokens`, and a loss column per tier after the waterfall's (`moved`: the loss
    column of the GPU hits the tiers moved, when they moved any)."""
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        out[name] = values
        if name == "recompute_tokens":
            out.update(tiered.columns(kv_bytes_per_token))
    if "ideal_hit_tokens" in columns:
        if moved is not None:  # SGLang's one tree: the host's load-backs moved GPU hits
            out["loss_gpu_moved_by_tiers_tokens"] = moved
        for spec, hits in zip(tiered.tiers, tiered.tier_hit_tokens, strict=True):
            out[f"loss_{spec.name}_tier_tokens"] = -hits
    return out


def _request_columns(prepared: PreparedTrace, runs: CacheRuns) -> dict[str, np.ndarray]:
    """The per-request columns of `--out`: hits, recompute, and each rule's loss."""
    result, wf = runs.result, runs.waterfall
    columns: dict[str, np.ndarray] = {
        "request_id": prepared.request_id,
        "prompt_tokens": prepared.prompt_tokens,
        "hit_tokens": result.hit_tokens,
        "recompute_tokens": result.recompute_tokens,
    }
    if wf is not None:
        columns["ideal_hit_tokens"] = wf.ideal_per_request
        for name, _ in STEPS:
            columns[f"loss_{name}_tokens"] = wf.loss_per_request[name]
    if result.instance is not None:
        columns["instance"] = result.instance
    return columns


def _summary(prepared: PreparedTrace, rules: ReplayRules, runs: CacheRuns, *,
             preset: str | None, notes: tuple[str, ...],
             window: MeasurementWindow | None,
             below: tuple[TierSpec, ...] | None = None) -> ReplaySummary:
    """Totals, the three hit ratios, the per-group splits and the waterfall of one replay;
    with a window the totals count its measured requests only. `below` are the tiers whose
    hits the totals include."""
    result, chains, wf = runs.result, runs.chains, runs.waterfall
    m = slice(None) if window is None else slice(window.warmup_requests, None)
    prompt = prepared.prompt_tokens[m]
    hit = result.hit_tokens[m]
    prompt_total = int(prompt.sum())
    cacheable = int(chains.num_blocks[m].sum())
    tenant_codes = None if prepared.tenant_codes is None else prepared.tenant_codes[m]
    per_instance: tuple[GroupStats, ...] = ()
    if result.instance is not None:
        labels = (prepared.instance_labels
                  if rules.route is None and prepared.instance_codes is not None
                  else tuple(f"instance-{k}" for k in range(result.num_instances)))
        per_instance = _groups(result.instance[m], labels, prompt, hit)
    hot: tuple[HotPrefix, ...] = ()
    if wf is not None:
        hot = hot_prefixes(wf, prepared.request_id, prepared.tenant_codes,
                           prepared.tenant_labels, top=TOP_PREFIXES)
    return ReplaySummary(
        rules=rules,
        preset=preset,
        requests=int(hit.size),
        prompt_tokens=prompt_total,
        saved_prefill_tokens=int(hit.sum()),
        remaining_prefill_tokens=int(result.recompute_tokens[m].sum()),
        hit_ratio=rates.token_weighted(hit, prompt),
        request_averaged_hit_ratio=rates.request_averaged_tokens(hit, prompt),
        cacheable_block_hit_ratio=rates.cacheable_blocks(result.hit_blocks[m],
                                                         chains.num_blocks[m]),
        cacheable_blocks=cacheable,
        distinct_blocks=chains.num_distinct,
        evicted_blocks=result.evicted_blocks,
        per_tenant=_groups(tenant_codes, prepared.tenant_labels, prompt, hit),
        per_instance=per_instance,
        hit_length=_hit_length(hit, prompt),
        ideal_hit_tokens=None if wf is None else wf.ideal_hit_tokens,
        waterfall=() if wf is None else wf.steps,
        hot_prefixes=hot,
        observed=compare_observed(prepared.cached_tokens, result.hit_tokens,
                                  prepared.prompt_tokens, rules.block_size_tokens),
        notes=notes + _rejected_note(result, rules),
        window=window,
        hit_rates=_hit_rates(prompt, result, chains, rules, m,
                             None if wf is None else wf.seen_blocks, below),
        rejected_requests=result.rejected_requests,
    )


def _rejected_note(result: ReplayResult, rules: ReplayRules) -> tuple[str, ...]:
    """Why some requests hit nothing at all under an engine-exact pool."""
    if not result.rejected_requests:
        return ()
    return (f"{result.rejected_requests:,} request(s) need more blocks than the whole pool of "
            f"{rules.capacity_blocks:,}: {rules.accounting} cannot admit them, so they count as "
            "all-miss and insert nothing; a larger --capacity admits them",)


def _hit_rates(prompt: np.ndarray, result: ReplayResult, chains: BlockChains,
               rules: ReplayRules, measured: slice, seen: np.ndarray | None,
               below: tuple[TierSpec, ...] | None = None) -> dict[str, dict[str, object]]:
    """Every hit-rate definition of the achieved replay, and AIPerf's at unlimited capacity,
    over the `measured` requests (`prompt` is already theirs); `seen` is AIPerf's numerator
    when a waterfall already replayed it. The capacity names the tiers `below` the pool too,
    whose hits the rates count ("66 blocks + cpu, disk tiers")."""
    capacity = ("unlimited" if rules.capacity_blocks is None
                else f"{rules.capacity_blocks:,} blocks")
    if below:  # their sizes are in the tiers table
        names = ", ".join(str(tier.name) for tier in below)
        capacity += f" + {names} tier{'s' if len(below) > 1 else ''}"
    leading = (seen if seen is not None else
               rates.leading_seen_blocks(chains, rules, result.hit_blocks))
    return rates.hit_rates(
        hit_tokens=result.hit_tokens[measured], hit_blocks=result.hit_blocks[measured],
        prompt_tokens=prompt, cacheable=chains.num_blocks[measured],
        block_size_tokens=rules.block_size_tokens, leading_blocks=leading[measured],
        capacity=capacity)


def _parallel_note(prepared: PreparedTrace, rules: ReplayRules, parallel: Parallelism) -> str:
    """Where the replay ran, and why it stayed in one process when it could not split."""
    if rules.scope == "instance" and rules.route == "prefix-affinity":
        why = "prefix-affinity routing follows the cache contents"
    elif rules.scope == "global" and not (rules.capacity_per_tenant
                                          and prepared.tenant_codes is not None):
        why = ("one global cache is one sequential LRU" if rules.capacity_blocks is not None
               else "one global unlimited cache needs no loop")
    else:
        return f"independent caches replayed in parallel on {parallel.describe()}"
    return (f"{why}: it cannot be split, so the achieved replay ran in one process "
            f"(other passes on {parallel.describe()})")


def _rule_notes(trace: Trace, prepared: PreparedTrace, rules: ReplayRules) -> list[str]:
    """What the reader of the report needs to know about how the rules met this trace."""
    notes = []
    has_outputs = trace.has("output_tokens") and prepared.source_block_size is None
    if not rules.cache_outputs:
        notes.append("output blocks are not cached (--cache-outputs is off"
                     + ("; the trace has output token ids" if has_outputs else "") + ")")
    elif not has_outputs:
        notes.append("--cache-outputs has no effect: the trace has no output token ids")
    if rules.tenant_isolation and prepared.tenant_codes is None:
        notes.append("tenant isolation is on but the trace has no tenant column: one namespace")
    if rules.scope == "instance" and rules.route is None and prepared.instance_codes is None:
        notes.append(f"scope instance without an instance column: round-robin over "
                     f"{rules.instances} instance(s)")
    elif rules.scope == "instance" and rules.route is None and prepared.instance_codes is not None:
        count = len(np.unique(prepared.instance_codes))
        given = (f"; --instances {rules.instances} counts the instances of a --route or of a "
                 "trace without the column, not these" if rules.instances != 1 else "")
        notes.append(f"scope instance: one cache per instance of the trace's instance column "
                     f"({count:,}){given}")
    missing = int(((np.diff(prepared.unit_offsets()) == 0) & (prepared.prompt_tokens > 0)).sum())
    if missing > 0:
        notes.append(f"{missing} request(s) have no prompt content and never hit")
    return notes
