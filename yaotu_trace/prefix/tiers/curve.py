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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

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
# `observe(gpu blocks, tier chunks or None, per-request GPU hits, per-request tier hits or None)`
Observer = Callable[[int | None, int | None, np.ndarray, np.ndarray | None], None]


class Submit(Protocol):
    """`submit(fn, *args, **kwargs)`: a future of fn's result (`_submitter`)."""

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]: ...


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
               observe: Observer | None = None, threads: int = 1) -> TierCurve:
    """Hits with one tier below the GPU pool at every pair of sizes (`rules` give the
    rest; their own capacity is replaced by each GPU size). `observe(gpu blocks, tier chunks
    or None, per-request GPU hits, per-request tier hits or None)` sees every point's
    requests (the GPU pool alone first), for what the totals cannot say (its price).

    `threads` > 1 runs every replay and pass on that many threads, each as soon as what it
    reads is there: a GPU size's tier passes wait for its GPU-only replay alone (LMCache's
    shared passes for none), so no thread idles while another finishes a GPU size. The
    compiled passes release the GIL, and the points are read back in order, so the curve and
    `observe` are those of one thread."""
    prompt = int(np.asarray(chains.prompt_tokens).sum())
    every_size = [rules.with_(capacity_blocks=blocks) for blocks in gpu_capacity_blocks]
    # LMCache's CPU or remote backend holds what it holds whatever the GPU served; its
    # local disk does not (a read refreshes it, and what is read follows the GPU hit).
    shared = policy is TierPolicy.LMCACHE and str(tier.name) != "disk"
    gpu_hits = []
    grid: list[tuple[int, ...]] = []
    with _submitter(threads) as submit:
        # Submitted first, so a pass that waits for one waits for a replay already running.
        gpus = [submit(gpu_replay, chains, sized) for sized in every_size]
        if shared:
            rows = _lmcache_rows(chains, every_size, tier, tier_capacity_chunks, submit)
        else:
            def one(g: int, chunks: int) -> TieredResult:
                return replay_tiers(chains, every_size[g],
                                    (replace(tier, capacity_chunks=chunks),), policy,
                                    gpu=gpus[g].result())

            points = [[submit(one, g, chunks) for chunks in tier_capacity_chunks]
                      for g in range(len(every_size))]
        for g, (blocks, future) in enumerate(zip(gpu_capacity_blocks, gpus, strict=True)):
            gpu = future.result()
            gpu_hits.append(int(np.asarray(gpu.hit_tokens).sum()))
            if observe is not None:
                observe(blocks, None, np.asarray(gpu.hit_tokens), None)
            if shared:
                grid.append(rows[g].hits(gpu, observe))
                continue
            row = []
            for chunks, result_future in zip(tier_capacity_chunks, points[g], strict=True):
                result = result_future.result()
                row.append(int(result.hit_tokens.sum()))
                if observe is not None:
                    observe(blocks, chunks, np.asarray(result.gpu_hit_tokens),
                            np.asarray(result.tier_hit_tokens[0]))
            grid.append(tuple(row))
    return TierCurve(gpu_capacity_blocks=tuple(gpu_capacity_blocks), tier=tier,
                     tier_capacity_chunks=tuple(tier_capacity_chunks), prompt_tokens=prompt,
                     gpu_hit_tokens=tuple(gpu_hits), hit_tokens=tuple(grid))


@dataclass(frozen=True, slots=True)
class _LmcacheRow:
    """One GPU size's row under LMCache: the backend's runs at each tier size (futures,
    shared by the GPU sizes that refuse the same requests), turned into hits once its GPU-only
    replay is there."""

    chains: BlockChains
    sized: ReplayRules
    refused: np.ndarray
    tier_capacity_chunks: tuple[int, ...]
    runs: list[Future[np.ndarray]]

    def hits(self, gpu: ReplayResult, observe: Observer | None) -> tuple[int, ...]:
        """Σ hit tokens at each tier size behind `gpu`, each point shown to `observe`."""
        from yaotu_trace.prefix.tiers.lmcache_kernel import lmcache_hits

        gpu_hit = np.where(self.refused, 0, np.asarray(gpu.hit_tokens, dtype=np.int64))
        out = []
        for chunks, run_tokens in zip(self.tier_capacity_chunks, self.runs, strict=True):
            tier_hit = lmcache_hits(run_tokens.result(), np.asarray(gpu.hit_blocks),
                                    int(self.chains.block_size_tokens),
                                    np.asarray(self.chains.prompt_tokens))
            out.append(int(gpu_hit.sum() + tier_hit.sum()))
            if observe is not None:
                observe(self.sized.capacity_blocks, chunks, gpu_hit, tier_hit)
        return tuple(out)


def _lmcache_rows(chains: BlockChains, every_size: list[ReplayRules], tier: TierSpec,
                  tier_capacity_chunks: tuple[int, ...], submit: Submit) -> list[_LmcacheRow]:
    """Each GPU size's row under LMCache: the backend's passes, one per tier size and set of
    refused requests, submitted now, beside the GPU replays (they read none of them)."""
    from yaotu_trace.prefix.tiers.lmcache_kernel import lmcache_run_tokens

    runs: dict[bytes, list[Future[np.ndarray]]] = {}
    rows = []
    for sized in every_size:
        check_tiers(chains, sized, (tier,), TierPolicy.LMCACHE)
        refused = refused_requests(chains, sized)
        key = np.packbits(refused).tobytes()
        if key not in runs:
            runs[key] = [submit(lmcache_run_tokens, chains, refused, chunks,
                                int(tier.chunk_tokens), backend=str(tier.name))
                         for chunks in tier_capacity_chunks]
        rows.append(_LmcacheRow(chains, sized, refused, tier_capacity_chunks, runs[key]))
    return rows


@contextlib.contextmanager
def _submitter(threads: int) -> Iterator[Submit]:
    """`submit(fn, *args, **kwargs)`: a future of fn's result, run on one of `threads`
    threads (at once in this one when `threads` ≤ 1). On the way out by an exception (a
    Ctrl-C included) the work not started is dropped, and the running passes, compiled and
    short, are waited for."""
    if threads <= 1:
        def now(fn: Callable[..., T], *args: object, **kwargs: object) -> Future[T]:
            done: Future[T] = Future()
            done.set_result(fn(*args, **kwargs))
            return done

        yield now
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tier-pass")
    try:
        yield pool.submit
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
