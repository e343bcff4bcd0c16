"""`trace replay`: exact prefix-cache replay of a trace under explicit engine rules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
    AccountingOpt,
    CacheOutputsOpt,
    CachePartialOpt,
    CapacityOpt,
    DaskOpt,
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
    MetricsOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    RouteOpt,
    RuleBlockSizeOpt,
    ScopeOpt,
    SourceBlockOpt,
    TenantIsolationOpt,
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
from yaotu_trace.prefix.rules import Eviction

EvictionOpt = Annotated[
    Eviction | None,
    typer.Option(help="Eviction policy of a full cache. optimal is Belady's (the block used "
                 "farthest in the future goes first): offline, the upper bound of every policy.",
                 case_sensitive=False),
]
SeedOpt = Annotated[int | None, typer.Option(help="Seed of the random route.")]
PerTenantOpt = Annotated[
    bool,
    typer.Option("--capacity-per-tenant", help="Each tenant gets its own cache of "
                 "--capacity (per instance with --scope instance); needs tenant isolation."),
]
GridOpt = Annotated[
    list[str] | None,
    typer.Option("--grid", metavar="AXIS=V1,V2,...", help="Replay every combination: "
                 "block-size=16,64,256, tenant-isolation=on,off, capacity=1Mtok,unlimited "
                 "(repeatable; one row each, one read of the trace per block size)."),
]
WaterfallOpt = Annotated[
    bool,
    typer.Option("--waterfall/--no-waterfall", help="Compute the loss waterfall (five more "
                 "replays and the token-granular ideal); off replays only the rules given."),
]
ResidencyOpt = Annotated[
    bool,
    typer.Option("--residency", help="Explain every capacity miss (the tier, time, idle age "
                 "and request of the eviction; --out columns), reuse distances in seconds and "
                 "distinct blocks, what a TTL keeps, vLLM's three residency histograms (held "
                 "against --metrics when it carries them), the most reused prefixes."),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Per-request hits and losses to .parquet or .csv."),
]


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
    capacity: CapacityOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    eviction: EvictionOpt = None,
    scope: ScopeOpt = None,
    route: RouteOpt = None,
    instances: InstancesOpt = None,
    seed: SeedOpt = None,
    capacity_per_tenant: PerTenantOpt = False,
    accounting: AccountingOpt = None,
    grid: GridOpt = None,
    waterfall: WaterfallOpt = True,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    out: OutOpt = None,
    warmup: WarmupOpt = None,
    residency: ResidencyOpt = False,
    metrics: MetricsOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    link: LinkOpt = None,
    gpu_price: GpuPriceOpt = None,
    memory_price: MemoryPriceOpt = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Replay the prefix cache: token-weighted hit ratio, saved prefill and the loss waterfall.

    Examples:

      trace replay conversation_trace.jsonl

      trace replay chat.parquet --preset vllm --capacity 3.2Mtok --out hits.parquet

      trace replay chat.parquet --preset sglang --capacity 200000 --accounting clean

      trace replay chat.parquet --scope instance --route prefix-affinity --instances 8

      trace replay big.parquet --scope instance --capacity 2Mtok --jobs 2

      trace replay big.parquet --capacity 1Mtok --capacity-per-tenant --dask local

      trace replay conversation_trace.jsonl --touch-order tail-first --capacity 1GiB
      --model deepseek-v3 --warmup 50%

      trace replay chat.parquet --preset vllm --capacity 20000 --residency --out misses.csv

      trace replay chat.parquet --model llama-3.1-8b --gpu H100 --gpu-price 2.5

      trace replay chat.parquet --capacity 20000 --tier cpu=64GiB --model Llama-3.1-8B
      --out hits.parquet

      trace replay chat.parquet --grid block-size=16,64,256 --grid tenant-isolation=on,off
      --grid capacity=1Mtok,10Mtok,unlimited --jobs 2
    """
    from yaotu_trace.commands import replay as replay_command
    from yaotu_trace.commands.shared.pricing import PricingOptions
    from yaotu_trace.prefix.options import ReplayOptions
    from yaotu_trace.prefix.partition import Parallelism

    options = ReplayOptions(
        preset=preset, block_size_tokens=block_size, last_token_rule=last_token_rule,
        tenant_isolation=tenant_isolation, touch_order=touch_order,
        cache_partial_blocks=cache_partial_blocks, cache_outputs=cache_outputs,
        eviction=eviction, scope=scope, route=route, instances=instances, seed=seed,
        capacity_per_tenant=capacity_per_tenant, accounting=accounting, capacity=capacity,
        model=model, kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, warmup=warmup,
        residency=residency, tiers=tuple(tiers or ()), tier_chunk_tokens=tier_chunk_tokens,
        tier_policy=tier_policy, tier_store_threshold=tier_store_threshold)
    with progress("replay", quiet) as update:
        report = replay_command.replay(
            trace_input(trace, input_format, map, source_block_size, tokenizer=tokenizer),
            options, grid=grid or (),
            waterfall=waterfall, parallel=Parallelism(jobs=jobs, dask=dask), out=out,
            progress=update, metrics=metrics,
            pricing=PricingOptions(gpu=gpu, tp=tp or 1, links=tuple(link or ()),
                                   gpu_price=gpu_price, memory_price=memory_price))
    emit(report, format, output)
