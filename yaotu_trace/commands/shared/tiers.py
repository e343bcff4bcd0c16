"""The tiers section of `trace analyze` and `trace diagnose` (`--tier`): which source served
what with tiers below a GPU pool of `--capacity` (analyze) or `--kv-capacity` (diagnose)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from yaotu_trace.commands.shared.pricing import PricingOptions, price_replay
from yaotu_trace.data.engine_facts import tier_sources
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import TraceReadError
from yaotu_trace.prefix.options import ReplayOptions


def tiers_section(loaded: Trace, options: ReplayOptions) -> dict[str, Any] | None:
    """The tiered replay's totals (`TieredResult.to_dict`) under the preset's rules and the GPU
    pool of `options.capacity`; None without `--tier`."""
    return priced_tiers(loaded, options, None)[0]


def priced_tiers(loaded: Trace, options: ReplayOptions, pricing: PricingOptions | None
                 ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the tiers section, its `prefill_pricing` section or None without `pricing`'s GPU)."""
    if not options.tiers:
        return None, None
    from yaotu_trace.prefix.trace import replay_trace, replay_trace_with_requests

    rules, preset, _ = options.effective_rules(loaded)
    blocks = options.capacity_blocks(options.capacity, rules.block_size_tokens)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    setup = options.tier_setup(rules, preset)
    priced = None
    if pricing is None or pricing.gpu is None:
        summary = replay_trace(loaded, rules, preset=preset, waterfall=False, tiers=setup)
    else:
        summary, requests = replay_trace_with_requests(loaded, rules, preset=preset,
                                                       waterfall=False, tiers=setup)
        priced = price_replay(loaded, options, rules, requests.to_columns(), pricing,
                              summary.tiers)
    assert summary.tiers is not None
    return {"preset": preset, "gpu_capacity": options.capacity, "gpu_capacity_blocks": blocks,
            "block_size_tokens": rules.block_size_tokens, **summary.tiers}, priced


# Counters holding less than this share of the trace's prompt tokens cannot have counted its
# traffic (one instance of a hundred still would): the export is of another run.
MIN_COUNTED_SHARE = 0.01
# A log that names its requests (LMCache's lookup lines) is of this trace's run when at least
# this share of them are the trace's, by request id or else by prompt length (a deployment's
# log and its capture may name requests differently).
MIN_SAME_REQUESTS = 0.5


def observed_tiers(metrics: EngineMetrics | None, tiers: dict[str, Any] | None,
                   trace: Trace | None = None) -> dict[str, Any] | None:
    """The engine's hits by tier in `metrics` against the tiered replay's of `trace` (`tiers`,
    a tiers section): the `observed_tiers` section, or None when either is missing. Refused
    when the export's prompt-token counter holds under `MIN_COUNTED_SHARE` of the trace's
    prompt tokens, or when it names requests of which under `MIN_SAME_REQUESTS` are those of
    `trace` (when given). What the reader met in the file and did not use is named in the
    section's notes, beside the comparison, whichever command holds it.
    """
    found = None if metrics is None or tiers is None else tier_sources(metrics)
    if found is None or tiers is None or metrics is None:
        return None
    if trace is not None:
        _same_requests(metrics, trace)
    prompt = int(tiers["prompt_tokens"])
    if found.prompt_tokens is not None and found.prompt_tokens < MIN_COUNTED_SHARE * prompt:
        raise TraceReadError(
            f"{metrics.path}: its counters hold {found.prompt_tokens:,.0f} prompt tokens, under "
            f"{MIN_COUNTED_SHARE:.0%} of the trace's {prompt:,}: they did not count this trace's "
            "traffic (export the metrics of this trace's run)")
    from yaotu_trace.prefix.tiers.observed import compare_tiers

    section = compare_tiers(found, tiers).to_dict()
    return {**section, "notes": [*metrics.notes, *section["notes"]]}


def _same_requests(metrics: EngineMetrics, trace: Trace) -> None:
    """Refuse a log whose requests are not the trace's: too few of the ids it names are in
    the trace, and too few of its lookups' token counts are trace prompt lengths (each length
    matched once)."""
    named = metrics.request_tokens
    if not named:
        return
    df = trace.requests
    ids = set(df["request_id"].astype(str))
    by_id = sum(1 for rid, _ in named if rid in ids) / len(named)
    lengths = Counter(int(n) for n in df["prompt_len"])
    by_length = sum((Counter(n for _, n in named) & lengths).values()) / len(named)
    if max(by_id, by_length) < MIN_SAME_REQUESTS:
        raise TraceReadError(
            f"{metrics.path}: its {len(named):,} LMCache lookups are of another run: "
            f"{by_id:.0%} of their request ids and {by_length:.0%} of their token counts are "
            f"the trace's (at least {MIN_SAME_REQUESTS:.0%} of one or the other are); give "
            "the log of this trace's run")
