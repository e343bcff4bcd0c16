"""The two-dimensional capacity curve: hits at every GPU pool size × tier size.

A tiered pool is not a stack algorithm (what the tier holds depends on what the GPU served, and
vLLM's offers fail whole), so the curve is one exact replay per point: one GPU-only replay per
GPU size (the tiers never change the GPU's state, `replay.py`), then one pass of the tier per
tier size over those GPU hits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.rules import ReplayRules
from yaotu_trace.prefix.tiers.replay import gpu_replay, replay_tiers
from yaotu_trace.prefix.tiers.spec import TierPolicy, TierSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class TierCurve:
    """Σ hit tokens at each (GPU blocks, tier chunks) point; None GPU blocks is unlimited."""

    gpu_capacity_blocks: tuple[int | None, ...]
    tier: TierSpec  # the tier whose size varies (its capacity is the first of the axis)
    tier_capacity_chunks: tuple[int, ...]
    prompt_tokens: int
    gpu_hit_tokens: tuple[int, ...]  # per GPU size: the GPU pool alone
    hit_tokens: tuple[tuple[int, ...], ...]  # [gpu][tier]: GPU plus the tier

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins: the axes, and hit ratios alongside the tokens."""
        p = self.prompt_tokens
        return {
            "tier": str(self.tier.name), "chunk_tokens": self.tier.chunk_tokens,
            "gpu_capacity_blocks": list(self.gpu_capacity_blocks),
            "tier_capacity_chunks": list(self.tier_capacity_chunks),
            "prompt_tokens": p,
            "gpu_hit_tokens": list(self.gpu_hit_tokens),
            "gpu_hit_ratio": [h / p if p else 0.0 for h in self.gpu_hit_tokens],
            "hit_tokens": [list(row) for row in self.hit_tokens],
            "hit_ratio": [[h / p if p else 0.0 for h in row] for row in self.hit_tokens],
        }


def tier_curve(chains: BlockChains, rules: ReplayRules, tier: TierSpec, policy: TierPolicy,
               gpu_capacity_blocks: tuple[int | None, ...],
               tier_capacity_chunks: tuple[int, ...], *,
               observe: Callable[[int | None, int | None, np.ndarray, np.ndarray | None], None]
               | None = None) -> TierCurve:
    """Hits with one tier below the GPU pool at every pair of sizes (`rules` give the
    rest; their own capacity is replaced by each GPU size). `observe(gpu blocks, tier chunks
    or None, per-request GPU hits, per-request tier hits or None)` sees every point's
    requests (the GPU pool alone first), for what the totals cannot say (its price)."""
    prompt = int(np.asarray(chains.prompt_tokens).sum())
    gpu_hits = []
    grid = []
    for blocks in gpu_capacity_blocks:
        sized = rules.with_(capacity_blocks=blocks)
        gpu = gpu_replay(chains, sized)
        gpu_hits.append(int(np.asarray(gpu.hit_tokens).sum()))
        if observe is not None:
            observe(blocks, None, np.asarray(gpu.hit_tokens), None)
        row = []
        for chunks in tier_capacity_chunks:
            result = replay_tiers(chains, sized, (replace(tier, capacity_chunks=chunks),),
                                  policy, gpu=gpu)
            row.append(int(result.hit_tokens.sum()))
            if observe is not None:
                observe(blocks, chunks, np.asarray(result.gpu_hit_tokens),
                        np.asarray(result.tier_hit_tokens[0]))
        grid.append(tuple(row))
    return TierCurve(gpu_capacity_blocks=tuple(gpu_capacity_blocks), tier=tier,
                     tier_capacity_chunks=tuple(tier_capacity_chunks), prompt_tokens=prompt,
                     gpu_hit_tokens=tuple(gpu_hits), hit_tokens=tuple(grid))
