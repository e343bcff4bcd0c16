"""`trace replay`: exact prefix-cache replay of a trace under explicit engine rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError
from yaotu_trace.files import replace_atomically
from yaotu_trace.prefix.rules import Scope

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.prefix.partition import Parallelism
    from yaotu_trace.prefix.rules import Accounting, Eviction, Route, TouchOrder
    from yaotu_trace.prefix.window import WarmupSpec

# Per-request output (`--out`): the formats it is written in.
OUT_SUFFIXES = (".parquet", ".csv")


def replay(
    trace: TraceSource,
    *,
    preset: str | None = None,
    block_size_tokens: int | None = None,
    last_token_rule: bool | None = None,
    tenant_isolation: bool | None = None,
    touch_order: TouchOrder | None = None,
    cache_partial_blocks: bool | None = None,
    cache_outputs: bool | None = None,
    capacity: str | None = None,
    model: str | None = None,
    kv_bytes_per_token: int | None = None,
    kv_dtype: str | None = None,
    eviction: Eviction | None = None,
    scope: Scope | None = None,
    route: Route | None = None,
    instances: int | None = None,
    seed: int | None = None,
    capacity_per_tenant: bool = False,
    accounting: Accounting | str | None = None,
    grid: Sequence[str] = (),
    waterfall: bool = True,
    jobs: int = 1,
    dask: str | None = None,
    out: Path | None = None,
    warmup: str | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace replay`: token-weighted hit ratio, saved prefill and the loss waterfall.

    `capacity` is per cache, as `--capacity` takes it (20000 blocks, 3.2Mtok, 40GiB; None:
    unlimited); `grid` replays every combination (`block-size=16,64`, `capacity=1Mtok,
    unlimited`, `tenant-isolation=on,off`); `out` also writes the per-request hits and losses
    (.parquet or .csv), atomically. `warmup` counts the totals after that window only
    (`prefix/window.py`; `out` then keeps every request and marks the measured ones).
    `accounting` chooses whose bookkeeping a finite cache follows (the vllm and sglang presets
    are engine-exact; `clean` is the spec's model). The other options override the preset's.
    """
    from yaotu_trace.prefix import Parallelism
    from yaotu_trace.prefix.window import parse_warmup

    spec = None if warmup is None else parse_warmup(warmup)
    if spec is not None and grid:
        raise ConfigError("--warmup measures one replay; it cannot be combined with --grid "
                          "(run one replay per combination)")
    if out is not None and not grid:
        check_out(out)
    if route is not None and scope is None:
        scope = Scope.INSTANCE
    if kv_dtype is not None:  # --model's KV bytes per token at --kv-dtype
        from yaotu_trace.catalog.models import model_kv_bytes_per_token

        kv_bytes_per_token = model_kv_bytes_per_token(model, kv_dtype, kv_bytes_per_token)[1]
    loaded = open_trace(trace, lazy_content=True, progress=progress, steps=False)
    overrides = {
        "block_size_tokens": block_size_tokens,
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
        "accounting": accounting,
    }
    parallel = Parallelism(jobs=jobs, dask=dask)
    if grid:
        if out is not None:
            raise ConfigError("--out writes one replay's requests; it cannot be combined with "
                              "--grid")
        return _grid_report(loaded, preset, overrides, list(grid), capacity, model,
                            kv_bytes_per_token, parallel, progress)
    return _one_replay(loaded, preset, overrides, capacity, model, kv_bytes_per_token,
                       parallel, waterfall, out, progress, spec)


def _one_replay(loaded: Trace, preset: str | None, overrides: Mapping[str, Any],
                capacity: str | None, model: str | None, kv_bytes_per_token: int | None,
                parallel: Parallelism, waterfall: bool, out: Path | None,
                progress: Progress | None, warmup: WarmupSpec | None = None) -> Report:
    """One replay under the effective rules (and `--out`'s per-request table)."""
    from yaotu_trace.prefix import effective_rules, replay_trace_with_requests

    rules, preset_name, notes = effective_rules(loaded, preset, **overrides)
    blocks = capacity_blocks(capacity, rules.block_size_tokens, model, kv_bytes_per_token)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    tell(progress, "replaying the prefix cache", 0.2)
    summary, requests = replay_trace_with_requests(loaded, rules, preset=preset_name,
                                                   notes=notes, parallel=parallel,
                                                   waterfall=waterfall, warmup=warmup)
    config: dict[str, Any] = {"preset": preset_name, "rules": rules.to_dict(),
                              "capacity": capacity}
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


def _grid_report(loaded: Trace, preset: str | None, overrides: Mapping[str, Any],
                 grid: list[str], capacity: str | None, model: str | None,
                 kv_bytes_per_token: int | None, parallel: Parallelism,
                 progress: Progress | None) -> Report:
    """`--grid`: one row per (block size, tenant isolation, capacity)."""
    from yaotu_trace.prefix import effective_rules
    from yaotu_trace.prefix.grid import GridCapacity, parse_switch, replay_grid
    from yaotu_trace.prefix.partition import open_runner

    axes = _grid_axes(grid)
    rules, preset_name, notes = effective_rules(loaded, preset, **overrides)
    block_sizes = ([_positive_int(v) for v in axes["block-size"]] if "block-size" in axes
                   else [rules.block_size_tokens])
    isolations = ([parse_switch(v) for v in axes["tenant-isolation"]]
                  if "tenant-isolation" in axes else [rules.tenant_isolation])
    cap_labels = axes.get("capacity") or [capacity or "unlimited"]
    capacities = [GridCapacity(label=label, blocks_by_block_size={
        b: capacity_blocks(label, b, model, kv_bytes_per_token) for b in block_sizes})
        for label in cap_labels]
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
    from yaotu_trace.prefix.grid import parse_axis

    axes: dict[str, list[str]] = {}
    for text in grid:
        name, values = parse_axis(text)
        if name in axes:
            raise ConfigError(f"--grid {name} is given twice; list every value once: "
                              f"--grid {name}=A,B,C")
        axes[name] = values
    return axes


def capacity_blocks(text: str | None, block_size_tokens: int, model: str | None,
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
