"""The prefix-reuse section of `trace analyze`: reachable reuse and the capacity it needs.

One pass of the capacity sweep gives both the unlimited-capacity hits (the reuse the trace
offers at all) and the capacities that reach 50 / 90 / 99 % of it, so the profile answers "how
much prefill can caching save here, and with how much KV memory". The preset is resolved exactly
as `trace replay` resolves it (`effective_rules`: mooncake for a Mooncake trace, else vllm), so
analyze, replay, sweep and diagnose give one answer on one file. One unlimited replay adds every
hit-rate definition (prefix/rates.py). `trace replay` and `trace sweep` give the full detail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace.data.prefix_reuse import ReuseOverview
from yaotu_trace.prefix import small
from yaotu_trace.prefix.rules import effective_rules
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace

if TYPE_CHECKING:
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.prefix.window import WarmupSpec


def reuse_overview(trace: Trace, warmup: WarmupSpec | str | None = None, *,
                   preset: str | None = None,
                   kv_bytes_per_token: int | None = None,
                   block_size_tokens: int | None = None) -> ReuseOverview:
    """Unlimited-capacity reuse under `preset` (default: the one `trace replay` picks for this
    trace) at `block_size_tokens` (default: the preset's), every hit-rate definition, and the
    knee and 50/90/99 % capacities (over the requests after `warmup` when one is given);
    `kv_bytes_per_token` (the model's) sizes those capacities in bytes too, as the memory to
    provision is what the user asks."""
    if trace.content_column is None:
        return ReuseOverview(
            available=False,
            reason="the trace has no prompt content (prompt_tokens or prompt_block_ids), so "
            "shared prefixes cannot be seen; prefix reuse needs token or block ids",
        )
    overrides = {} if block_size_tokens is None else {"block_size_tokens": block_size_tokens}
    rules, name, notes = effective_rules(trace, preset, **overrides)
    spec = CurveSectionSpec(preset=name, points=2, kv_bytes_per_token=kv_bytes_per_token,
                            notes=notes)
    # A small trace without a window is swept in numpy (the same numbers); only a larger one
    # pays for numba's import and start.
    swept = None if warmup is not None else small.overview(trace, rules, spec)
    if swept is None:
        # NOTE: the compiled replay starts numba, which a small trace's overview never needs.
        from yaotu_trace.prefix.trace import replay_trace

        section, curve = sweep_trace(trace, rules, spec, warmup=warmup)
        hit_rates = replay_trace(trace, rules, preset=name, waterfall=False,
                                 warmup=warmup).hit_rates
    else:
        section, curve, hit_rates = swept
    prompt_tokens = int(curve.prompt_tokens_total)
    saved = int(curve.unlimited_hit_tokens)
    return ReuseOverview(
        available=True,
        preset=name,
        block_size_tokens=rules.block_size_tokens,
        hit_ratio=saved / prompt_tokens if prompt_tokens else 0.0,
        saved_prefill_tokens=saved,
        remaining_prefill_tokens=prompt_tokens - saved,
        distinct_blocks=section.distinct_blocks,
        cacheable_blocks=section.cacheable_blocks,
        knee=section.knee,
        shares=section.shares,
        full_reuse=section.full_reuse,
        hit_rates=hit_rates,
        notes=section.notes,
        window=section.window,
    )
