"""What a tiered replay returns: per request, the tokens each tier served, and the tiers'
counters.

`hit_tokens` is the total reused (GPU + every tier), `recompute_tokens` the rest, as the
GPU-only replay reports them; `tier_hit_tokens[k]` is what tier `k` (in `tiers` order) served
and was loaded onto the GPU. An engine's "full hit" (every prompt token found) is counted as
its metrics count it: all tokens hit, although the engine recomputes the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.prefix.tiers.spec import TierName, TierPolicy, TierSpec

TIER_NAMES: tuple[TierName, ...] = tuple(TierName)


@dataclass(frozen=True, slots=True, kw_only=True)
class TierCounters:
    """One tier's bookkeeping over the whole replay (chunks of its `chunk_tokens`)."""

    stored_chunks: int  # chunks written into the tier
    evicted_chunks: int  # chunks the tier dropped to make room
    # Stores the tier could not take whole: vLLM refuses the offer (no room even after
    # eviction); LMCache keeps the save's head and drops the rest; SGLang's host fails the
    # backup (a write-through chain stops there; write_back drops the node).
    failed_stores: int
    loaded_chunks: int  # chunks read from the tier onto the GPU (or promoted up)
    # Chunks dropped because the GPU holds the same KV, so nothing is lost: SGLang's host under
    # write_back reclaiming its duplicates. Stored − evicted − released is what the tier holds.
    released_chunks: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready builtins."""
        return {"stored_chunks": self.stored_chunks, "evicted_chunks": self.evicted_chunks,
                "failed_stores": self.failed_stores, "loaded_chunks": self.loaded_chunks,
                "released_chunks": self.released_chunks}


class TierEvictions:
    """Every chunk one tier evicted, in order (int64 arrays of one length): its key (the chain
    id of the chunk's last block, `BlockChains.ids`), the request whose store evicted it, and
    the request that used it last (looked it up, loaded or offered it; −1: never).

    A tier that evicts a run of pages at once (SGLang drops a node) gives the runs
    (`of_runs`), expanded into chunks when first read: at one token a page, 1e9 tokens through
    a host tier evict about 4e8 pages, 10 GB of rows that a replay nobody asks for them of
    need not hold."""

    __slots__ = ("_columns", "_runs")

    def __init__(self, *, key: np.ndarray, request: np.ndarray,
                 last_use_request: np.ndarray) -> None:
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = (
            key, request, last_use_request)
        self._runs: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def of(records: list[tuple[int, int, int]]) -> TierEvictions:
        """From (key, request, last use) records."""
        table = np.asarray(records, dtype=np.int64).reshape(-1, 3)
        return TierEvictions(key=table[:, 0].copy(), request=table[:, 1].copy(),
                             last_use_request=table[:, 2].copy())

    @staticmethod
    def of_runs(ids: np.ndarray, runs: np.ndarray) -> TierEvictions:
        """From runs of a chain's consecutive pages, one row each: (the position in `ids` of
        its first page, pages, evicting request, last use)."""
        out = TierEvictions.__new__(TierEvictions)
        out._columns = None
        out._runs = (ids, np.asarray(runs, dtype=np.int64).reshape(-1, 4))
        return out

    def __len__(self) -> int:
        if self._runs is not None:
            return int(self._runs[1][:, 1].sum())
        return len(self.key)

    @property
    def key(self) -> np.ndarray:
        """Each evicted chunk's key."""
        return self._expanded()[0]

    @property
    def request(self) -> np.ndarray:
        """The request whose store evicted each chunk."""
        return self._expanded()[1]

    @property
    def last_use_request(self) -> np.ndarray:
        """The request that used each chunk last (−1: never)."""
        return self._expanded()[2]

    def _expanded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._columns is None:
            assert self._runs is not None
            ids, table = self._runs
            pages = table[:, 1]
            first = np.repeat(table[:, 0], pages)
            first += np.arange(first.size, dtype=np.int64) - np.repeat(
                np.cumsum(pages) - pages, pages)
            self._columns = (np.asarray(ids, dtype=np.int64)[first],
                             np.repeat(table[:, 2], pages), np.repeat(table[:, 3], pages))
            self._runs = None
        return self._columns


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredResult:
    """Per-request hits of a replay with tiers below the GPU pool (int64 arrays).

    `gpu_hit_tokens` is the GPU prefix cache's own hit (vLLM's `local_cache_hit`),
    `tier_hit_tokens[k]` the tokens tier `k` served (vLLM's `external_kv_transfer`, split by
    tier). `refused` marks requests the GPU pool cannot admit at all (all miss).
    """

    policy: TierPolicy
    tiers: tuple[TierSpec, ...]
    prompt_tokens: np.ndarray
    gpu_hit_tokens: np.ndarray
    tier_hit_tokens: tuple[np.ndarray, ...]
    refused: np.ndarray  # bool per request
    counters: tuple[TierCounters, ...]
    # Per tier, what it evicted and why (for the capacity-miss explanation); () when not kept
    # (`replay_tiers(..., explain=False)`).
    evictions: tuple[TierEvictions, ...] = ()
    # Per request, the first chunk (from the prompt's start, in the tiers' chunks) that the
    # tiers lacked at its lookup: the one whose loss stopped their run (−1: none); None where
    # the pass does not say (SGLang's two-pass approximation).
    lacking_chunk: np.ndarray | None = None

    @property
    def hit_tokens(self) -> np.ndarray:
        """Tokens reused per request: GPU plus every tier."""
        total = self.gpu_hit_tokens.copy()
        for tier in self.tier_hit_tokens:
            total += tier
        return total

    @property
    def recompute_tokens(self) -> np.ndarray:
        """Prompt tokens prefilled per request (prompt − hit)."""
        return self.prompt_tokens - self.hit_tokens

    def tier_hits(self, name: TierName | str) -> np.ndarray:
        """Tokens tier `name` served per request (zeros for a tier the replay does not have)."""
        for spec, hits in zip(self.tiers, self.tier_hit_tokens, strict=True):
            if spec.name == TierName(str(name)):
                return hits
        return np.zeros_like(self.gpu_hit_tokens)

    def loaded_bytes(self, name: TierName | str, kv_bytes_per_token: int) -> np.ndarray:
        """Bytes loaded from tier `name` onto the GPU per request (its hit tokens' KV)."""
        return self.tier_hits(name) * int(kv_bytes_per_token)

    def columns(self, kv_bytes_per_token: int | None) -> dict[str, np.ndarray]:
        """The `--out` columns: hit tokens per source, and bytes loaded per tier when the KV
        bytes per token are known (every tier name, zeros for an absent tier)."""
        out = {"gpu_hit_tokens": self.gpu_hit_tokens}
        for name in TIER_NAMES:
            out[f"{name}_hit_tokens"] = self.tier_hits(name)
        if kv_bytes_per_token is not None:
            for name in TIER_NAMES:
                out[f"{name}_loaded_bytes"] = self.loaded_bytes(name, kv_bytes_per_token)
        return out

    def window(self, rows: slice) -> TieredResult:
        """The requests `rows` only (a `--warmup` window counts the hits after it)."""
        return TieredResult(policy=self.policy, tiers=self.tiers,
                            prompt_tokens=self.prompt_tokens[rows],
                            gpu_hit_tokens=self.gpu_hit_tokens[rows],
                            tier_hit_tokens=tuple(h[rows] for h in self.tier_hit_tokens),
                            refused=self.refused[rows], counters=self.counters,
                            evictions=self.evictions,
                            lacking_chunk=None if self.lacking_chunk is None
                            else self.lacking_chunk[rows])

    def to_dict(self, kv_bytes_per_token: int | None = None) -> dict[str, object]:
        """JSON-ready totals: which tier served what, and each tier's counters."""
        prompt = int(self.prompt_tokens.sum())
        gpu = int(self.gpu_hit_tokens.sum())
        tiers = []
        for spec, hits, counters in zip(self.tiers, self.tier_hit_tokens, self.counters,
                                        strict=True):
            served = int(hits.sum())
            tiers.append({
                "name": str(spec.name), "capacity_chunks": spec.capacity_chunks,
                "chunk_tokens": spec.chunk_tokens, "capacity_tokens": spec.capacity_tokens,
                "unlimited": spec.unlimited,
                "hit_tokens": served, "hit_ratio": served / prompt if prompt else 0.0,
                "requests_served": int((hits > 0).sum()),
                "loaded_bytes": None if kv_bytes_per_token is None
                else served * int(kv_bytes_per_token),
                **counters.to_dict()})
        total = gpu + sum(int(h.sum()) for h in self.tier_hit_tokens)
        return {"policy": str(self.policy), "prompt_tokens": prompt, "gpu_hit_tokens": gpu,
                "gpu_hit_ratio": gpu / prompt if prompt else 0.0, "hit_tokens": total,
                "hit_ratio": total / prompt if prompt else 0.0,
                "refused_requests": int(self.refused.sum()), "tiers": tiers}
