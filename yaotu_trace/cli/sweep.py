"""`trace sweep`: the LRU hit-ratio curve for every capacity at once."""

from __future__ import annotations

from typing import Annotated

import typer

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
    AccountingOpt,
    CacheOutputsOpt,
    CachePartialOpt,
    FormatOpt,
    GpuOpt,
    GpuPriceOpt,
    InputFormatOpt,
    InstancesOpt,
    JobsOpt,
    KvBytesOpt,
    KvDtypeOpt,
    LastTokenRuleOpt,
    LinkOpt,
    MapOpt,
    MemoryPriceOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    RouteOpt,
    RuleBlockSizeOpt,
    ScopeOpt,
    SourceBlockOpt,
    TierChunkOpt,
    TierOpt,
    TierPolicyOpt,
    TierStoreThresholdOpt,
    TokenizerOpt,
    TouchOrderOpt,
    TpOpt,
    TraceArg,
    WarmupOpt,
)
from yaotu_trace.cli.progress import QuietOpt, progress


@command()
def sweep(
    trace: TraceArg,
    preset: PresetOpt = None,
    block_size: RuleBlockSizeOpt = None,
    touch_order: TouchOrderOpt = None,
    last_token_rule: LastTokenRuleOpt = None,
    cache_partial_blocks: CachePartialOpt = None,
    cache_outputs: CacheOutputsOpt = None,
    scope: ScopeOpt = None,
    instances: InstancesOpt = None,
    route: RouteOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    points: Annotated[
        int, typer.Option(help="Capacities shown, log-spaced (the knee and the 50/90/99 % "
                          "capacities are always added).", min=2)
    ] = 12,
    warmup: WarmupOpt = None,
    accounting: AccountingOpt = None,
    capacities: Annotated[
        str | None, typer.Option("--capacities", metavar="C1,C2,...", help="Also a table of "
                                 "these capacities per cache, in this order: blocks (20000), "
                                 "tokens (3.2Mtok) or bytes (40GiB, needs --model or "
                                 "--kv-bytes-per-token), each with the curve's hit ratio and a "
                                 "real replay's under the preset's accounting.")
    ] = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    link: LinkOpt = None,
    gpu_price: GpuPriceOpt = None,
    memory_price: MemoryPriceOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    jobs: JobsOpt = 1,
    quiet: QuietOpt = False,
) -> None:
    """Hit ratio at every LRU capacity in one pass, the knee and the 50/90/99 % capacities.

    Capacities are per cache (per instance with --scope instance), shown in blocks, tokens
    and, with --model or --kv-bytes-per-token, bytes.

    Examples:

      trace sweep conversation_trace.jsonl

      trace sweep chat.parquet --preset vllm --model llama-3.1-70b --points 20

      trace sweep chat.parquet --scope instance --instances 8 --format json -o curve.json

      trace sweep conversation_trace.jsonl --touch-order tail-first --warmup 50%

      trace sweep conversation_trace.jsonl --model deepseek-v3 --capacities 1GiB,8GiB,64GiB

      trace sweep chat.parquet --model llama-3.1-8b --capacities 2GiB,8GiB --tier cpu=64GiB

      trace sweep conversation_trace.jsonl --capacities 2000,8000 --tier cpu=40000blocks -j 2

      trace sweep chat.parquet --model llama-3.1-8b --gpu H100 --gpu-price 2.5
      --memory-price 3 --capacities 2GiB,8GiB --tier cpu=64GiB
    """
    from yaotu_trace.commands import sweep as sweep_command
    from yaotu_trace.commands.shared.pricing import PricingOptions
    from yaotu_trace.prefix.options import ReplayOptions

    options = ReplayOptions(
        preset=preset, block_size_tokens=block_size, touch_order=touch_order,
        last_token_rule=last_token_rule, cache_partial_blocks=cache_partial_blocks,
        cache_outputs=cache_outputs, scope=scope, instances=instances, route=route,
        accounting=accounting, model=model, kv_bytes_per_token=kv_bytes_per_token,
        kv_dtype=kv_dtype, warmup=warmup, tiers=tuple(tiers or ()),
        tier_chunk_tokens=tier_chunk_tokens, tier_policy=tier_policy,
        tier_store_threshold=tier_store_threshold)
    with progress("sweep", quiet) as update:
        report = sweep_command.sweep(
            trace_input(trace, input_format, map, source_block_size, tokenizer=tokenizer),
            options, points=points,
            capacities=capacities.split(",") if capacities is not None else (),
            progress=update, threads=jobs,
            pricing=PricingOptions(gpu=gpu, tp=tp or 1, links=tuple(link or ()),
                                   gpu_price=gpu_price, memory_price=memory_price))
    emit(report, format, output)
