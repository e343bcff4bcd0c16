"""The prefix reuse the analyses report, as frozen values: a point of the LRU capacity curve
(`trace sweep`'s `capacity_curve` section and `trace analyze`'s overview both hold them) and the
prefix-reuse overview of `trace analyze` (computed by `prefix/overview.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPoint:
    """The curve at one capacity; `capacity_bytes` is None without KV bytes per token."""

    label: str
    capacity_blocks: int
    capacity_tokens: int
    capacity_bytes: int | None
    hit_tokens: int
    hit_ratio: float
    share_of_unlimited: float
    block_hit_ratio_over_full_blocks: float
    # With `--warmup`: whether every cache of this capacity had filled when the window began
    # (kvcache-simulator omits a budget that had not); None without a window.
    filled_before_window: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReuseOverview:
    """Reachable prefix reuse at unlimited capacity and the key points of the LRU curve.

    `hit_ratio` is token-weighted (Σ hit tokens / Σ prompt tokens); `hit_rates` has every
    definition by key (prefix/rates.py). When the trace carries no prompt content, `available`
    is False and `reason` says what is missing (and no preset is resolved).
    """

    available: bool
    reason: str | None = None
    preset: str | None = None
    block_size_tokens: int | None = None
    hit_ratio: float | None = None
    saved_prefill_tokens: int | None = None
    remaining_prefill_tokens: int | None = None
    distinct_blocks: int | None = None
    cacheable_blocks: int | None = None
    knee: CapacityPoint | None = None
    shares: tuple[CapacityPoint, ...] = ()
    full_reuse: CapacityPoint | None = None
    hit_rates: dict[str, dict[str, object]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    window: dict[str, Any] | None = None  # `--warmup`: the numbers count the requests after it
