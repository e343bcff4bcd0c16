"""`trace sweep --capacities`: the curve and a real replay side by side at the capacities asked.

The one-pass curve is the clean LRU model (stack distances, spec §4). A preset with
engine-exact accounting (spec §5) replays its engine's own pool instead, which is not a stack
algorithm, so at a capacity a user cares about the two can differ: this table shows both, each
labelled with its model, so the difference is measured rather than assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from yaotu_trace.data.schema import Trace
from yaotu_trace.prefix import rates
from yaotu_trace.prefix.kernels.curve import CapacityCurve
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import ReplayRules
from yaotu_trace.prefix.waterfall import cache_replays
from yaotu_trace.prefix.window import WarmupSpec, measurement_window

CURVE_MODEL = "clean LRU"


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityRow:
    """One asked capacity: the curve's hits and the replay's (None capacity: unlimited)."""

    label: str  # as given on the command line
    capacity_blocks: int | None
    capacity_tokens: int | None
    capacity_bytes: int | None
    curve_hit_tokens: int
    curve_token_weighted_hit_ratio: float
    replay_hit_tokens: int
    replay_token_weighted_hit_ratio: float
    replay_evicted_blocks: int
    replay_rejected_requests: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityTable:
    """The `capacity_table` report section (builtins only), rows in the order asked."""

    preset: str
    curve_model: str  # "clean LRU"
    replay_model: str  # the rules' accounting: "clean", "vllm", "sglang"
    hit_ratio_definition: str
    requests: int
    prompt_tokens: int
    kv_bytes_per_token: int | None
    rows: tuple[CapacityRow, ...]
    notes: tuple[str, ...] = ()


def capacity_table(trace: Trace, rules: ReplayRules, curve: CapacityCurve, *, preset: str,
                   capacities: list[tuple[str, int | None]],
                   warmup: WarmupSpec | None = None) -> CapacityTable:
    """Read the curve at each `(label, blocks per cache)` and replay `trace` at it under `rules`
    (their own accounting), with the replay's preparation and partitions (`cache_replays`).
    With `warmup` both count the requests after it, as the curve of `sweep_trace` does."""
    prepared = prepare(trace, with_outputs=rules.cache_outputs, stream=True)
    m = (slice(None) if warmup is None
         else slice(measurement_window(warmup, prepared.arrival_s).warmup_requests, None))
    chains = prepared.chains(rules)
    results = cache_replays(prepared, chains,
                            [rules.with_(capacity_blocks=blocks) for _, blocks in capacities],
                            None)
    prompt = prepared.prompt_tokens[m]
    rows = []
    for (label, blocks), result in zip(capacities, results, strict=True):
        curve_hits = (curve.unlimited_hit_tokens if blocks is None
                      else int(curve.hit_tokens_at(blocks)))
        size_bytes = None if blocks is None else curve.to_bytes(blocks)
        rows.append(CapacityRow(
            label=label,
            capacity_blocks=blocks,
            capacity_tokens=None if blocks is None else int(curve.to_tokens(blocks)),
            capacity_bytes=None if size_bytes is None else int(size_bytes),
            curve_hit_tokens=int(curve_hits),
            curve_token_weighted_hit_ratio=(curve_hits / curve.prompt_tokens_total
                                            if curve.prompt_tokens_total else 0.0),
            replay_hit_tokens=int(result.hit_tokens[m].sum()),
            replay_token_weighted_hit_ratio=rates.token_weighted(result.hit_tokens[m], prompt),
            replay_evicted_blocks=result.evicted_blocks,
            replay_rejected_requests=result.rejected_requests,
        ))
    notes = []
    if any(r.replay_rejected_requests for r in rows):
        notes.append("a capacity smaller than a request's prompt admits it as all-miss, as the "
                     "engine refuses it")
    return CapacityTable(
        preset=preset,
        curve_model=CURVE_MODEL,
        replay_model=str(rules.accounting),
        hit_ratio_definition=f"{rates.TOKEN_WEIGHTED.label}: {rates.TOKEN_WEIGHTED.formula}",
        requests=int(prompt.size),
        prompt_tokens=int(prompt.sum()),
        kv_bytes_per_token=curve.kv_bytes_per_token,
        rows=tuple(rows),
        notes=tuple(notes),
    )
