"""`trace sweep`: the LRU hit-ratio curve for every capacity at once."""

from __future__ import annotations

from typing import Annotated

import typer

from yaotu_trace.cli.app import (
    FormatOpt,
    InputFormatOpt,
    KvBytesOpt,
    MapOpt,
    OutputOpt,
    SourceBlockOpt,
    TraceArg,
    command,
    emit,
    input_of,
    load,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.errors import ConfigError
from yaotu_trace.report import Report


@command()
def sweep(
    trace: TraceArg,
    preset: Annotated[
        str | None,
        typer.Option(help="Engine preset: vllm, sglang, lmcache, mooncake or none "
                     "(default: mooncake for Mooncake traces, else vllm)."),
    ] = None,
    block_size: Annotated[
        int | None, typer.Option("--block-size", help="Tokens per block (overrides the preset).",
                                 min=1)
    ] = None,
    touch_order: Annotated[
        str | None,
        typer.Option("--touch-order", help="tail-first (block 1 most recent) or head-first "
                     "(flat LRU, as Mooncake's figure)."),
    ] = None,
    last_token_rule: Annotated[
        bool | None,
        typer.Option("--last-token-rule/--no-last-token-rule",
                     help="At least one prompt token is recomputed (overrides the preset)."),
    ] = None,
    cache_partial_blocks: Annotated[
        bool | None,
        typer.Option("--cache-partial-blocks/--no-cache-partial-blocks",
                     help="Count a trailing partial source block as cacheable."),
    ] = None,
    cache_outputs: Annotated[
        bool | None,
        typer.Option("--cache-outputs/--no-cache-outputs",
                     help="Also insert the full blocks of prompt + output token ids."),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(help="global (one cache) or instance (one cache of each capacity per "
                     "instance)."),
    ] = None,
    instances: Annotated[
        int | None,
        typer.Option(help="Instances for --scope instance when the trace has no instance "
                     "column (round-robin unless --route says otherwise).", min=1),
    ] = None,
    route: Annotated[
        str | None,
        typer.Option(help="round-robin, random or least-loaded (prefix-affinity cannot be "
                     "swept in one pass)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Model of the catalog (`trace models`): gives capacities in bytes."),
    ] = None,
    kv_bytes_per_token: KvBytesOpt = None,
    points: Annotated[
        int, typer.Option(help="Capacities shown, log-spaced (the knee and the 50/90/99 % "
                          "capacities are always added).", min=2)
    ] = 12,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Hit ratio at every LRU capacity in one pass, the knee and the 50/90/99 % capacities.

    Capacities are per cache (per instance with --scope instance), shown in blocks, tokens
    and, with --model or --kv-bytes-per-token, bytes.

    Examples:

      trace sweep conversation_trace.jsonl

      trace sweep chat.parquet --preset vllm --model llama-3.1-70b --points 20

      trace sweep chat.parquet --scope instance --instances 8 --format json -o curve.json
    """
    from yaotu_trace.catalog import find_model
    from yaotu_trace.replay import effective_rules
    from yaotu_trace.replay.sweep_trace import sweep_trace

    kv: int | None = kv_bytes_per_token
    model_name: str | None = None
    if model is not None:
        spec = find_model(model)
        model_name = spec.name
        if kv is not None and kv != spec.kv_bytes_per_token:
            raise ConfigError(
                f"--model {spec.name} has {spec.kv_bytes_per_token} KV bytes per token but "
                f"--kv-bytes-per-token says {kv}; pass only one of them"
            )
        kv = spec.kv_bytes_per_token
    with progress("sweep", quiet) as update:
        update("reading the trace", 0.0)
        loaded = load(trace, input_format, map, source_block_size, None, lazy_content=True)
    rules, preset_name, notes = effective_rules(
        loaded, preset,
        block_size_tokens=block_size,
        touch_order=touch_order,
        last_token_rule=last_token_rule,
        cache_partial_blocks=cache_partial_blocks,
        cache_outputs=cache_outputs,
        scope=scope,
        instances=instances,
        route=route,
    )
    with progress("sweep", quiet) as update:
        update("sweeping every capacity", 0.2)
        section, _ = sweep_trace(loaded, rules, preset=preset_name, points=points,
                                 model=model_name, kv_bytes_per_token=kv, notes=notes)
    report = Report(
        command="sweep",
        input=input_of(loaded),
        config={"preset": preset_name, "rules": section.rules, "model": model_name,
                "kv_bytes_per_token": kv, "points": points},
        sections={"capacity_curve": section},
    )
    emit(report, format, output)
