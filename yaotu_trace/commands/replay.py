"""`trace replay`: exact prefix-cache replay of a trace under explicit engine rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS
from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.shared.outputs import check_out, write_requests
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.grid import GridCapacity, parse_axis, parse_switch, replay_grid
from yaotu_trace.prefix.options import ReplayOptions, check_tier_options
from yaotu_trace.prefix.partition import SERIAL, Parallelism, open_runner
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
) -> Report:
    """`trace replay`: token-weighted hit ratio, saved prefill and the loss waterfall, under
    the rules and capacity of `options` (`prefix/options.py`; the rules given override the
    preset's, and `options.accounting` chooses whose bookkeeping a finite cache follows).

    `grid` replays every combination (`block-size=16,64`, `capacity=1Mtok,unlimited`,
    `tenant-isolation=on,off`); `parallel` runs independent caches in `jobs` processes or on
    a Dask cluster; `out` also writes the per-request hits and losses (.parquet or .csv),
    atomically. `options.warmup` counts the totals after that window only (`out` then keeps
    every request and marks the measured ones).
    """
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
    if grid:
        if out is not None:
            raise ConfigError("--out writes one replay's requests; it cannot be combined with "
                              "--grid")
        return _grid_report(loaded, options, list(grid), parallel, progress)
    return _one_replay(loaded, options, parallel, waterfall, out, progress, spec)


def _one_replay(loaded: Trace, options: ReplayOptions, parallel: Parallelism, waterfall: bool,
                out: Path | None, progress: Progress | None,
                warmup: WarmupSpec | None = None) -> Report:
    """One replay under the effective rules (and `--out`'s per-request table)."""
    rules, preset_name, notes = options.effective_rules(loaded)
    blocks = options.capacity_blocks(options.capacity, rules.block_size_tokens)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    tiers = options.tier_setup(rules, preset_name)
    tell(progress, "replaying the prefix cache", 0.2)
    summary, requests = replay_trace_with_requests(loaded, rules, preset=preset_name,
                                                   notes=notes, parallel=parallel,
                                                   waterfall=waterfall, warmup=warmup,
                                                   tiers=tiers)
    config: dict[str, Any] = {"preset": preset_name, "rules": rules.to_dict(),
                              "capacity": options.capacity}
    if tiers is not None:
        config["tiers"] = list(options.tiers)
        config["tier_policy"] = str(tiers.policy)
    if warmup is not None:
        config["warmup"] = warmup.text
    report = Report(
        command="replay",
        input=input_summary(loaded),
        config=config,
        sections={"prefix_reuse": summary.to_dict()},
    )
    if out is not None:
        write_requests(out, requests.to_columns())
    return report


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
