"""`trace replay`: exact prefix-cache replay of a trace under explicit engine rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS
from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.shared.outputs import check_out, write_requests
from yaotu_trace.commands.shared.pricing import PricingOptions, price_replay
from yaotu_trace.commands.shared.tiers import observed_tiers
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.load import read_metrics, same_capture
from yaotu_trace.prefix.grid import GridCapacity, parse_axis, parse_switch, replay_grid
from yaotu_trace.prefix.options import ReplayOptions, check_tier_options
from yaotu_trace.prefix.partition import SERIAL, Parallelism, open_runner
from yaotu_trace.prefix.reconcile_replay import reconcile_trace
from yaotu_trace.prefix.trace import replay_trace_with_requests
from yaotu_trace.prefix.window import WarmupSpec, parse_warmup


def replay(
    trace: TraceSource,
    options: ReplayOptions | None = None,
    *,
    grid: Sequence[str] = (),
    waterfall: bool = True,
    parallel: Parallelism = SERIAL,
    out: Path | None = None,
    progress: Progress | None = None,
    metrics: Path | None = None,
    pricing: PricingOptions | None = None,
) -> Report:
    """`trace replay`: token-weighted hit ratio, saved prefill and the loss waterfall, under
    the rules and capacity of `options` (`prefix/options.py`; the rules given override the
    preset's, and `options.accounting` chooses whose bookkeeping a finite cache follows).

    `grid` replays every combination (`block-size=16,64`, `capacity=1Mtok,unlimited`,
    `tenant-isolation=on,off`); `parallel` runs independent caches in `jobs` processes or on
    a Dask cluster; `out` also writes the per-request hits and losses (.parquet or .csv),
    atomically. `options.warmup` counts the totals after that window only (`out` then keeps
    every request and marks the measured ones). `options.residency` adds the `kv_residency`
    section and its `out` columns, its vLLM histograms held against the engine's own in
    `metrics` (an export with `--kv-cache-metrics`) when they are there. `pricing` (a GPU,
    links, prices) adds the `prefill_pricing` section: what the cache saves in GPU-hours and
    money per day of the trace's traffic.
    """
    pricing = pricing or PricingOptions()
    pricing.check()
    options = options or ReplayOptions()
    spec = None if options.warmup is None else parse_warmup(options.warmup)
    if spec is not None and grid:
        raise ConfigError("--warmup measures one replay; it cannot be combined with --grid "
                          "(run one replay per combination)")
    if out is not None and not grid:
        check_out(out)
    options.kv_bytes()  # --model's KV bytes per token at --kv-dtype, refused before any work
    check_tier_options(options)
    if options.tiers and grid:
        raise ConfigError("--tier replays one GPU pool with its tiers; it cannot be combined "
                          "with --grid (use trace sweep for a curve over sizes)")
    loaded = open_trace(trace, lazy_content=True, progress=progress, steps=False)
    if grid and (options.residency or metrics is not None or pricing.asked):
        raise ConfigError("--residency, --metrics and prices explain one replay; they cannot be "
                          "combined with --grid (run one replay per combination)")
    if metrics is not None and not (options.residency or options.tiers):
        raise ConfigError("--metrics holds vLLM's residency histograms (--residency) or the "
                          "engine's hits by tier (--tier) against the replay's: add --residency "
                          "or --tier")
    engine = None if metrics is None else read_metrics(metrics)
    if engine is not None:
        same_capture(loaded, engine)
    if grid:
        if out is not None:
            raise ConfigError("--out writes one replay's requests; it cannot be combined with "
                              "--grid")
        return _grid_report(loaded, options, list(grid), parallel, progress)
    return _one_replay(loaded, options, parallel, waterfall, out, progress, spec, engine,
                       pricing)


def _one_replay(loaded: Trace, options: ReplayOptions, parallel: Parallelism, waterfall: bool,
                out: Path | None, progress: Progress | None,
                warmup: WarmupSpec | None = None,
                metrics: EngineMetrics | None = None,
                pricing: PricingOptions | None = None) -> Report:
    """One replay under the effective rules (and `--out`'s per-request table)."""
    rules, preset_name, notes = options.effective_rules(loaded)
    blocks = options.capacity_blocks(options.capacity, rules.block_size_tokens)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    if (note := options.capacity_unit_note(rules, preset_name)) is not None:
        notes = (*notes, note)
    limits = loaded.engine_limits
    if options.capacity is None and limits is not None and limits.num_gpu_blocks is not None:
        notes = (*notes, f"the capture states the engine's KV pool: {limits.num_gpu_blocks:,} "
                 f"blocks (vLLM's num_gpu_blocks); this replay's cache is unlimited: --preset "
                 f"vllm --capacity {limits.num_gpu_blocks} replays that pool")
    tiers = options.tier_setup(rules, preset_name)
    tell(progress, "replaying the prefix cache", 0.2)
    summary, requests = replay_trace_with_requests(loaded, rules, preset=preset_name,
                                                   notes=notes, parallel=parallel,
                                                   waterfall=waterfall, warmup=warmup,
                                                   tiers=tiers, explain=options.residency,
                                                   metrics=metrics)
    if summary.reconciliation is not None:
        # The causes another replay can test (tenants salted or not, a cache per instance),
        # as `trace analyze` and `trace diagnose` test them.
        tell(progress, "testing causes against the engine's cached tokens", 0.8)
        found = summary.reconciliation
        summary = replace(summary, reconciliation=reconcile_trace(
            loaded, rules, preset=preset_name, margins=(found.points, found.relative),
            hits=requests.columns["hit_tokens"]))
    config: dict[str, Any] = {"preset": preset_name, "rules": rules.to_dict(),
                              "capacity": options.capacity}
    if tiers is not None:
        config["tiers"] = list(options.tiers)
        config["tier_policy"] = str(tiers.policy)
        if tiers.tiers[0].store_threshold >= 2:
            config["tier_store_threshold"] = tiers.tiers[0].store_threshold
    if warmup is not None:
        config["warmup"] = warmup.text
    sections: dict[str, Any] = {"prefix_reuse": summary.to_dict()}
    if summary.residency is not None:
        sections["kv_residency"] = summary.residency.to_dict()
    if metrics is not None and summary.tiers is not None:
        sections["observed_tiers"] = _observed_tiers(metrics, summary.tiers, loaded)
    if pricing is not None and pricing.gpu is not None:
        sections["prefill_pricing"] = price_replay(loaded, options, rules,
                                                   requests.to_columns(), pricing,
                                                   summary.tiers)
    report = Report(
        command="replay",
        input=input_summary(loaded),
        config=config,
        sections=sections,
    )
    if out is not None:
        write_requests(out, requests.to_columns())
    return report


def _observed_tiers(metrics: EngineMetrics, tiers: dict[str, Any], loaded: Trace
                    ) -> dict[str, Any]:
    """The engine's hits by tier against the replay's; refused when `metrics` has none."""
    section = observed_tiers(metrics, tiers, loaded)
    if section is None:
        raise ConfigError("--metrics has no hits by tier to hold against --tier: give vLLM's "
                          "/metrics (vllm:prompt_tokens_cached_by_source or "
                          "vllm:prompt_tokens_by_source), SGLang's (sglang:cached_tokens_total "
                          "with --enable-hierarchical-cache) or a vLLM log with LMCache's "
                          "'LMCache hit tokens' lines")
    return section


def _grid_report(loaded: Trace, options: ReplayOptions, grid: list[str],
                 parallel: Parallelism, progress: Progress | None) -> Report:
    """`--grid`: one row per (block size, tenant isolation, capacity)."""
    axes = _grid_axes(grid)
    rules, preset_name, notes = options.effective_rules(loaded)
    block_sizes = ([_positive_int(v) for v in axes["block-size"]] if "block-size" in axes
                   else [rules.block_size_tokens])
    isolations = ([parse_switch(v) for v in axes["tenant-isolation"]]
                  if "tenant-isolation" in axes else [rules.tenant_isolation])
    cap_labels = axes.get("capacity") or [options.capacity or "unlimited"]
    capacities = [GridCapacity(label=label, blocks_by_block_size={
        b: options.capacity_blocks(label, b) for b in block_sizes}) for label in cap_labels]
    with open_runner(parallel) as runner:
        tell(progress, "replaying the grid", 0.2)
        section = replay_grid(loaded, rules, block_sizes=block_sizes, isolations=isolations,
                              capacities=capacities, runner=runner)
    if notes:
        section = replace(section, notes=tuple(notes) + section.notes)
    return Report(
        command="replay",
        input=input_summary(loaded),
        config={"preset": preset_name, "rules": rules.to_dict(),
                "grid": {"block_size_tokens": block_sizes, "tenant_isolation": isolations,
                         "capacity": cap_labels}},
        sections={"replay_grid": section},
    )


def _grid_axes(grid: list[str]) -> dict[str, list[str]]:
    """`--grid AXIS=V1,V2` options by axis; an axis given twice is refused."""
    axes: dict[str, list[str]] = {}
    for text in grid:
        name, values = parse_axis(text)
        if name in axes:
            raise ConfigError(f"--grid {name} is given twice; list every value once: "
                              f"--grid {name}=A,B,C")
        axes[name] = values
    return axes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_BLOCK_TOKENS:
        raise ConfigError(f"--grid block-size value {text!r}: a whole number of tokens from 1 "
                          f"to {MAX_BLOCK_TOKENS}")
    return value
