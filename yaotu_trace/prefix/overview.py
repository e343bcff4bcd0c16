"""The prefix-reuse section of `trace analyze`: reachable reuse and the capacity it needs.

One pass of the capacity sweep under the vLLM preset gives both the unlimited-capacity hits
(the reuse the trace offers at all) and the capacities that reach 50 / 90 / 99 % of it, so the
profile answers "how much prefill can caching save here, and with how much KV memory" without a
second replay. `trace replay` and `trace sweep` give the full detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.prefix.sweep_trace import CapacityPoint

OVERVIEW_PRESET = "vllm"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReuseOverview:
    """Reachable prefix reuse at unlimited capacity and the key points of the LRU curve.

    `hit_ratio` is token-weighted (Σ hit tokens / Σ prompt tokens). When the trace carries no
    prompt content, `available` is False and `reason` says what is missing.
    """

    available: bool
    reason: str | None = None
    preset: str = OVERVIEW_PRESET
    block_size_tokens: int | None = None
    hit_ratio: float | None = None
    saved_prefill_tokens: int | None = None
    remaining_prefill_tokens: int | None = None
    distinct_blocks: int | None = None
    cacheable_blocks: int | None = None
    knee: CapacityPoint | None = None
    shares: tuple[CapacityPoint, ...] = ()
    full_reuse: CapacityPoint | None = None
    notes: tuple[str, ...] = ()


def reuse_overview(trace: Trace) -> ReuseOverview:
    """Unlimited-capacity reuse under the vLLM preset, plus the knee and 50/90/99 % capacities."""
    if trace.content_column is None:
        return ReuseOverview(
            available=False,
            reason="the trace has no prompt content (prompt_tokens or prompt_block_ids), so "
            "shared prefixes cannot be seen; prefix reuse needs token or block ids",
        )
    from yaotu_trace.prefix import small
    from yaotu_trace.prefix.rules import effective_rules

    rules, preset, notes = effective_rules(trace, OVERVIEW_PRESET)
    # A small trace is swept in numpy (the same numbers); only a larger one pays for numba's
    # import and start.
    swept = small.sweep_trace(trace, rules, preset=preset, points=2, notes=notes)
    if swept is None:
        from yaotu_trace.prefix.sweep_trace import sweep_trace

        swept = sweep_trace(trace, rules, preset=preset, points=2, notes=notes)
    section, curve = swept
    prompt_tokens = int(curve.prompt_tokens_total)
    saved = int(curve.unlimited_hit_tokens)
    return ReuseOverview(
        available=True,
        preset=preset,
        block_size_tokens=rules.block_size_tokens,
        hit_ratio=saved / prompt_tokens if prompt_tokens else 0.0,
        saved_prefill_tokens=saved,
        remaining_prefill_tokens=prompt_tokens - saved,
        distinct_blocks=section.distinct_blocks,
        cacheable_blocks=section.cacheable_blocks,
        knee=section.knee,
        shares=section.shares,
        full_reuse=section.full_reuse,
        notes=section.notes,
    )
