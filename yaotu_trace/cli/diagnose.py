"""`trace diagnose`: a verdict on the four axes, the principal bottleneck and a remedy ledger."""

from __future__ import annotations

from yaotu_trace.cli.app import ChartsOpt, charts_wanted, command, emit, trace_input
from yaotu_trace.cli.options import (
    BlockSizeOpt,
    DaskOpt,
    FormatOpt,
    GpuOpt,
    InputFormatOpt,
    JobsOpt,
    KvBytesOpt,
    KvCapacityOpt,
    KvDtypeOpt,
    LinkGbpsOpt,
    LogTzOpt,
    MapOpt,
    MaxBatchedTokensOpt,
    MaxNumSeqsOpt,
    MetricsOpt,
    ModelOpt,
    OptionalTraceArg,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsOpt,
    ThresholdOpt,
    TierChunkOpt,
    TierOpt,
    TierPolicyOpt,
    TierStoreThresholdOpt,
    TokenizerOpt,
    TpOpt,
    tier_options_of,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.errors import ConfigError


@command()
def diagnose(
    trace: OptionalTraceArg = None,
    steps: StepsOpt = None,
    metrics: MetricsOpt = None,
    log_tz: LogTzOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    kv_capacity: KvCapacityOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    link_gbps: LinkGbpsOpt = None,
    preset: PresetOpt = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    threshold: ThresholdOpt = None,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    quiet: QuietOpt = False,
    charts: ChartsOpt = None,
) -> None:
    """Find the bottleneck: queueing, KV memory, prefix reuse or prefill/decode interference.

    Each axis reports ok, warning, bottleneck or insufficient_data (naming the missing
    columns) with its evidence and rule ids; the verdict names the principal bottleneck and
    the ledger prices each candidate remedy in tokens, seconds and bytes. Without a TRACE,
    the engine's telemetry alone is judged (a server log, a Prometheus export or scrape, a
    step log): the axes it can decide, the rest insufficient_data with what would decide them.

    Examples:

      trace diagnose --metrics server.log

      trace diagnose --metrics server.log --log-tz Asia/Shanghai --format json

      trace diagnose requests.parquet --steps steps.csv --metrics prom.json --model Llama-3.1-8B

      trace diagnose conversation_trace.jsonl --format json -o diagnosis.json

      trace diagnose logs.jsonl --threshold stall_factor=4 --threshold window_s=10

      trace diagnose sim.parquet --steps steps.parquet --model Llama-3.1-8B --gpu H100
      --link-gbps 400

      trace diagnose requests.parquet --steps steps.csv --no-charts

      trace diagnose chat.parquet --model Llama-3.1-8B --kv-capacity 40GiB --tier cpu=256GiB

    In a terminal the table output shows text charts after the input: KV usage over time
    (step log; else the KV demand of running requests from their timing) and arrivals over
    time. --charts draws them into a file or pipe too, --no-charts leaves them out; --quiet
    only hides the progress bar.
    """
    from yaotu_trace.commands import diagnose as diagnose_command

    if trace is None and (input_format is not None or map or source_block_size is not None):
        raise ConfigError("--input-format, --map and --source-block-size say how to read a "
                          "TRACE; give the trace, or drop them to judge --metrics alone")
    source = None if trace is None else trace_input(trace, input_format, map,
                                                    source_block_size, steps, tokenizer=tokenizer)
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    options = DiagnosisOptions(
        metrics=metrics, log_tz=log_tz, model=model, gpu=gpu, tp=tp,
        kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, kv_capacity=kv_capacity,
        block_size_tokens=block_size, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, link_gbps=link_gbps, preset=preset,
        thresholds=tuple(threshold or ()), jobs=jobs, dask=dask)
    pictures = charts_wanted(charts, format, output)
    tier_options = tier_options_of(tiers, tier_chunk_tokens, tier_policy,
                                   tier_store_threshold)
    with progress("diagnose", quiet) as update:
        report = diagnose_command.diagnose(source, options,
                                           steps=steps if trace is None else None,
                                           progress=update, charts=pictures,
            tiers=tier_options)
    emit(report, format, output)
