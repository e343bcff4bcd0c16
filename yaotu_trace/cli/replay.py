"""`trace replay`: exact prefix-cache replay of a trace under explicit engine rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yaotu_trace.cli.app import command, emit, input_of, load
from yaotu_trace.cli.options import (
    CacheOutputsOpt,
    CachePartialOpt,
    DaskOpt,
    FormatOpt,
    InputFormatOpt,
    InstancesOpt,
    JobsOpt,
    KvBytesOpt,
    LastTokenRuleOpt,
    MapOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    RouteOpt,
    RuleBlockSizeOpt,
    ScopeOpt,
    SourceBlockOpt,
    TenantIsolationOpt,
    TouchOrderOpt,
    TraceArg,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.errors import ConfigError
from yaotu_trace.files import replace_atomically
from yaotu_trace.replay.rules import Eviction, Scope

if TYPE_CHECKING:
    from yaotu_trace.data.report import Report

OUT_SUFFIXES = (".parquet", ".csv")


def _capacity_blocks(text: str | None, block_size_tokens: int, model: str | None,
                     kv_bytes_per_token: int | None) -> int | None:
    """`--capacity` in blocks, tokens or bytes, as whole blocks of the effective block size."""
    if text is None:
        return None
    from yaotu_trace.catalog.units import parse_capacity

    capacity = parse_capacity(text)
    per_token = kv_bytes_per_token
    if capacity.unit == "bytes" and per_token is None and model is not None:
        from yaotu_trace.catalog.models import find_model

        per_token = find_model(model).kv_bytes_per_token
    blocks = capacity.to_blocks(block_size_tokens, per_token)
    if blocks is not None and blocks < 1:
        raise ConfigError(f"capacity {text!r} holds less than one {block_size_tokens}-token block; "
                          "give a larger capacity")
    return blocks


def check_out(path: Path) -> str:
    """The extension of `--out`, checked before any work (its folder and writability are
    checked for every command by `cli.app.command`)."""
    suffix = path.suffix.lower()
    if suffix not in OUT_SUFFIXES:
        raise ConfigError(f"--out {path}: per-request output is .parquet or .csv, not "
                          f"'{suffix or '(no extension)'}'")
    return suffix


def write_requests(path: Path, columns: Mapping[str, object]) -> None:
    """Write per-request columns as Parquet or CSV (by extension), atomically."""
    import pyarrow as pa

    suffix = check_out(path)
    table = pa.table({name: pa.array(values) for name, values in columns.items()})

    def write(tmp: Path) -> None:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, tmp)

    replace_atomically(path, write)


@command()
def replay(
    trace: TraceArg,
    preset: PresetOpt = None,
    block_size: RuleBlockSizeOpt = None,
    last_token_rule: LastTokenRuleOpt = None,
    tenant_isolation: TenantIsolationOpt = None,
    touch_order: TouchOrderOpt = None,
    cache_partial_blocks: CachePartialOpt = None,
    cache_outputs: CacheOutputsOpt = None,
    capacity: Annotated[
        str | None,
        typer.Option(help="Cache capacity per cache: blocks (20000), tokens (3.2Mtok) or bytes "
                     "(40GiB, needs --model). Default: unlimited.", show_default=False),
    ] = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    eviction: Annotated[
        Eviction | None,
        typer.Option(help="Eviction policy of a full cache.", case_sensitive=False),
    ] = None,
    scope: ScopeOpt = None,
    route: RouteOpt = None,
    instances: InstancesOpt = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the random route.")] = None,
    capacity_per_tenant: Annotated[
        bool,
        typer.Option("--capacity-per-tenant", help="Each tenant gets its own cache of "
                     "--capacity (per instance with --scope instance); needs tenant isolation."),
    ] = False,
    grid: Annotated[
        list[str] | None,
        typer.Option("--grid", metavar="AXIS=V1,V2,...", help="Replay every combination: "
                     "block-size=16,64,256, tenant-isolation=on,off, capacity=1Mtok,unlimited "
                     "(repeatable; one row each, one read of the trace per block size)."),
    ] = None,
    waterfall: Annotated[
        bool,
        typer.Option("--waterfall/--no-waterfall", help="Compute the loss waterfall (five more "
                     "replays and the token-granular ideal); off replays only the rules given."),
    ] = True,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Per-request hits and losses to .parquet or .csv."),
    ] = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Replay the prefix cache: token-weighted hit ratio, saved prefill and the loss waterfall.

    Examples:

      trace replay conversation_trace.jsonl

      trace replay chat.parquet --preset vllm --capacity 3.2Mtok --out hits.parquet

      trace replay chat.parquet --scope instance --route prefix-affinity --instances 8

      trace replay big.parquet --scope instance --capacity 2Mtok --jobs 2

      trace replay big.parquet --capacity 1Mtok --capacity-per-tenant --dask local

      trace replay chat.parquet --grid block-size=16,64,256 --grid tenant-isolation=on,off
      --grid capacity=1Mtok,10Mtok,unlimited --jobs 2
    """
    from yaotu_trace.replay import Parallelism, effective_rules, replay_trace_with_requests

    if out is not None and not grid:
        check_out(out)
    if route is not None and scope is None:
        scope = Scope.INSTANCE
    with progress("replay", quiet) as update:
        update("reading the trace", 0.0)
        loaded = load(trace, input_format, map, source_block_size, lazy_content=True)
    overrides = {
        "block_size_tokens": block_size,
        "last_token_rule": last_token_rule,
        "tenant_isolation": tenant_isolation,
        "touch_order": touch_order,
        "cache_partial_blocks": cache_partial_blocks,
        "cache_outputs": cache_outputs,
        "eviction": eviction,
        "scope": scope,
        "route": route,
        "instances": instances,
        "seed": seed,
        "capacity_per_tenant": capacity_per_tenant or None,
    }
    parallel = Parallelism(jobs=jobs, dask=dask)
    if grid:
        if out is not None:
            raise ConfigError("--out writes one replay's requests; it cannot be combined with "
                              "--grid")
        report = _grid_report(loaded, preset, overrides, grid, capacity, model,
                              kv_bytes_per_token, parallel, quiet)
        emit(report, format, output)
        return
    rules, preset_name, notes = effective_rules(loaded, preset, **overrides)
    blocks = _capacity_blocks(capacity, rules.block_size_tokens, model, kv_bytes_per_token)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    with progress("replay", quiet) as update:
        update("replaying the prefix cache", 0.2)
        summary, requests = replay_trace_with_requests(loaded, rules, preset=preset_name,
                                                       notes=notes, parallel=parallel,
                                                       waterfall=waterfall)
    from yaotu_trace.data.report import Report

    report = Report(
        command="replay",
        input=input_of(loaded),
        config={"preset": preset_name, "rules": rules.to_dict(), "capacity": capacity},
        sections={"prefix_reuse": summary.to_dict()},
    )
    if out is not None:
        write_requests(out, requests.to_columns())
    emit(report, format, output)


