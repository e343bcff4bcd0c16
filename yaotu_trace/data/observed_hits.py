"""Observed against replayed hits over time, as values: the section `trace analyze`, `replay`
and `diagnose` show for a capture whose cached_tokens are the engine's own, and what
`trace check --fail-on observed-shortfall` judges (computed in `prefix/reconcile.py`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class HitWindow:
    """Observed and replayed hits of the requests arriving in [start_s, end_s)."""

    start_s: float
    end_s: float
    requests: int
    prompt_tokens: int
    observed_hit_tokens: int
    replayed_hit_tokens: int

    @property
    def gap_points(self) -> float:
        """(replayed − observed) / prompt tokens: how far the engine fell short, in ratio."""
        return ((self.replayed_hit_tokens - self.observed_hit_tokens) / self.prompt_tokens
                if self.prompt_tokens else 0.0)

    @property
    def gap_relative(self) -> float:
        """(replayed − observed) / replayed."""
        return ((self.replayed_hit_tokens - self.observed_hit_tokens) / self.replayed_hit_tokens
                if self.replayed_hit_tokens else 0.0)



@dataclass(frozen=True, slots=True, kw_only=True)
class RequestGap:
    """One request whose observed hits differ from the replay's."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    observed_hit_tokens: int
    replayed_hit_tokens: int



@dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    """A likely cause of the difference and the numbers it rests on. `tested` says whether
    another replay of the same requests was run to check it (`agrees`: it matched the
    engine's counts, `ruled out`: it did not) or the cause is read from the counts alone
    (`untested`)."""

    cause: str  # capacity, routing, tenant-salt, reset, counting
    text: str
    basis: str
    tested: str = "untested"  # agrees, ruled out, untested



@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSize:
    """The deployment's KV pool of one instance in blocks of the replay's block size, and
    where it was read (a flag, the engine's metrics, the capture), for the capacity reason."""

    blocks: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconciliation:
    """Observed and replayed hits side by side: per window, per request, the shortfall
    stretch (None when there is none at the margins) and the likely reasons."""

    points: float
    relative: float
    windows: tuple[HitWindow, ...]
    differing_requests: int
    below_tokens: int  # Σ (replayed − observed) where observed is below
    above_tokens: int  # Σ (observed − replayed) where observed is above
    largest_differences: tuple[RequestGap, ...]
    shortfall: HitWindow | None  # the stretch, as one window over its requests
    reasons: tuple[Reason, ...]
    preset: str | None = None  # the engine rules replayed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins, the fields as they are (the same as a report section's)."""
        return asdict(self)
