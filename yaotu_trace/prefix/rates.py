"""Hit-rate definitions: one small function each, so that every number says which one it is.

Tools that report "the hit rate" of the same trace disagree because they divide different
things (docs/hit-rates.md has the table and the numbers). Our primary number is the
token-weighted ratio (replay-spec §6); every other one is reported next to it under its own
key and label, with the tool that uses it, so a reader comparing tools can match them up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.rules import ReplayRules, Scope


@dataclass(frozen=True, slots=True, kw_only=True)
class RateDefinition:
    """What a hit rate divides, and who reports it that way."""

    key: str  # the JSON key
    label: str  # what the console and Markdown show
    formula: str
    used_by: str


TOKEN_WEIGHTED = RateDefinition(
    key="token_weighted", label="token-weighted",
    formula="Σ hit tokens / Σ prompt tokens",
    used_by="ours (primary), vLLM, SGLang")
REQUEST_AVERAGED = RateDefinition(
    key="request_averaged_tokens", label="request-averaged tokens",
    formula="mean over requests of hit tokens / prompt tokens",
    used_by="ours")
CACHEABLE_BLOCKS = RateDefinition(
    key="cacheable_blocks", label="cacheable blocks",
    formula="Σ hit blocks / Σ cacheable blocks",
    used_by="ours")
FULL_BLOCKS = RateDefinition(
    key="full_blocks", label="block-counted over full blocks",
    formula="Σ hit blocks / Σ floor(prompt tokens / B)",
    used_by="Mooncake FAST'25")
AIPERF = RateDefinition(
    key="aiperf_request_averaged_blocks", label="AIPerf: request-averaged blocks",
    formula="mean over requests with a block of leading already-seen blocks / "
            "ceil(prompt tokens / B), unlimited capacity, no last-token rule",
    used_by="AIPerf analyze-trace")

DEFINITIONS: tuple[RateDefinition, ...] = (
    TOKEN_WEIGHTED, REQUEST_AVERAGED, CACHEABLE_BLOCKS, FULL_BLOCKS, AIPERF)


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator else 0.0


def token_weighted(hit_tokens: np.ndarray, prompt_tokens: np.ndarray) -> float:
    """Σ hit / Σ prompt tokens: the prefill work saved (ours, spec §6; vLLM's counters)."""
    return _ratio(int(np.sum(hit_tokens)), int(np.sum(prompt_tokens)))


def request_averaged_tokens(hit_tokens: np.ndarray, prompt_tokens: np.ndarray) -> float:
    """Mean of each request's hit share; an empty prompt counts as 0 (ours, labelled)."""
    prompt = np.asarray(prompt_tokens)
    share = np.divide(hit_tokens, prompt, out=np.zeros(prompt.size), where=prompt > 0)
    return float(share.mean()) if share.size else 0.0


def cacheable_blocks(hit_blocks: np.ndarray, cacheable: np.ndarray) -> float:
    """Σ hit blocks / Σ cacheable blocks (a cached partial block counts as one; ours)."""
    return _ratio(int(np.sum(hit_blocks)), int(np.sum(cacheable)))


def full_blocks(hit_blocks: np.ndarray, prompt_tokens: np.ndarray, block_size_tokens: int
                ) -> float:
    """Σ hit blocks / Σ full prompt blocks: the block-counted ratio of Mooncake's capacity
    figure (a hit partial block counts as one), the same as `CapacityCurve`'s block ratio."""
    full = np.asarray(prompt_tokens) // block_size_tokens
    return _ratio(int(np.sum(hit_blocks)), int(full.sum()))


def aiperf_request_averaged_blocks(leading_blocks: np.ndarray, prompt_tokens: np.ndarray,
                                   block_size_tokens: int) -> float:
    """AIPerf `analyze-trace`'s hit rate: per request, the leading blocks already seen before
    it over all its blocks, a trailing partial block counting as one; requests without a block
    are left out of the mean (aiperf 0.13, `PrefixAnalyzer._compute_per_request_hit_rates`).
    `leading_blocks` comes from `leading_seen_blocks`."""
    blocks = -(-np.asarray(prompt_tokens, dtype=np.int64) // block_size_tokens)
    some = blocks > 0
    if not some.any():
        return 0.0
    return float((np.asarray(leading_blocks)[some] / blocks[some]).mean())


def leading_seen_blocks(chains: BlockChains, rules: ReplayRules,
                        replayed: np.ndarray | None = None) -> np.ndarray:
    """Leading blocks of each request that any earlier request had (AIPerf's numerator): one
    unlimited cache, no last-token rule, the rules' block identity, namespaces and (with
    `--cache-outputs`) output blocks. `replayed` (the hit blocks of a replay under `rules`) is
    that answer already when the rules are such a cache, and saves the pass."""
    if (replayed is not None and rules.unlimited and rules.scope is Scope.GLOBAL
            and not rules.last_token_rule):
        return replayed
    unlimited = rules.with_(capacity_blocks=None, scope=Scope.GLOBAL, route=None,
                            last_token_rule=False, capacity_per_tenant=False)
    # NOTE: the compiled replay starts numba; a small trace's overview (`small.py`) counts
    # these blocks in numpy and never calls this.
    from yaotu_trace.prefix.kernels.engine import replay

    # Outputs stay in: the dense ids count them in first-appearance order, which the unlimited
    # pass relies on.
    hit: np.ndarray = replay(chains.with_hit_cap(False), unlimited).hit_blocks
    return hit


def hit_rates(*, hit_tokens: np.ndarray, hit_blocks: np.ndarray, prompt_tokens: np.ndarray,
              cacheable: np.ndarray, block_size_tokens: int, leading_blocks: np.ndarray,
              capacity: str) -> dict[str, dict[str, object]]:
    """Every definition of one replay, JSON-ready: key → value, label, capacity. `capacity`
    says which cache the replay had ("unlimited", "20,000 blocks"); AIPerf's is unlimited."""
    values = {
        TOKEN_WEIGHTED.key: token_weighted(hit_tokens, prompt_tokens),
        REQUEST_AVERAGED.key: request_averaged_tokens(hit_tokens, prompt_tokens),
        CACHEABLE_BLOCKS.key: cacheable_blocks(hit_blocks, cacheable),
        FULL_BLOCKS.key: full_blocks(hit_blocks, prompt_tokens, block_size_tokens),
        AIPERF.key: aiperf_request_averaged_blocks(leading_blocks, prompt_tokens,
                                                   block_size_tokens),
    }
    return {d.key: {"value": values[d.key], "label": d.label, "formula": d.formula,
                    "capacity": "unlimited, one cache" if d is AIPERF else capacity,
                    "used_by": d.used_by}
            for d in DEFINITIONS}
