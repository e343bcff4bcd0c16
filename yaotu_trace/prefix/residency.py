"""Every capacity miss explained: which tier evicted the lost blocks, when, after how long idle,
and whose admission did it; reuse distances, a TTL view and vLLM's residency histograms.

`trace replay --residency` adds this to a replay. It follows the achieved replay's caches block
by block again (`kernels/residency.py`): the clean model's LRU or FIFO lists, or vLLM's block
pool from the physical blocks `exact_vllm` hands out, with each request's routes as the
achieved replay chose them, so the hits are the replay's own (checked: a difference is an
error, not a footnote). With tiers below the pool, a capacity miss is what no tier served
either, and it names the tier whose eviction lost the chunk the tiers lacked (`_tier_loss`).

- **Capacity misses.** A request whose hit stops at a block its cache once held lost the
  blocks from there to the end of its reusable run (`capacity_miss_tokens`); the block that
  stopped it names its eviction: the time (the evicting request's arrival), its idle time
  then (since its last use) and the evicting request.
- **Reuse distance** of every lookup slot that the cache once held, in seconds and in
  distinct blocks (the LRU stack distance), split into hits and capacity misses; the never-held
  slots are cold. A **TTL** of T seconds (refreshed on use) keeps a slot iff its gap is at most
  T; a parent is used whenever its child is, so the kept slots are a leading run.
- **vLLM's residency histograms** (`--kv-cache-metrics`): `vllm:kv_block_lifetime_seconds`
  (born → evicted), `vllm:kv_block_idle_before_evict_seconds` (last use → evicted) and
  `vllm:kv_block_reuse_gap_seconds` (between a block's last ≤ 4 uses), observed once per
  eviction as vLLM 0.33.0's `KVCacheMetricsCollector` does (its sampling aside: vLLM samples
  1 % of blocks by default, the replay every block).
- **Top reused prefixes**, by how many requests reused them and by the tokens reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.metric_names import VLLM_RESIDENCY_BUCKETS
from yaotu_trace.errors import YaotuError
from yaotu_trace.prefix.kernels import residency as kernels
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.exact_vllm import replay_vllm_blocks
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.prepare import PreparedTrace
from yaotu_trace.prefix.rules import Accounting, Eviction, ReplayRules, TouchOrder
from yaotu_trace.prefix.tiers.result import TieredResult

GPU = "gpu"
TTL_SECONDS: tuple[float, ...] = (60.0, 300.0, 900.0, 1800.0, 3600.0, 6 * 3600.0, 86400.0)
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
TOP_REUSED = 10
# Canonical key (`data/metric_names.HISTOGRAMS`) → vLLM's name and what one observation is.
HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    ("kv_block_lifetime_s", "vllm:kv_block_lifetime_seconds",
     "allocation to eviction, one per evicted block"),
    ("kv_block_idle_before_evict_s", "vllm:kv_block_idle_before_evict_seconds",
     "last use to eviction, one per evicted block"),
    ("kv_block_reuse_gap_s", "vllm:kv_block_reuse_gap_seconds",
     "between consecutive uses among a block's last 4, recorded at its eviction"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """Quantiles of one kind of reuse distance over lookup slots."""

    blocks: int
    tokens: int
    seconds: tuple[float, ...]  # at QUANTILES, then the maximum
    distinct_blocks: tuple[int, ...]  # the same, in distinct blocks (LRU stack distance)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        keys = [f"p{round(q * 100)}" for q in QUANTILES] + ["max"]
        return {"blocks": self.blocks, "tokens": self.tokens,
                "seconds": dict(zip(keys, self.seconds, strict=True)),
                "distinct_blocks": dict(zip(keys, self.distinct_blocks, strict=True))}


@dataclass(frozen=True, slots=True, kw_only=True)
class TtlRow:
    """What a cache lifetime of `ttl_s` (refreshed on use, unlimited size) keeps."""

    ttl_s: float
    kept_tokens: int
    kept_share: float  # of the reusable tokens (every slot its cache once held)
    hit_ratio: float  # kept tokens / prompt tokens

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"ttl_s": self.ttl_s, "kept_tokens": self.kept_tokens,
                "kept_share": self.kept_share, "hit_ratio": self.hit_ratio}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResidencyHistogram:
    """One of vLLM's residency histograms as the replay computes it (and the engine's)."""

    key: str
    metric: str
    definition: str
    count: int
    sum_s: float
    quantiles_s: tuple[float, ...]  # at QUANTILES, exact over the observations
    buckets: tuple[tuple[float, int], ...]  # (le, cumulative count), vLLM's bounds
    engine: dict[str, float] | None = None  # count, mean_s, p50_s.. from the export

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {
            "metric": self.metric, "definition": self.definition, "count": self.count,
            "sum_s": self.sum_s, "mean_s": self.sum_s / self.count if self.count else None,
            "quantiles_s": {f"p{round(q * 100)}": v
                            for q, v in zip(QUANTILES, self.quantiles_s, strict=True)},
            "buckets": [{"le": le, "count": c} for le, c in self.buckets],
            "engine": self.engine,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ReusedPrefix:
    """A prefix that hits ended at, with every request whose hit covered it."""

    prefix_tokens: int
    prefix_blocks: int
    requests: int  # requests whose hit covered the whole prefix
    reused_tokens: int  # requests × prefix tokens
    tenants: tuple[str, ...]
    example_request_id: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"prefix_tokens": self.prefix_tokens, "prefix_blocks": self.prefix_blocks,
                "requests": self.requests, "reused_tokens": self.reused_tokens,
                "tenants": list(self.tenants), "example_request_id": self.example_request_id}


@dataclass(frozen=True, slots=True, kw_only=True)
class Residency:
    """The `kv_residency` section of `trace replay --residency`."""

    tier: str
    accounting: str
    capacity_blocks: int | None
    block_size_tokens: int
    prompt_tokens: int
    hit_tokens: int
    reusable_tokens: int  # every lookup slot its cache once held (the same caches, unlimited)
    capacity_miss_requests: int
    capacity_miss_tokens: int
    # Capacity misses whose evicted block is named; None where no pass follows the policy's
    # evictions (0 would read as "none could be explained").
    explained_requests: int | None
    rejected_requests: int
    idle_at_eviction_s: tuple[float, ...]  # over the explained misses, QUANTILES then max
    hits: Spread
    capacity_misses: Spread
    cold_blocks: int
    ttl: tuple[TtlRow, ...]
    histograms: tuple[ResidencyHistogram, ...]
    top_by_requests: tuple[ReusedPrefix, ...]
    top_by_tokens: tuple[ReusedPrefix, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins: no NumPy scalars, no NaN."""
        keys = [f"p{round(q * 100)}" for q in QUANTILES] + ["max"]
        return {
            "tier": self.tier, "accounting": self.accounting,
            "capacity_blocks": self.capacity_blocks,
            "block_size_tokens": self.block_size_tokens,
            "prompt_tokens": self.prompt_tokens, "hit_tokens": self.hit_tokens,
            "reusable_tokens": self.reusable_tokens,
            "capacity_misses": {
                "requests": self.capacity_miss_requests, "tokens": self.capacity_miss_tokens,
                "explained_requests": self.explained_requests,
                "rejected_requests": self.rejected_requests,
                "idle_at_eviction_s": (dict(zip(keys, self.idle_at_eviction_s, strict=True))
                                       if self.idle_at_eviction_s else None),
            },
            "reuse_distance": {"hits": self.hits.to_dict(),
                               "capacity_misses": self.capacity_misses.to_dict(),
                               "cold_blocks": self.cold_blocks},
            "ttl": [r.to_dict() for r in self.ttl],
            "histograms": {h.key: h.to_dict() for h in self.histograms},
            "top_reused_prefixes": {"by_requests": [p.to_dict() for p in self.top_by_requests],
                                    "by_tokens": [p.to_dict() for p in self.top_by_tokens]},
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Followed:
    """What following one replay's caches gives, before it is summarised."""

    hit_blocks: np.ndarray
    miss_s: np.ndarray  # per request: when the block that stopped its hit was evicted
    miss_idle: np.ndarray
    miss_by: np.ndarray  # the evicting request's index, -1 when none
    life: np.ndarray
    idle: np.ndarray
    gaps: np.ndarray
    semantics: str


def cache_codes(prepared: PreparedTrace, rules: ReplayRules,
                result: ReplayResult) -> tuple[np.ndarray, int]:
    """The cache of every request as the achieved replay used it, and how many caches."""
    n = prepared.num_requests
    codes = (np.zeros(n, dtype=np.int64) if result.instance is None
             else np.asarray(result.instance, dtype=np.int64))
    k = max(int(result.num_instances), 1)
    if rules.capacity_per_tenant and prepared.tenant_codes is not None:
        tenants = np.asarray(prepared.tenant_codes, dtype=np.int64)
        kt = int(tenants.max()) + 1 if tenants.size else 1
        codes = codes * kt + tenants
        k *= kt
    return codes, k


def follow(chains: BlockChains, rules: ReplayRules, codes: np.ndarray, k: int,
           arrival_s: np.ndarray) -> Followed | None:
    """The replay's caches followed block by block (None where no pass follows them: optimal
    and LFU eviction, SGLang's radix tree)."""
    arrival = np.ascontiguousarray(arrival_s, dtype=np.float64)
    exact = rules.capacity_blocks is not None and rules.accounting is not Accounting.CLEAN
    if exact and rules.accounting is Accounting.VLLM:
        return _follow_vllm(chains, int(rules.capacity_blocks or 0), codes, k, arrival)
    if exact or rules.eviction in (Eviction.OPTIMAL, Eviction.LFU):
        return None
    n = chains.num_requests
    outputs = chains.output_offsets is not None and chains.output_ids is not None
    out_offsets = chains.output_offsets if outputs else np.zeros(n + 1, dtype=np.int64)
    out_ids = chains.output_ids if outputs else np.zeros(0, dtype=np.int32)
    capacity = -1 if rules.capacity_blocks is None else int(rules.capacity_blocks)
    hit, miss_s, miss_idle, miss_by, life, idle, gaps = kernels.clean_residency(
        chains.offsets, chains.ids, chains.max_hit_blocks, out_offsets, out_ids, codes,
        np.int64(k), np.int64(chains.num_distinct), np.int64(capacity),
        rules.eviction is Eviction.FIFO, rules.touch_order is TouchOrder.HEAD_FIRST, arrival)
    return Followed(hit_blocks=hit, miss_s=miss_s, miss_idle=miss_idle, miss_by=miss_by,
                    life=life, idle=idle, gaps=gaps,
                    semantics="clean model: a block is born when inserted, used when touched "
                              "while cached, evicted when its list drops it")


def _follow_vllm(chains: BlockChains, num_gpu_blocks: int, codes: np.ndarray, k: int,
                 arrival: np.ndarray) -> Followed:
    """vLLM's pool per cache: its physical blocks, then their events, merged in request order."""
    n = chains.num_requests
    hit = np.zeros(n, dtype=np.int64)
    miss_s = np.full(n, np.nan)
    miss_idle = np.full(n, np.nan)
    miss_by = np.full(n, -1, dtype=np.int64)
    life, idle, gaps = [], [], []
    for c in range(k):
        rows = np.flatnonzero(codes == c)
        if rows.size == 0:
            continue
        part = chains if rows.size == chains.num_requests else chains.of_requests(rows)
        result, physical = replay_vllm_blocks(part, num_gpu_blocks)
        assert physical is not None
        s, i_, by, lf, idl, gp = kernels.vllm_residency(
            part.offsets, part.ids, part.max_hit_blocks, result.hit_blocks, physical.blocks,
            physical.offsets, np.int64(physical.num_nodes), np.int64(part.num_distinct),
            arrival[rows])
        hit[rows] = result.hit_blocks
        miss_s[rows] = s
        miss_idle[rows] = i_
        miss_by[rows] = np.where(by >= 0, rows[np.maximum(by, 0)], -1)
        life.append(lf)
        idle.append(idl)
        gaps.append(gp)
    return Followed(hit_blocks=hit, miss_s=miss_s, miss_idle=miss_idle, miss_by=miss_by,
                    life=_cat(life), idle=_cat(idle), gaps=_cat(gaps),
                    semantics="vLLM's block pool: a physical block is born when the free queue "
                              "hands it out, used when a lookup hits it, evicted when the "
                              "queue hands it out again (KVCacheMetricsCollector)")


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)


