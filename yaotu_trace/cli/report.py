"""`trace report`: one self-contained HTML file with the pictures, the verdict and the ledger."""

from __future__ import annotations

from typing import Annotated

import typer

from yaotu_trace.cli.app import before_input, command, emit, trace_input
from yaotu_trace.cli.options import (
    BeforeOpt,
    BlockSizeOpt,
    DaskOpt,
    GpuOpt,
    InputFormatOpt,
    JobsOpt,
    KvBytesOpt,
    KvCapacityOpt,
    KvDtypeOpt,
    LinkGbpsOpt,
    LogTzOpt,
    MapOpt,
    MatchedOnlyOpt,
    MaxBatchedTokensOpt,
    MaxNumSeqsOpt,
    MetricsBeforeOpt,
    MetricsOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    ScenarioOpt,
    SourceBlockOpt,
    StepsBeforeOpt,
    StepsOpt,
    ThresholdOpt,
    TierChunkOpt,
    TierOpt,
    TierPolicyOpt,
    TierStoreThresholdOpt,
    TokenizerOpt,
    TpOpt,
    TraceArg,
    tier_options_of,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.cli.simulate import InstancesOpt, KvBlocksOpt, scenario_from_options
from yaotu_trace.errors import ConfigError
from yaotu_trace.render import OutputFormat

ReportFormatOpt = Annotated[
    OutputFormat | None,
    typer.Option("--format", "-f", help="Report format [default: from the extension of -o, "
                 "else html; json gives the same numbers].", case_sensitive=False,
                 show_default=False),
]


@command()
def report(
    trace: TraceArg,
    output: OutputOpt = None,
    format: ReportFormatOpt = None,
    steps: StepsOpt = None,
    metrics: MetricsOpt = None,
    before: BeforeOpt = None,
    steps_before: StepsBeforeOpt = None,
    metrics_before: MetricsBeforeOpt = None,
    matched_only: MatchedOnlyOpt = False,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    log_tz: LogTzOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    kv_capacity: KvCapacityOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    link_gbps: LinkGbpsOpt = None,
    preset: PresetOpt = None,
    threshold: ThresholdOpt = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    simulate: Annotated[bool, typer.Option(
        "--simulate", help="Model the engine's timing first (trace simulate, in memory) for a "
        "trace of arrivals and lengths only; needs --model and --gpu or --scenario. Every "
        "timing panel is marked modelled.")] = False,
    scenario: ScenarioOpt = None,
    kv_blocks: KvBlocksOpt = None,
    instances: InstancesOpt = None,
    quiet: QuietOpt = False,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Write one HTML file that works offline: plots, verdict, per-tenant table and ledger.

    Pictures: the hit-ratio curve over prefix-cache capacity with the configured KV capacity
    marked, the loss waterfall, the hit-length histogram, queue-time and time-to-first-token
    distributions, KV usage (step log) or demand over time, and inter-token gaps with prefill
    overlaid. A picture the trace cannot support says which columns it needs.

    With --before, the page is of a change: whether the comparison is fair, what changed on
    each axis and the work saved and added on top, then the two runs' pictures side by side.

    The diagnosis options (--model, --gpu, --kv-capacity, --max-num-seqs, ...) mean what they
    mean to trace diagnose. With --simulate, --model, --gpu, --kv-dtype, --block-size,
    --max-num-seqs, --max-batched-tokens and --link-gbps also state the modelled engine.

    With --tier (and --kv-capacity for the GPU pool), the page adds what trace diagnose --tier
    shows, which source served what, and with one tier the hit ratio over GPU size (a quarter,
    half, once and twice the pool) × tier size (the --tier size and its halvings, or its
    doublings when it is no larger than the pool, where it serves little).

    Examples:

      trace report prod.jsonl -o report.html

      trace report sim.parquet --steps steps.parquet --kv-capacity 20000 -o report.html

      trace report after.parquet --before before.parquet -o diff.html

      trace report conversation_trace.jsonl --kv-capacity 1382400tok --tier cpu=26000 -o r.html

      trace report conversation_trace.jsonl --simulate --model Llama-3.1-8B --gpu H100 -o r.html
    """
    from yaotu_trace.commands import report as report_command
    from yaotu_trace.sim.options import EngineOptions

    earlier = before_input(before, steps_before, metrics_before, matched_only, input_format,
                           map, source_block_size)
    engine = {"kv_blocks": kv_blocks, "instances": instances}
    if not simulate and any(v is not None for v in engine.values()):
        given = next(k for k, v in engine.items() if v is not None).replace("_", "-")
        raise ConfigError(f"--{given} is an option of the modelled engine: give --simulate too")
    if not simulate and scenario is not None:
        raise ConfigError("--scenario and the engine options model a run: give --simulate too")
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    options = DiagnosisOptions(
        metrics=metrics, log_tz=log_tz, model=model, gpu=gpu, tp=tp,
        kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, kv_capacity=kv_capacity,
        block_size_tokens=block_size, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, link_gbps=link_gbps, preset=preset,
        thresholds=tuple(threshold or ()), jobs=jobs, dask=dask)
    tier_options = tier_options_of(tiers, tier_chunk_tokens, tier_policy,
                                   tier_store_threshold)
    modelled = (EngineOptions(scenario=scenario_from_options(**engine), file=scenario)
                if simulate else None)
    with progress("report", quiet) as update:
        result = report_command.report(
            trace_input(trace, input_format, map, source_block_size, steps, tokenizer=tokenizer),
            options,
            before=earlier, simulate=modelled, progress=update, tiers=tier_options)
    emit(result, format, output, default=OutputFormat.HTML)
