"""`trace sweep`: the LRU hit-ratio curve for every capacity at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.shared.curve_pricing import CurvePricer
from yaotu_trace.commands.shared.kv_bytes import kv_bytes_per_token_of
from yaotu_trace.commands.shared.pricing import PricingOptions
from yaotu_trace.commands.shared.tiers import tiered_curve
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix import small
from yaotu_trace.prefix.chain_cache import holds_streamed_chains
from yaotu_trace.prefix.options import ReplayOptions, capacity_blocks, check_tier_options
from yaotu_trace.prefix.rules import Accounting, ReplayRules, Scope
from yaotu_trace.prefix.sweep_trace import CapacityCurveSection, CurveSectionSpec, sweep_trace
from yaotu_trace.prefix.window import parse_warmup

# Capacities shown when not told otherwise (log-spaced; the knee and the shares are added).
DEFAULT_POINTS = 12


@holds_streamed_chains
def sweep(
    trace: TraceSource,
    options: ReplayOptions | None = None,
    *,
    points: int = DEFAULT_POINTS,
    capacities: Sequence[str] | str = (),
    progress: Progress | None = None,
    pricing: PricingOptions | None = None,
    threads: int = 1,
) -> Report:
    """`trace sweep`: hit ratio at every LRU capacity in one pass, the knee and the 50/90/99 %
    capacities, under the rules of `options` (they override the preset's, as on the command
    line). `options.warmup` counts the curve after that window only and marks the capacities
    not yet filled by then; a sweep has no one capacity (`options.capacity`, and
    so no `capacity_per_tenant`).

    `capacities` (`["1GiB", "20000", "3.2Mtok"]` or `"1GiB,20000"`, as `--capacity` takes each)
    adds a table of those capacities, in that order: the curve's hit ratio and a real replay's
    under the preset's own accounting (or `options.accounting`), which differ where that
    accounting is not the clean LRU. The curve itself is always the clean model (a stack
    algorithm). `threads` replays the tier curve's points side by side (`tier_curve`).
    """
    options = options or ReplayOptions()
    if options.capacity is not None:
        raise ConfigError("a sweep replays every capacity at once: list the capacities to "
                          "tabulate with --capacities (capacities=), not one capacity")
    if options.capacity_per_tenant:
        raise ConfigError("the sweep's curve is of one cache per scope; a cache per tenant is "
                          "a replay's: run trace replay --capacity C --capacity-per-tenant per "
                          "capacity")
    spec = None if options.warmup is None else parse_warmup(options.warmup)
    pricing = pricing or PricingOptions()
    pricing.check()
    if pricing.asked and spec is not None:
        raise ConfigError("prices count every request of the trace's span; drop --warmup")
    check_tier_options(options)
    if options.tiers and (len(options.tiers) > 1 or not capacities):
        raise ConfigError("trace sweep --tier draws hits over GPU size × tier size: give one "
                          "--tier (its size is the largest tier size) and the GPU sizes with "
                          "--capacities")
    if options.tiers and spec is not None:
        raise ConfigError("trace sweep --tier counts every request; drop --warmup")
    model_name, kv = kv_bytes_per_token_of(options.model, options.kv_bytes_per_token,
                                           options.kv_dtype)
    if isinstance(capacities, str):  # "1GiB,2GiB" from Python, as on the command line
        capacities = capacities.split(",")
    for text in capacities:
        if not text.strip():
            raise ConfigError("--capacities has an empty item; list capacities separated by "
                              "commas: --capacities 1GiB,2GiB,20000")
    loaded = open_trace(trace, lazy_content=True, progress=progress, steps=False,
                        without_pandas=True)
    rules, preset_name, notes = options.effective_rules(loaded)
    unit_note = options.capacity_unit_note(rules, preset_name, tuple(capacities), "--capacities")
    if unit_note is not None:
        notes = (*notes, unit_note)
    tell(progress, "sweeping every capacity", 0.2)
    asked = [(text.strip(), capacity_blocks(text.strip(), rules.block_size_tokens, model_name,
                                            kv)) for text in capacities]
    if rules.accounting != "clean":
        notes = (*notes, f"the curve is the clean LRU model (a stack algorithm); "
                 f"{rules.accounting}'s own pool is not one and differs at tight capacities "
                 "(docs/replay.md, engine-exact accounting): --capacities C1,C2 adds its "
                 "replay at those capacities")
    write_up = CurveSectionSpec(preset=preset_name, points=points, model=model_name,
                                kv_bytes_per_token=kv, notes=notes)
    # A small trace with one global cache is swept in numpy (the same curve): no numba.
    swept = small.sweep_trace(loaded, rules, write_up) if spec is None else None
    section, curve = swept or sweep_trace(loaded, rules, write_up, warmup=spec)
    sections: dict[str, Any] = {"capacity_curve": section}
    pricer = None
    priced_points: list[dict[str, Any]] = []
    priced_tiers: list[dict[str, Any]] = []
    if pricing.asked:
        tell(progress, "pricing every point of the curve", 0.5)
        pricer = CurvePricer.of(loaded, model_name, kv, pricing)
        priced_points = _priced_curve(loaded, rules, section, pricer)
    if asked:
        tell(progress, "replaying the listed capacities", 0.6)
        # NOTE: the replays load numba's kernels; the curve alone of a small trace never does.
        from yaotu_trace.prefix.capacity_table import capacity_table

        sections["capacity_table"] = capacity_table(loaded, rules, curve, preset=preset_name,
                                                    capacities=asked, warmup=spec)
    tiers = options.tier_setup(rules, preset_name)
    if tiers is not None:
        tell(progress, "replaying GPU size × tier size", 0.7)
        sections["tier_curve"] = tiered_curve(loaded, rules, tiers,
                                              tuple(blocks for _, blocks in asked), pricer,
                                              priced_tiers, threads=threads)
    if pricer is not None:
        sections["curve_pricing"] = {**pricer.head(), "capacity_points": priced_points,
                                     "tier_points": priced_tiers or None}
    config: dict[str, Any] = {"preset": preset_name, "rules": section.rules, "model": model_name,
                              "kv_bytes_per_token": kv, "points": points}
    if asked:
        config["capacities"] = [label for label, _ in asked]
    if spec is not None:
        config["warmup"] = spec.text
    if tiers is not None:
        config["tiers"] = list(options.tiers)
        config["tier_policy"] = str(tiers.policy)
        if tiers.tiers[0].store_threshold >= 2:
            config["tier_store_threshold"] = tiers.tiers[0].store_threshold
    return Report(
        command="sweep",
        input=input_summary(loaded),
        config=config,
        sections=sections,
    )


def _priced_curve(loaded: Trace, rules: ReplayRules, section: CapacityCurveSection,
                  pricer: CurvePricer) -> list[dict[str, Any]]:
    """Each point of the curve (the sampled ones, the knee, the shares, full reuse) replayed
    under the clean LRU the curve is, and priced; its hits are the curve's (checked)."""
    from yaotu_trace.prefix.kernels.engine import replay as engine_replay
    from yaotu_trace.prefix.prepare import prepare

    if rules.scope is not Scope.GLOBAL:
        raise ConfigError("pricing the curve replays its points with one global cache: drop "
                          "--scope instance (or price one replay per instance with trace "
                          "replay --gpu-price)")
    chains = prepare(loaded, with_outputs=rules.cache_outputs, stream=True).chains(rules)
    # One row per capacity: a sampled point's label, else the knee's or a share's.
    by_size: dict[int, Any] = {}
    for p in (*section.points, section.knee, *section.shares, section.full_reuse):
        if p is not None and not (p.capacity_blocks in by_size
                                  and by_size[p.capacity_blocks].label):
            by_size[p.capacity_blocks] = p
    points = list(by_size.values())
    out: list[dict[str, Any]] = []
    done: dict[int, dict[str, Any]] = {}
    for p in sorted(points, key=lambda q: q.capacity_blocks):
        if p.capacity_blocks not in done:
            result = engine_replay(chains, rules.with_(capacity_blocks=p.capacity_blocks,
                                                       accounting=Accounting.CLEAN))
            hits = np.asarray(result.hit_tokens)
            if int(hits.sum()) != p.hit_tokens:
                raise ConfigError(f"the replay at {p.capacity_blocks} blocks hits "
                                  f"{int(hits.sum()):,} tokens, the curve {p.hit_tokens:,}: "
                                  "the curve cannot be priced under these rules")
            done[p.capacity_blocks] = pricer.gpu_point(hits, p.capacity_bytes)
        out.append({"label": p.label, "capacity_blocks": p.capacity_blocks,
                    "capacity_tokens": p.capacity_tokens, "hit_ratio": p.hit_ratio,
                    **done[p.capacity_blocks]})
    return out
