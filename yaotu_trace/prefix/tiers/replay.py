"""The tiered replay: the GPU pool's own replay, then the tiers below it request by request.

Loaded KV re-enters the GPU prefix cache exactly as recomputed KV would (vLLM's `cache_blocks`
after a load, LMCache's retrieve into the vLLM blocks), so a request leaves the GPU pool in
the same state whichever source served it: the GPU hits are those of the GPU-only replay under
the same rules (engine-exact for a finite `vllm` pool), and the tiers' pass reads them. That
is also why those tiers never change `gpu_hit_tokens`.

SGLang's HiCache is the exception: GPU and host share one radix tree, and a load-back
allocates (and evicts) before the request's own allocation, so what the host serves moves
what stays on the GPU. On SGLang's own finite pool it is replayed as that tree
(`sglang_tree.py`), whose GPU hits are its own.
"""

from __future__ import annotations

import numpy as np

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.rules import Accounting, ReplayRules, Scope
from yaotu_trace.prefix.tiers.result import TieredResult
from yaotu_trace.prefix.tiers.spec import SGLANG_POLICIES, VLLM_POLICIES, TierPolicy, TierSpec


def gpu_replay(chains: BlockChains, rules: ReplayRules) -> ReplayResult:
    """The GPU pool alone under `rules` (one global pool), as `trace replay` replays it."""
    from yaotu_trace.prefix.kernels.engine import replay
    from yaotu_trace.prefix.kernels.exact import replay_exact

    if rules.capacity_blocks is not None and rules.accounting is not Accounting.CLEAN:
        return replay_exact(chains, rules, None, 1)
    return replay(chains, rules)


