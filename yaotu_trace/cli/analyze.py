"""`trace analyze`: the workload profile of a trace (and every analysis registered with it)."""

from __future__ import annotations

from yaotu_trace.cli.app import ChartsOpt, charts_wanted, command, emit, trace_input
from yaotu_trace.cli.options import (
    CapacityOpt,
    FormatOpt,
    GpuOpt,
    GpuPriceOpt,
    InputFormatOpt,
    KvBytesOpt,
    KvDtypeOpt,
    LinkOpt,
    MapOpt,
    MemoryPriceOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsOpt,
    TierChunkOpt,
    TierOpt,
    TierPolicyOpt,
    TierStoreThresholdOpt,
    TokenizerOpt,
    TpOpt,
    TraceArg,
    WarmupOpt,
)
from yaotu_trace.cli.progress import QuietOpt, progress


@command()
def analyze(
    trace: TraceArg,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    steps: StepsOpt = None,
    warmup: WarmupOpt = None,
    preset: PresetOpt = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    capacity: CapacityOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    link: LinkOpt = None,
    gpu_price: GpuPriceOpt = None,
    memory_price: MemoryPriceOpt = None,
    quiet: QuietOpt = False,
    charts: ChartsOpt = None,
) -> None:
    """Profile a trace: arrivals and burstiness, lengths, population, observed timing.

    Examples:

      trace analyze sample_traces/chat.parquet

      trace analyze conversation_trace.jsonl --format json -o profile.json

      trace analyze chat.parquet --preset sglang

      trace analyze logs.csv --map arrival_s=ts --map prompt_len=input_tokens

      trace analyze conversation_trace.jsonl --warmup 50%

      trace analyze chat.parquet --no-charts

      trace analyze chat.parquet --model Llama-3.1-8B

      trace analyze chat.parquet --capacity 20000 --tier cpu=64GiB --model Llama-3.1-8B

      trace analyze chat.parquet --capacity 20000 --tier cpu=64GiB --model Llama-3.1-8B
      --gpu H100 --gpu-price 2.5 --memory-price 3

    With --tier (and --capacity for the GPU pool): which source served what, and with one tier
    the hit ratio over GPU size (a quarter, half, once and twice the pool) × tier size (the
    --tier size and its halvings, or its doublings when it is no larger than the pool, where
    it serves little), each cell one tiered replay.

    With --model (at --kv-dtype) or --kv-bytes-per-token, the prefix-reuse capacities are
    given in bytes too.

    In a terminal the table output opens with text charts: arrivals over time (the busiest
    minute underlined), the prompt and output length histograms (p50 and p99 marked) and, for a
    trace with prompt content, the hit ratio at the capacities of the prefix-reuse section.
    --charts draws them into a file or pipe too, --no-charts leaves them out; --quiet only
    hides the progress bar.
    """
    from yaotu_trace.commands import analyze as analyze_command

    pictures = charts_wanted(charts, format, output)
    tier_options = None
    given = (tier_chunk_tokens, tier_policy, tier_store_threshold, capacity, model,
             kv_bytes_per_token, kv_dtype)
    if tiers or any(value is not None for value in given):
        from yaotu_trace.prefix.options import ReplayOptions

        tier_options = ReplayOptions(preset=preset, capacity=capacity, model=model,
                                     kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype,
                                     tiers=tuple(tiers or ()),
                                     tier_chunk_tokens=tier_chunk_tokens, tier_policy=tier_policy,
                                     tier_store_threshold=tier_store_threshold)
    pricing = None
    if link or any(value is not None for value in (gpu, tp, gpu_price, memory_price)):
        from yaotu_trace.commands.shared.pricing import PricingOptions

        pricing = PricingOptions(gpu=gpu, tp=tp or 1, links=tuple(link or ()),
                                 gpu_price=gpu_price, memory_price=memory_price)
    with progress("analyze", quiet) as update:
        report = analyze_command.analyze(
            trace_input(trace, input_format, map, source_block_size, steps, tokenizer=tokenizer),
            preset=preset, warmup=warmup, progress=update, charts=pictures, tiers=tier_options,
            pricing=pricing)
    emit(report, format, output)
