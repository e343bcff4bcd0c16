"""The prefix-reuse overview of a small trace in numpy alone: no numba to import or start.

`trace analyze` on a trace of a few thousand requests spends more time importing numba and
loading its compiled kernels (about 0.8 s) than the kernels then run. Here the overview's two
passes (the chain build and the stack distances) run on the numpy twins of the kernels
(`kernels/numpy_passes.py`), giving the same numbers bit for bit.

Used by the overview, up to `MAX_WORK` (content ids plus six per block: about 1.4e6
tokens in 3e5 blocks), where it is faster than numba's import and first call (measured in
docs/performance.md); `trace sweep` tries it first too. Larger traces and per-instance caches
keep the compiled passes.
"""

from __future__ import annotations

from yaotu_trace.data.schema import Trace
from yaotu_trace.prefix import rates
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.curve import CapacityCurve
from yaotu_trace.prefix.kernels.numpy_passes import sweep, unlimited_hit_blocks
from yaotu_trace.prefix.kernels.result import tokens_of_leading_blocks
from yaotu_trace.prefix.prepare import PreparedTrace
from yaotu_trace.prefix.rules import ReplayRules, Scope
from yaotu_trace.prefix.sweep_trace import (
    CapacityCurveSection,
    CurveSectionSpec,
    curve_section,
    sweep_input,
)

# The largest sweep run here, in work: content ids (tokens, or source block ids) hashed plus
# BLOCK_WORK per block swept (a block costs about six ids: its levels of the tree). Up to this
# the numpy passes take less time than numba's import and first call (about 0.8 s), measured
# in fresh processes in docs/performance.md (Start-up).
MAX_WORK = 4_000_000
BLOCK_WORK = 6


def prepared_chains(prepared: PreparedTrace, rules: ReplayRules) -> BlockChains:
    """`PreparedTrace.chains(rules)` with the numpy passes, kept with the trace for its other
    passes (`PreparedTrace.numpy_chains`); a streamed column is read whole (validated batch by
    batch as when streamed) and, as streamed, without outputs."""
    return prepared.numpy_chains(rules, prepared.namespace_codes(rules.tenant_isolation))


def sweep_size(trace: Trace, rules: ReplayRules) -> tuple[int, int]:
    """(content ids, blocks at most) a sweep of `trace` under `rules` handles, from the
    lengths alone: the content itself may still be on disk."""
    tokens = int(trace.array("prompt_len").sum())
    if rules.cache_outputs and trace.has("output_tokens") and trace.has("output_len"):
        tokens += int(trace.requests["output_len"].fillna(0).sum())
    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    blocks = tokens // rules.block_size_tokens + (
        trace.num_requests if rules.cache_partial_blocks else 0)
    return -(-tokens // (source or 1)), blocks


def sweep_trace(trace: Trace, rules: ReplayRules, spec: CurveSectionSpec
                ) -> tuple[CapacityCurveSection, CapacityCurve] | None:
    """`sweep_trace.sweep_trace` of a small trace with one global cache, in numpy; None when
    the sweep is more than `MAX_WORK` or the rules need the compiled path."""
    swept = _swept(trace, rules, spec)
    return None if swept is None else swept[:2]


def overview(trace: Trace, rules: ReplayRules, spec: CurveSectionSpec
             ) -> tuple[CapacityCurveSection, CapacityCurve, dict[str, dict[str, object]]] | None:
    """`sweep_trace` plus every hit-rate definition at unlimited capacity (what
    `replay_trace(...).hit_rates` gives), in numpy; None as `sweep_trace`."""
    swept = _swept(trace, rules, spec)
    if swept is None:
        return None
    section, curve, chains = swept
    hit_blocks = unlimited_hit_blocks(chains, capped=True)
    table = rates.hit_rates(
        hit_tokens=tokens_of_leading_blocks(chains, hit_blocks), hit_blocks=hit_blocks,
        prompt_tokens=chains.prompt_tokens, cacheable=chains.num_blocks,
        block_size_tokens=rules.block_size_tokens,
        leading_blocks=unlimited_hit_blocks(chains, capped=False), capacity="unlimited")
    return section, curve, table


def _swept(trace: Trace, rules: ReplayRules, spec: CurveSectionSpec
           ) -> tuple[CapacityCurveSection, CapacityCurve, BlockChains] | None:
    if rules.scope is not Scope.GLOBAL or rules.eviction != "lru" or rules.cache_outputs:
        return None
    if trace.content_column is None:
        return None
    units, blocks = sweep_size(trace, rules)
    if units + BLOCK_WORK * blocks > MAX_WORK:
        return None
    prepared = sweep_input(trace, rules)
    chains = prepared_chains(prepared, rules)
    curve = sweep(chains, touch_order=rules.touch_order,
                  kv_bytes_per_token=spec.kv_bytes_per_token)
    section = curve_section(prepared, rules, chains, None, curve, spec)
    return section, curve, chains