def refused_requests(chains: BlockChains, rules: ReplayRules) -> np.ndarray:
    """Requests the GPU pool can never admit (bool): under vLLM's pool one that needs more
    than its N − 1 usable blocks, under SGLang's a prompt longer than the pool."""
    n = chains.num_requests
    if rules.capacity_blocks is None or rules.accounting is Accounting.CLEAN:
        return np.zeros(n, dtype=bool)
    block = int(chains.block_size_tokens)
    prompt = np.asarray(chains.prompt_tokens, dtype=np.int64)
    needed = -(-prompt // block)
    usable = int(rules.capacity_blocks) - (1 if rules.accounting is Accounting.VLLM else 0)
    return np.asarray(needed > usable, dtype=bool)


def replay_tiers(chains: BlockChains, rules: ReplayRules, tiers: tuple[TierSpec, ...],
                 policy: TierPolicy, *, gpu: ReplayResult | None = None,
                 explain: bool = False) -> TieredResult:
    """Per-request hits by source with `tiers` (in order: cpu, then disk, then remote) below
    the GPU pool of `rules`, moved by `policy`'s rules.

    `chains` are built under `rules`; `gpu` is the GPU-only replay of them when the caller
    has it already (else it is run here). Requests are replayed one at a time in arrival
    order, each transfer finished in the step it was issued (docs/replay.md, "Tiers below the
    GPU", says what that assumes). `explain` keeps every tier eviction (the result's
    `evictions`, which the capacity-miss explanation of `residency.py` reads); without it
    they are `()`, and vLLM's passes count their evictions without recording them.
    """
    # An unlimited tier gets room for every block of the trace: more than it can be given.
    blocks = (int(chains.offsets[-1]) + (0 if chains.output_offsets is None
                                         else int(chains.output_offsets[-1])))
    tiers = tuple(t.bounded(blocks) for t in tiers)
    check_tiers(chains, rules, tiers, policy)
    refused = refused_requests(chains, rules)
    lacking: np.ndarray | None = np.full(chains.num_requests, -1, dtype=np.int64)
    if one_tree(chains, rules, tiers, policy):
        from yaotu_trace.prefix.tiers.sglang_tree import replay_hicache_tree

        gpu_hit, tier_hits, counters, evictions = replay_hicache_tree(
            chains, refused, tiers, policy, int(rules.capacity_blocks or 0), lacking=lacking)
        return TieredResult(policy=policy, tiers=tiers,
                            prompt_tokens=np.asarray(chains.prompt_tokens, dtype=np.int64),
                            gpu_hit_tokens=gpu_hit, tier_hit_tokens=tier_hits,
                            refused=refused, counters=counters,
                            evictions=evictions if explain else (), lacking_chunk=lacking)
    if gpu is None:
        gpu = gpu_replay(chains, rules)
    gpu_blocks = np.asarray(gpu.hit_blocks, dtype=np.int64)
    if policy is TierPolicy.VLLM:
        from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_tiers

        tier_hits, counters, evictions = replay_vllm_tiers(chains, gpu_blocks, refused, tiers,
                                                           lacking=lacking, explain=explain)
    elif policy is TierPolicy.VLLM_ARC:
        from yaotu_trace.prefix.tiers.vllm_native import replay_vllm_arc

        tier_hits, counters, evictions = replay_vllm_arc(chains, gpu_blocks, refused, tiers,
                                                         lacking=lacking, explain=explain)
    elif policy is TierPolicy.LMCACHE:
        from yaotu_trace.prefix.tiers.lmcache import replay_lmcache_tiers

        tier_hits, counters, evictions = replay_lmcache_tiers(chains, gpu_blocks, refused, tiers,
                                                              lacking=lacking)
    else:
        from yaotu_trace.prefix.tiers.sglang import replay_hicache_tiers

        tier_hits, counters, evictions = replay_hicache_tiers(
            chains, gpu_blocks, refused, tiers, policy, rules.capacity_blocks)
        lacking = None
    gpu_hit = np.where(refused, 0, np.asarray(gpu.hit_tokens, dtype=np.int64))
    return TieredResult(policy=policy, tiers=tiers,
                        prompt_tokens=np.asarray(chains.prompt_tokens, dtype=np.int64),
                        gpu_hit_tokens=gpu_hit, tier_hit_tokens=tier_hits,
                        refused=refused, counters=counters,
                        evictions=evictions if explain else (), lacking_chunk=lacking)


def one_tree(chains: BlockChains, rules: ReplayRules, tiers: tuple[TierSpec, ...],
             policy: TierPolicy) -> bool:
    """Whether HiCache is replayed in SGLang's one tree of GPU and host KV
    (`sglang_tree.py`): SGLang's own finite pool (`--preset sglang` with a capacity) and a
    host in pages of that pool. Elsewhere (another accounting, an unlimited pool, a larger
    chunk) the host runs as a pass over the GPU pool's hits (`sglang.py`)."""
    return (policy in SGLANG_POLICIES and rules.accounting is Accounting.SGLANG
            and rules.capacity_blocks is not None
            and int(tiers[0].chunk_tokens) == int(chains.block_size_tokens))


def approximation_note(chains: BlockChains, rules: ReplayRules, tiers: tuple[TierSpec, ...],
                       policy: TierPolicy) -> str | None:
    """What the output says when HiCache runs as a pass over the GPU pool's hits rather than
    SGLang's one tree (None when it does not)."""
    if policy not in SGLANG_POLICIES or one_tree(chains, rules, tiers, policy):
        return None
    return ("SGLang's HiCache replayed as a pass of the host over the GPU pool's hits, an "
            "approximation (its one tree, exact against SGLang, runs on SGLang's own pool: "
            "--preset sglang with a --capacity; docs/replay.md, 'SGLang HiCache')")


def threshold_note(tiered: TieredResult) -> str | None:
    """What the output says when a store threshold left the CPU tier empty (None otherwise):
    vLLM accepts any threshold, and one above every chunk's offers stores nothing."""
    threshold = int(tiered.tiers[0].store_threshold)
    if threshold < 2 or tiered.counters[0].stored_chunks > 0:
        return None
    return (f"the cpu tier stored nothing: no chunk was offered {threshold:,} times "
            f"(--tier-store-threshold {threshold:,}; vLLM stores a chunk from its "
            f"{_ordinal(threshold)} offer on)")


def unlimited_gpu_note(rules: ReplayRules, tiered: TieredResult) -> str | None:
    """What the output says when the GPU pool above the tiers is unlimited (None otherwise):
    it keeps every prefix it computed, so a tier serves only what the GPU's own rules leave
    it (a whole prompt's last block under vLLM's last-token rule), which is rarely the
    question."""
    if rules.capacity_blocks is not None:
        return None
    served = sum(int(h.sum()) for h in tiered.tier_hit_tokens)
    return (f"the GPU pool is unlimited (no --capacity): it keeps every prefix, so the tiers "
            f"below it served only what its own rules leave them ({served:,} tokens); give "
            "the engine's pool (--capacity, e.g. its num_gpu_blocks) to see what a tier adds")


def keeps_the_latest(policy: TierPolicy, tier: TierSpec) -> bool:
    """Whether `tier` under `policy` is written every chunk when it is computed and evicts the
    least recently used (vLLM's native offload without a store threshold, LMCache): no larger
    than the GPU pool above it, it holds what the pool holds."""
    return policy is TierPolicy.LMCACHE or (policy is TierPolicy.VLLM
                                            and tier.store_threshold < 2)


def small_tier_note(rules: ReplayRules, tiered: TieredResult,
                    kv_bytes_per_token: int | None = None) -> str | None:
    """What the output says when the first tier holds no more tokens than the GPU pool above
    it, under rules that write every chunk to it when it is computed and evict the least
    recently used (vLLM's native offload without a store threshold, LMCache): it keeps the
    most recently used chunks, most of which the GPU pool still holds, so it serves little and
    its memory is paid for (None otherwise). ARC and a store threshold keep the chunks used
    more than once instead, which a small tier can serve; a tier below it serves what it
    passes on, so a small first tier is then a staging buffer, not a mistake."""
    tier = tiered.tiers[0]
    if (not keeps_the_latest(tiered.policy, tier) or len(tiered.tiers) > 1
            or rules.capacity_blocks is None or tier.unlimited):
        return None
    pool_tokens = int(rules.capacity_blocks) * int(rules.block_size_tokens)
    if tier.capacity_tokens > pool_tokens:
        return None
    pool = (f"{pool_tokens:,} tokens" if kv_bytes_per_token is None
            else f"{pool_tokens * int(kv_bytes_per_token) / 2**30:,.1f} GiB")
    return (f"the {tier.name} tier ({tier.capacity_tokens:,} tokens) is no larger than the GPU "
            f"pool above it ({pool_tokens:,} tokens): every chunk is written to it when it is "
            "computed and the least recently used leave first, so it holds the most recent "
            "ones, most of which the GPU pool still holds. A tier serves what the GPU pool has "
            f"evicted: size it above the pool's {pool} (--tier {tier.name}=...)")


def tier_notes(chains: BlockChains, rules: ReplayRules, tiers: tuple[TierSpec, ...],
               policy: TierPolicy, tiered: TieredResult,
               kv_bytes_per_token: int | None = None) -> tuple[str, ...]:
    """Every note a tiered replay's output carries about its tiers, in a fixed order."""
    said = (approximation_note(chains, rules, tiers, policy), threshold_note(tiered),
            lower_eviction_note(tiered), unlimited_gpu_note(rules, tiered),
            small_tier_note(rules, tiered, kv_bytes_per_token))
    return tuple(note for note in said if note is not None)


def lower_eviction_note(tiered: TieredResult) -> str | None:
    """What the output says when a tier below vLLM's CPU tier evicted (None otherwise): vLLM
    0.33's secondary tiers (fs, obj) never evict, so a bounded one is an LRU store of that
    size, not vLLM's; at or above the chunks the trace writes it is vLLM's exactly."""
    if tiered.policy not in VLLM_POLICIES:
        return None
    full = [(str(spec.name), counters.evicted_chunks)
            for spec, counters in zip(tiered.tiers[1:], tiered.counters[1:], strict=True)
            if counters.evicted_chunks > 0]
    if not full:
        return None
    said = ", ".join(f"{name} ({evicted:,} chunks evicted)" for name, evicted in full)
    return (f"vLLM 0.33's tiers below the CPU (fs, obj) have no size and never evict: {said} "
            "replayed as an LRU store of the size given, which vLLM's is not; "
            f"--tier {full[0][0]}=unlimited is vLLM's tier (tiering/fs/manager.py)")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def check_tiers(chains: BlockChains, rules: ReplayRules, tiers: tuple[TierSpec, ...],
                policy: TierPolicy) -> None:
    """Refuse what the tiered replay does not model, in one line each."""
    if not tiers:
        raise ConfigError("a tiered replay needs at least one --tier")
    if rules.scope is not Scope.GLOBAL or rules.capacity_per_tenant:
        raise ConfigError("--tier replays one GPU pool with its tiers; drop --scope instance, "
                          "--route and --capacity-per-tenant")
    if chains.output_ids is not None:
        raise ConfigError("--tier stores prompt KV only (vLLM's offload_prompt_only, "
                          "LMCache's save_decode_cache off); drop --cache-outputs")
    block = int(chains.block_size_tokens)
    for tier in tiers:
        if tier.chunk_tokens % block:
            raise ConfigError(f"--tier-chunk {tier.chunk_tokens} must be a whole number of "
                              f"{block}-token blocks")
    names = [t.name for t in tiers]
    if sorted(names, key=["cpu", "disk", "remote"].index) != names:
        raise ConfigError("give the tiers top down: cpu, then disk, then remote")
    if tiers[0].store_threshold >= 2 and policy not in VLLM_POLICIES:
        raise ConfigError(f"--tier-store-threshold is vLLM's store_threshold; --tier-policy "
                          f"{policy} admits every store: drop it")
    if tiers[0].store_threshold >= 2 and len(tiers) > 1:
        raise ConfigError("vLLM does not take a store_threshold with tiers below the CPU "
                          "(TieringOffloadingSpec refuses it): drop --tier-store-threshold or "
                          "the lower --tier")
    if policy is not TierPolicy.LMCACHE and tiers[0].name != "cpu":
        raise ConfigError(f"--tier-policy {policy} needs a cpu tier first: its lower tiers are "
                          "written from host memory")
    if len(tiers) > 2 and one_tree(chains, rules, tiers, policy):
        raise ConfigError("SGLang's HiCache has one storage backend below the host "
                          "(--hicache-storage-backend): give --tier disk or --tier remote, "
                          "not both")
