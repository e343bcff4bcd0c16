"""What one replay returns, and the arithmetic on hit runs every replay path shares.

Kept apart from the kernels so that each cache model (the clean engine, the engine-exact vLLM
pool and SGLang radix tree, the optimal bound) builds the same `ReplayResult` without importing
another's compiled code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """Per-request outcome of one replay (int64 arrays) and cache counters."""

    hit_blocks: np.ndarray
    hit_tokens: np.ndarray
    recompute_tokens: np.ndarray
    instance: np.ndarray | None  # int64 instance per request when scope is instance
    num_instances: int
    evicted_blocks: int
    inserted_blocks: int
    # Requests the engine-exact presets cannot admit (more blocks than the whole pool): vLLM's
    # `allocate_slots` refuses them, so they are replayed as all-miss and insert nothing.
    rejected_requests: int = 0

    @property
    def saved_prefill_tokens(self) -> int:
        """Σ hit tokens."""
        return int(self.hit_tokens.sum())

    @property
    def remaining_prefill_tokens(self) -> int:
        """Σ recompute tokens."""
        return int(self.recompute_tokens.sum())

    @property
    def hit_ratio(self) -> float:
        """Token-weighted: Σ hit tokens / Σ prompt tokens (0 for an empty trace)."""
        prompt = int(self.hit_tokens.sum() + self.recompute_tokens.sum())
        return self.saved_prefill_tokens / prompt if prompt else 0.0


def tokens_of_leading_blocks(chains: BlockChains, hit_blocks: np.ndarray) -> np.ndarray:
    """Σ block tokens of the first `hit_blocks` blocks of each request (int64).

    Every block is worth B tokens except possibly a request's last (a cached partial block),
    so this needs no pass over the blocks: B per hit block, corrected where the hit reaches a
    last block of another size.
    """
    return chains.leading_tokens(np.arange(chains.num_requests, dtype=np.int64), hit_blocks)


def hits_result(chains: BlockChains, hit_blocks: np.ndarray, *, evicted_blocks: int,
                inserted_blocks: int, rejected_requests: int = 0,
                instance: np.ndarray | None = None, num_instances: int = 1) -> ReplayResult:
    """The result of a replay that gives hit blocks per request: tokens follow from them."""
    hit = np.asarray(hit_blocks).astype(np.int64, copy=False)
    hit_tokens = tokens_of_leading_blocks(chains, hit)
    return ReplayResult(hit_blocks=hit, hit_tokens=hit_tokens,
                        recompute_tokens=chains.prompt_tokens - hit_tokens, instance=instance,
                        num_instances=num_instances, evicted_blocks=int(evicted_blocks),
                        inserted_blocks=int(inserted_blocks),
                        rejected_requests=int(rejected_requests))
