"""The two-dimensional capacity curve: hits at every GPU pool size × tier size.

A tiered pool is not a stack algorithm (what the tier holds depends on what the GPU served, and
vLLM's offers fail whole), so the curve is one exact replay per point: one GPU-only replay per
GPU size (the tiers never change the GPU's state, `replay.py`), then one pass of the tier per
tier size over those GPU hits. Where the policy allows it a pass serves several GPU sizes:
one LMCache backend in the CPU or remote holds what it holds whatever the GPU pool served (it
looks up from token 0 and saves every chunk past its own run), so its pass at a tier size
serves every GPU size that refuses the same requests (`lmcache_kernel.lmcache_run_tokens`);
LMCache's local disk is refreshed by the reads, which follow the GPU hit, so it does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.rules import ReplayRules
from yaotu_trace.prefix.tiers.replay import (
    check_tiers,
    gpu_replay,
    refused_requests,
    replay_tiers,
)
from yaotu_trace.prefix.tiers.result import TieredResult
from yaotu_trace.prefix.tiers.spec import TierPolicy, TierSpec

T = TypeVar("T")
U = TypeVar("U")


class Runner(Protocol):
    """`run(fn, items)`: fn over items, their results in order (`_passes`)."""

    def __call__(self, fn: Callable[[U], T], items: Sequence[U]) -> list[T]: ...


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
               | None = None, threads: int = 1) -> TierCurve:
    """Hits with one tier below the GPU pool at every pair of sizes (`rules` give the
    rest; their own capacity is replaced by each GPU size). `observe(gpu blocks, tier chunks
    or None, per-request GPU hits, per-request tier hits or None)` sees every point's
    requests (the GPU pool alone first), for what the totals cannot say (its price).

    `threads` > 1 runs the GPU-only replays side by side, then a GPU size's tier passes:
    each is independent of the others, and the compiled passes release the GIL. The points
    come back in order, so the curve and `observe` are those of one thread."""
    prompt = int(np.asarray(chains.prompt_tokens).sum())
    gpu_hits = []
    grid: list[tuple[int, ...]] = []
    runs: dict[bytes, list[np.ndarray]] = {}  # LMCache: per refused set, runs per tier size
    with _passes(threads) as run:
        every_size = [rules.with_(capacity_blocks=blocks) for blocks in gpu_capacity_blocks]
        # The GPU-only replays first, side by side: each is independent of the others.
        gpus = run(lambda k: gpu_replay(chains, every_size[k]), range(len(every_size)))
        # LMCache's CPU or remote backend holds what it holds whatever the GPU served; its
        # local disk does not (a read refreshes it, and what is read follows the GPU hit).
        shared = policy is TierPolicy.LMCACHE and str(tier.name) != "disk"
        # Every other point is a pass of its own: all of them in one run, so that no thread
        # waits for the last pass of a GPU size before the next size starts.
        points = [] if shared else [(g, chunks) for g in range(len(every_size))
                                    for chunks in tier_capacity_chunks]

        def one(point: tuple[int, int]) -> TieredResult:
            g, chunks = point
            return replay_tiers(chains, every_size[g],
                                (replace(tier, capacity_chunks=chunks),), policy, gpu=gpus[g])

        passes = iter(run(one, points))
        for blocks, sized, gpu in zip(gpu_capacity_blocks, every_size, gpus, strict=True):
            gpu_hits.append(int(np.asarray(gpu.hit_tokens).sum()))
            if observe is not None:
                observe(blocks, None, np.asarray(gpu.hit_tokens), None)
            if shared:
                grid.append(_lmcache_row(chains, sized, tier, tier_capacity_chunks, gpu, runs,
                                         run, observe))
                continue
            row = []
            for chunks in tier_capacity_chunks:
                result = next(passes)
                row.append(int(result.hit_tokens.sum()))
                if observe is not None:
                    observe(blocks, chunks, np.asarray(result.gpu_hit_tokens),
                            np.asarray(result.tier_hit_tokens[0]))
            grid.append(tuple(row))
    return TierCurve(gpu_capacity_blocks=tuple(gpu_capacity_blocks), tier=tier,
                     tier_capacity_chunks=tuple(tier_capacity_chunks), prompt_tokens=prompt,
                     gpu_hit_tokens=tuple(gpu_hits), hit_tokens=tuple(grid))


def _lmcache_row(chains: BlockChains, sized: ReplayRules, tier: TierSpec,
                 tier_capacity_chunks: tuple[int, ...], gpu: ReplayResult,
                 runs: dict[bytes, list[np.ndarray]],
                 run: Runner,
                 observe: Callable[[int | None, int | None, np.ndarray, np.ndarray | None],
                                   None] | None) -> tuple[int, ...]:
    """One GPU size's row under LMCache: the backend's runs at each tier size, passed once
    per set of refused requests (`runs` keeps them), turned into this GPU size's hits."""
    from yaotu_trace.prefix.tiers.lmcache_kernel import lmcache_hits, lmcache_run_tokens

    check_tiers(chains, sized, (tier,), TierPolicy.LMCACHE)
    refused = refused_requests(chains, sized)
    key = np.packbits(refused).tobytes()
    if key not in runs:
        runs[key] = run(lambda chunks: lmcache_run_tokens(
            chains, refused, chunks, int(tier.chunk_tokens), backend=str(tier.name)),
            tier_capacity_chunks)
    gpu_hit = np.where(refused, 0, np.asarray(gpu.hit_tokens, dtype=np.int64))
    row = []
    for chunks, run_tokens in zip(tier_capacity_chunks, runs[key], strict=True):
        tier_hit = lmcache_hits(run_tokens, np.asarray(gpu.hit_blocks),
                                int(chains.block_size_tokens), np.asarray(chains.prompt_tokens))
        row.append(int(gpu_hit.sum() + tier_hit.sum()))
        if observe is not None:
            observe(sized.capacity_blocks, chunks, gpu_hit, tier_hit)
    return tuple(row)


@contextlib.contextmanager
def _passes(threads: int) -> Iterator[Runner]:
    """`run(fn, items)`: fn over items, in order, on `threads` threads. On the way out by an
    exception (a Ctrl-C included) the passes not started are dropped, and the running ones,
    compiled and short, are waited for."""
    if threads <= 1:
        yield lambda fn, items: [fn(item) for item in items]
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tier-pass")
    try:
        yield lambda fn, items: list(pool.map(fn, items))
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