def _grid_report(loaded: object, preset: str | None, overrides: Mapping[str, object],
                 grid: list[str], capacity: str | None, model: str | None,
                 kv_bytes_per_token: int | None, parallel: object, quiet: bool) -> Report:
    """`--grid`: one row per (block size, tenant isolation, capacity)."""
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.replay import effective_rules
    from yaotu_trace.replay.grid import GridCapacity, parse_axis, parse_switch, replay_grid
    from yaotu_trace.replay.partition import Parallelism, open_runner

    assert isinstance(loaded, Trace) and isinstance(parallel, Parallelism)
    axes: dict[str, list[str]] = {}
    for text in grid:
        name, values = parse_axis(text)
        if name in axes:
            raise ConfigError(f"--grid {name} is given twice; list every value once: "
                              f"--grid {name}=A,B,C")
        axes[name] = values
    rules, preset_name, notes = effective_rules(loaded, preset, **overrides)
    block_sizes = ([_positive_int(v) for v in axes["block-size"]] if "block-size" in axes
                   else [rules.block_size_tokens])
    isolations = ([parse_switch(v) for v in axes["tenant-isolation"]]
                  if "tenant-isolation" in axes else [rules.tenant_isolation])
    cap_labels = axes.get("capacity") or [capacity or "unlimited"]
    capacities = [GridCapacity(label=label, blocks_by_block_size={
        b: _capacity_blocks(label, b, model, kv_bytes_per_token) for b in block_sizes})
        for label in cap_labels]
    with progress("replay", quiet) as update, open_runner(parallel) as runner:
        update("replaying the grid", 0.2)
        section = replay_grid(loaded, rules, block_sizes=block_sizes, isolations=isolations,
                              capacities=capacities, runner=runner)
    if notes:
        from dataclasses import replace

        section = replace(section, notes=tuple(notes) + section.notes)
    from yaotu_trace.data.report import Report

    return Report(
        command="replay",
        input=input_of(loaded),
        config={"preset": preset_name, "rules": rules.to_dict(),
                "grid": {"block_size_tokens": block_sizes, "tenant_isolation": isolations,
                         "capacity": cap_labels}},
        sections={"replay_grid": section},
    )


def _positive_int(text: str) -> int:
    from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_BLOCK_TOKENS:
        raise ConfigError(f"--grid block-size value {text!r}: a whole number of tokens from 1 "
                          f"to {MAX_BLOCK_TOKENS}")
    return value