def distances(chains: BlockChains, rules: ReplayRules, codes: np.ndarray, k: int,
              arrival_s: np.ndarray, refused: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """(gap seconds, distinct-block distance) of every lookup slot (`reuse_distances`)."""
    n = chains.num_requests
    outputs = chains.output_offsets is not None and chains.output_ids is not None
    out_offsets = (np.asarray(chains.output_offsets) if outputs
                   else np.zeros(n + 1, dtype=np.int64))
    out_ids = chains.output_ids if outputs else np.zeros(0, dtype=np.int32)
    touches = np.diff(chains.offsets) + np.diff(out_offsets)
    skip = np.zeros(n, dtype=np.bool_) if refused is None else refused.astype(np.bool_)
    per_cache = np.bincount(codes, weights=np.where(skip, 0, touches), minlength=k)
    tree_offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(per_cache.astype(np.int64) + 1, out=tree_offsets[1:])
    return kernels.reuse_distances(
        chains.offsets, chains.ids, chains.max_hit_blocks, out_offsets, out_ids, codes,
        np.int64(k), np.int64(chains.num_distinct),
        np.ascontiguousarray(arrival_s, dtype=np.float64),
        rules.touch_order is TouchOrder.HEAD_FIRST, tree_offsets, skip)


def residency(prepared: PreparedTrace, chains: BlockChains, rules: ReplayRules,
              result: ReplayResult, metrics: EngineMetrics | None = None,
              top: int = TOP_REUSED, *, tiered: TieredResult | None = None
              ) -> tuple[Residency, dict[str, np.ndarray]]:
    """The `kv_residency` section of one replay and its `--out` columns. With `tiered` (the
    same replay with tiers below the GPU pool) a capacity miss is what neither the pool nor a
    tier served, and it names the tier that dropped the chunk the tiers lacked (`_tier_loss`)."""
    codes, k = cache_codes(prepared, rules, result)
    followed = follow(chains, rules, codes, k, prepared.arrival_s)
    notes: list[str] = []
    if followed is not None and not np.array_equal(followed.hit_blocks, result.hit_blocks):
        raise YaotuError("internal: the residency pass did not reproduce the replay's hits")
    exact_vllm = followed is not None and followed.semantics.startswith("vLLM")
    refused = None
    if exact_vllm and result.rejected_requests:
        refused = (result.hit_blocks == 0) & _refused(chains, rules, result)
    gap, dist = distances(chains, rules, codes, k, prepared.arrival_s, refused)
    n = chains.num_requests
    starts = chains.offsets[:-1]
    slot_request = chains.request_of_block()
    position = np.arange(chains.ids.size, dtype=np.int64) - starts[slot_request]
    held = ~np.isnan(gap)
    served = np.asarray(result.hit_blocks, dtype=np.int64)
    if tiered is not None:  # the blocks the pool and the tiers served together
        served = np.minimum(-(-np.asarray(tiered.hit_tokens, dtype=np.int64)
                              // int(rules.block_size_tokens)), np.diff(chains.offsets))
    hit_slot = position < served[slot_request]
    miss_slot = held & ~hit_slot
    tokens = chains.block_tokens.astype(np.int64)
    reusable_blocks = np.bincount(slot_request[held], minlength=n)
    lost_tokens = np.bincount(slot_request[miss_slot], weights=tokens[miss_slot],
                              minlength=n).astype(np.int64)
    lost = lost_tokens > 0
    first_miss = np.minimum(starts + served, np.maximum(chains.offsets[1:] - 1, 0))
    has_first = lost & (served < reusable_blocks)
    columns: dict[str, np.ndarray] = {"capacity_miss_tokens": lost_tokens}
    # The pool's own eviction names a miss where the pool alone decided it: no tiers, or tiers
    # that served nothing past the pool's hit and did not lose the block themselves.
    by_index = np.full(n, -1, dtype=np.int64)
    at = np.full(n, np.nan)
    idle = np.full(n, np.nan)
    if followed is not None:
        pool = lost & (followed.miss_by >= 0)
        if tiered is not None:
            pool &= served == np.asarray(result.hit_blocks)
        by_index[pool] = followed.miss_by[pool]
        at[pool] = followed.miss_s[pool]
        idle[pool] = followed.miss_idle[pool]
    source = np.empty(n, dtype=object)
    source[:] = None
    source[by_index >= 0] = GPU
    if tiered is not None:
        _tier_loss(chains, prepared, tiered, served, lost, source, at, idle, by_index)
        notes.append(_TIER_LOSS_NOTE)
    named = lost & (by_index >= 0)
    if followed is not None or named.any():
        columns["evicted_from"] = source
        columns["evicted_at_s"] = np.where(named, at, np.nan)
        columns["evicted_idle_s"] = np.where(named, idle, np.nan)
        by = np.empty(n, dtype=object)
        by[:] = None
        by[named] = prepared.request_id[by_index[named]]
        columns["evicted_by_request"] = by
    timed = named & ~np.isnan(idle)
    idle_q = _quantiles(idle[timed]) if timed.any() else ()
    if followed is not None:
        explained: int | None = int(named.sum())
        histograms = tuple(_histogram(key, name, text, values, metrics)
                           for (key, name, text), values in zip(
                               HISTOGRAMS, (followed.life, followed.idle, followed.gaps),
                               strict=True))
        notes.append(followed.semantics)
    else:
        explained, histograms = None, ()
        notes.append(f"no pass follows the evictions of {_policy(rules)}: the misses are "
                     "counted and their reuse distances given, but not who evicted them"
                     + (f" from the GPU pool ({int(named.sum()):,} named by the tiers' "
                        "evictions)" if named.any() else ""))
    columns["miss_reuse_gap_s"] = np.where(has_first, gap[first_miss], np.nan)
    columns["miss_reuse_distance_blocks"] = np.where(has_first, dist[first_miss], -1)
    if rules.capacity_blocks is None:
        notes.append("unlimited capacity: nothing is evicted, every held block hits")
    reusable = int(tokens[held].sum())
    prompt = int(chains.prompt_tokens.sum())
    section = Residency(
        tier=GPU if tiered is None else "+".join([GPU, *(str(t.name) for t in tiered.tiers)]),
        accounting=str(rules.accounting if rules.capacity_blocks is not None
                                 else Accounting.CLEAN),
        capacity_blocks=rules.capacity_blocks, block_size_tokens=rules.block_size_tokens,
        prompt_tokens=prompt, hit_tokens=int((result.hit_tokens if tiered is None
                                              else tiered.hit_tokens).sum()),
        reusable_tokens=reusable, capacity_miss_requests=int(lost.sum()),
        capacity_miss_tokens=int(lost_tokens.sum()), explained_requests=explained,
        rejected_requests=int(result.rejected_requests), idle_at_eviction_s=idle_q,
        hits=_spread(gap, dist, tokens, held & hit_slot),
        capacity_misses=_spread(gap, dist, tokens, miss_slot),
        cold_blocks=int((~held & (position < chains.max_hit_blocks[slot_request])).sum()),
        ttl=ttl_rows(gap, tokens, reusable, prompt),
        histograms=histograms,
        top_by_requests=reused_prefixes(chains, served, prepared, top, "requests"),
        top_by_tokens=reused_prefixes(chains, served, prepared, top, "tokens"),
        notes=tuple(notes),
    )
    return section, columns


_TIER_LOSS_NOTE = (
    "with tiers below the GPU pool a capacity miss is what neither the pool nor a tier served; "
    "it names the tier that last dropped the chunk the tiers lacked at the request's lookup "
    "(its eviction before the request: when, idle since its last use, by whose store), or the "
    "pool when the tiers never held that chunk and served nothing past the pool's hit; the "
    "histograms are the GPU pool's")


def _tier_loss(chains: BlockChains, prepared: PreparedTrace, tiered: TieredResult,
               served: np.ndarray, lost: np.ndarray, source: np.ndarray, at: np.ndarray,
               idle: np.ndarray, by_index: np.ndarray) -> None:
    """Name, in place, the tier whose eviction lost each request's lacking chunk (the first
    the tiers did not hold at its lookup, `TieredResult.lacking_chunk`): the latest eviction
    of that chunk's key by a request before it, over every tier. Only where the request's
    first unserved block lies at or past that chunk: a block inside a chunk the tiers held was
    left by a rule (less than one chunk past the GPU hit, SGLang's ten-token load-back), not
    by a tier's capacity."""
    if tiered.lacking_chunk is None:
        return
    if not tiered.evictions:
        raise ValueError("the capacity-miss explanation reads the tiers' evictions: replay "
                         "the tiers with replay_tiers(..., explain=True)")
    n = chains.num_requests
    per_chunk = int(tiered.tiers[0].chunk_tokens) // int(chains.block_size_tokens)
    lacking = np.asarray(tiered.lacking_chunk, dtype=np.int64)
    rows = np.flatnonzero(lost & (lacking >= 0) & (served >= lacking * per_chunk))
    if rows.size == 0:
        return
    keys = np.asarray(chains.ids, dtype=np.int64)[
        chains.offsets[rows] + (lacking[rows] + 1) * per_chunk - 1]
    best = np.full(rows.size, -1, dtype=np.int64)  # the latest evicting request so far
    for spec, evictions in zip(tiered.tiers, tiered.evictions, strict=True):
        if len(evictions) == 0:
            continue
        order = np.asarray(evictions.key, dtype=np.int64) * (n + 1) + evictions.request
        sort = np.argsort(order, kind="stable")
        found = np.searchsorted(order[sort], keys * (n + 1) + rows) - 1
        ok = found >= 0
        pick = sort[np.where(ok, found, 0)]
        ok &= np.asarray(evictions.key)[pick] == keys
        later = ok & (np.asarray(evictions.request)[pick] > best)
        if not later.any():
            continue
        who = np.asarray(evictions.request)[pick]
        last = np.asarray(evictions.last_use_request)[pick]
        best = np.where(later, who, best)
        r = rows[later]
        source[r] = str(spec.name)
        by_index[r] = who[later]
        at[r] = prepared.arrival_s[who[later]]
        idle[r] = np.where(last[later] >= 0,
                           prepared.arrival_s[who[later]]
                           - prepared.arrival_s[np.maximum(last[later], 0)], np.nan)


def _refused(chains: BlockChains, rules: ReplayRules, result: ReplayResult) -> np.ndarray:
    """Requests vLLM's pool could not admit: more blocks than it has."""
    block = int(rules.block_size_tokens)
    need = np.maximum(-(-np.asarray(chains.prompt_tokens, dtype=np.int64) // block),
                      chains.num_blocks)
    return need > int(rules.capacity_blocks or 0) - 1


def _policy(rules: ReplayRules) -> str:
    if rules.capacity_blocks is not None and rules.accounting is Accounting.SGLANG:
        return "SGLang's radix tree"
    return f"{rules.eviction} eviction"


def _quantiles(values: np.ndarray) -> tuple[float, ...]:
    if values.size == 0:
        return tuple(0.0 for _ in (*QUANTILES, 1))
    q = np.quantile(values, QUANTILES, method="lower")
    return (*(float(v) for v in q), float(values.max()))


def _spread(gap: np.ndarray, dist: np.ndarray, tokens: np.ndarray, mask: np.ndarray) -> Spread:
    seconds = _quantiles(gap[mask])
    blocks = tuple(int(v) for v in _quantiles(dist[mask].astype(np.float64)))
    return Spread(blocks=int(mask.sum()), tokens=int(tokens[mask].sum()), seconds=seconds,
                  distinct_blocks=blocks)


def ttl_rows(gap: np.ndarray, tokens: np.ndarray, reusable: int, prompt: int,
             ttls: tuple[float, ...] = TTL_SECONDS) -> tuple[TtlRow, ...]:
    """What each cache lifetime keeps: the held slots whose gap is at most it."""
    held = ~np.isnan(gap)
    g = gap[held]
    t = tokens[held]
    order = np.argsort(g, kind="stable")
    cum = np.concatenate(([0], np.cumsum(t[order])))
    rows = []
    for ttl in ttls:
        kept = int(cum[np.searchsorted(g[order], ttl, side="right")])
        rows.append(TtlRow(ttl_s=ttl, kept_tokens=kept,
                           kept_share=kept / reusable if reusable else 0.0,
                           hit_ratio=kept / prompt if prompt else 0.0))
    return tuple(rows)


def bucket_counts(values: np.ndarray,
                  bounds: tuple[float, ...] = VLLM_RESIDENCY_BUCKETS) -> tuple[tuple[float, int],
                                                                               ...]:
    """Cumulative counts at each `le` bound, then +Inf, as Prometheus exports them."""
    v = np.sort(values)
    out = [(float(le), int(np.searchsorted(v, le, side="right"))) for le in bounds]
    out.append((float("inf"), int(v.size)))
    return tuple(out)


def bucket_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """Prometheus' `histogram_quantile` over cumulative (le, count) buckets: linear inside the
    bucket that holds rank q·count; the lowest bucket starts at 0; +Inf gives its lower bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def _histogram(key: str, metric: str, definition: str, values: np.ndarray,
               metrics: EngineMetrics | None) -> ResidencyHistogram:
    buckets = bucket_counts(values)
    engine = None
    if metrics is not None and metrics.name_of(key) is not None:
        engine = _engine_histogram(key, metrics, buckets)
    return ResidencyHistogram(
        key=key, metric=metric, definition=definition, count=int(values.size),
        sum_s=float(values.sum()), quantiles_s=_quantiles(values)[:len(QUANTILES)],
        buckets=buckets, engine=engine)


def _engine_histogram(key: str, metrics: EngineMetrics,
                      ours: tuple[tuple[float, int], ...]) -> dict[str, float] | None:
    """The engine's count, mean and bucket quantiles, beside the replay's read the same way."""
    count = metrics.histogram_count(key)
    if not count:
        return None
    theirs = []
    for le, _ in ours:
        c = metrics.bucket_increase(key, le)
        if c is None:
            return {"count": count, "mean_s": metrics.histogram_mean(key) or 0.0}
        theirs.append((le, c))
    out: dict[str, float] = {"count": count, "mean_s": metrics.histogram_mean(key) or 0.0}
    for q in QUANTILES:
        label = f"p{round(q * 100)}"
        e = bucket_quantile(q, tuple(theirs))
        r = bucket_quantile(q, tuple((le, float(c)) for le, c in ours))
        if e is not None:
            out[f"{label}_s"] = e
        if r is not None:
            out[f"replay_{label}_s"] = r
    return out


def reused_prefixes(chains: BlockChains, hit_blocks: np.ndarray, prepared: PreparedTrace,
                    top: int, by: str) -> tuple[ReusedPrefix, ...]:
    """The prefixes hits ended at, ranked by the requests whose hit covered them or by the
    tokens those requests reused (requests × prefix tokens)."""
    starts = chains.offsets[:-1]
    hit = np.asarray(hit_blocks, dtype=np.int64)
    rows = np.flatnonzero(hit > 0)
    if rows.size == 0:
        return ()
    slot_request = chains.request_of_block()
    position = np.arange(chains.ids.size, dtype=np.int64) - starts[slot_request]
    hit_slots = position < hit[slot_request]
    covered = np.bincount(chains.ids[hit_slots], minlength=max(chains.num_distinct, 1))
    ends = chains.ids[starts[rows] + hit[rows] - 1].astype(np.int64)
    uniq, first = np.unique(ends, return_index=True)
    example = rows[first]
    depth = hit[example]
    prefix_tokens = chains.leading_tokens(example, depth)
    requests = covered[uniq]
    reused = requests * prefix_tokens
    key = requests if by == "requests" else reused
    order = np.lexsort((-prefix_tokens, -key))[:top]
    out = []
    for g in order:
        tenants: tuple[str, ...] = ()
        if prepared.tenant_codes is not None:
            who = np.flatnonzero(np.isin(ends, uniq[g]))
            tenants = tuple(prepared.tenant_labels[t]
                            for t in np.unique(prepared.tenant_codes[rows[who]]))
        out.append(ReusedPrefix(prefix_tokens=int(prefix_tokens[g]), prefix_blocks=int(depth[g]),
                                requests=int(requests[g]), reused_tokens=int(reused[g]),
                                tenants=tenants,
                                example_request_id=str(prepared.request_id[example[g]])))
    return tuple(out)
