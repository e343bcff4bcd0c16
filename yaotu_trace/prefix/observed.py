"""Observed vs replayed hits, for traces that carry the engine's own `cached_tokens`.

Agreement says the replay's rules match the engine. Two disagreements have a known cause:

- warm start: the engine's cache was already warm when the trace began, so on the first
  requests it hits more than a replay that starts cold;
- block-size mismatch: observed hits that are not multiples of the replay's block size B mean
  the engine used another block size (the largest common divisor of the observed hits is shown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

EARLY_SHARE = 0.1  # the first 10 % of requests (by arrival) are "early"
WARM_MARGIN = 0.05  # observed must beat replayed by 5 % of early prompt tokens to flag
MISMATCH_SHARE = 0.5  # more than half of the non-zero observed hits off the B grid


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedComparison:
    """Observed (engine) vs replayed hits over the requests that report `cached_tokens`."""

    requests: int
    observed_hit_tokens: int
    replayed_hit_tokens: int
    prompt_tokens: int
    observed_hit_ratio: float  # token-weighted
    replayed_hit_ratio: float  # token-weighted, same requests
    exact_match_share: float  # share of requests where observed == replayed
    mean_abs_diff_tokens: float
    warm_start: bool
    early_excess_tokens: int  # Σ (observed − replayed) over the early requests
    block_size_mismatch: bool
    off_grid_share: float  # share of non-zero observed hits not a multiple of B
    observed_block_gcd_tokens: int | None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def compare_observed(
    cached_tokens: np.ndarray | None,
    hit_tokens: np.ndarray,
    prompt_tokens: np.ndarray,
    block_size_tokens: int,
) -> ObservedComparison | None:
    """Compare per request; None when the trace reports no cached tokens."""
    if cached_tokens is None:
        return None
    known = ~np.isnan(cached_tokens)
    if not known.any():
        return None
    idx = np.flatnonzero(known)
    obs = cached_tokens[idx].astype(np.int64)
    rep = hit_tokens[idx]
    prompt = prompt_tokens[idx]
    prompt_total = int(prompt.sum())
    early = max(1, math.ceil(idx.size * EARLY_SHARE))
    excess = int((obs[:early] - rep[:early]).sum())
    early_prompt = int(prompt[:early].sum())
    warm = excess > WARM_MARGIN * early_prompt and excess > 0
    nonzero = obs[obs > 0]
    off_grid = float((nonzero % block_size_tokens != 0).mean()) if nonzero.size else 0.0
    gcd = int(reduce(math.gcd, nonzero.tolist())) if nonzero.size else None
    return ObservedComparison(
        requests=int(idx.size),
        observed_hit_tokens=int(obs.sum()),
        replayed_hit_tokens=int(rep.sum()),
        prompt_tokens=prompt_total,
        observed_hit_ratio=float(obs.sum() / prompt_total) if prompt_total else 0.0,
        replayed_hit_ratio=float(rep.sum() / prompt_total) if prompt_total else 0.0,
        exact_match_share=float((obs == rep).mean()),
        mean_abs_diff_tokens=float(np.abs(obs - rep).mean()),
        warm_start=bool(warm),
        early_excess_tokens=excess,
        block_size_mismatch=bool(off_grid > MISMATCH_SHARE),
        off_grid_share=off_grid,
        observed_block_gcd_tokens=gcd,
    )
