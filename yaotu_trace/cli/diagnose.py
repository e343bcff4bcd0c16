"""`trace diagnose`: a verdict on the four axes, the principal bottleneck and a remedy ledger."""

from __future__ import annotations

from typing import Annotated

import typer

from yaotu_trace.cli.app import (
    BlockSizeOpt,
    DaskOpt,
    FormatOpt,
    InputFormatOpt,
    JobsOpt,
    KvCapacityOpt,
    MapOpt,
    MetricsOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsOpt,
    ThresholdOpt,
    TraceArg,
    app,
    emit,
    load,
)
from yaotu_trace.errors import ConfigError
from yaotu_trace.render import OutputFormat

# Model FLOP utilisation assumed when the ledger turns FLOPs into GPU-seconds (cost-model §2.4).
LEDGER_MFU = 0.5

KvBytesOpt = Annotated[
    int | None,
    typer.Option("--kv-bytes-per-token", min=1, help="KV bytes per token (overrides --model's)."),
]
MaxSeqsOpt = Annotated[
    int | None,
    typer.Option("--max-num-seqs", min=1, help="Engine cap on running requests (else the "
                 "largest batch seen)."),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option("--max-batched-tokens", min=1, help="Engine token budget per step (else the "
                 "largest step seen)."),
]
GpuOpt = Annotated[
    str | None,
    typer.Option("--gpu", help="GPU from the catalog (e.g. H100, A100-80GB): with --model, the "
                 "ledger prices recomputed prefill in GPU-seconds (bf16 peak × MFU 0.5)."),
]
LinkOpt = Annotated[
    float,
    typer.Option("--link-gbps", min=0.001, help="Network link per instance for KV transfer in "
                 "the disaggregation ledger (Gb/s)."),
]


@app.command()
def diagnose(
    trace: TraceArg,
    steps: StepsOpt = None,
    metrics: MetricsOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_capacity: KvCapacityOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    max_batched_tokens: MaxTokensOpt = None,
    gpu: GpuOpt = None,
    link_gbps: LinkOpt = 100.0,
    preset: PresetOpt = None,
    threshold: ThresholdOpt = None,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    format: FormatOpt = OutputFormat.TABLE,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
) -> None:
    """Find the bottleneck: queueing, KV memory, prefix reuse or prefill/decode interference.

    Each axis reports ok, warning, bottleneck or insufficient_data (naming the missing
    columns) with its evidence and rule ids; the verdict names the principal bottleneck and
    the ledger prices each candidate remedy in tokens, seconds and bytes.

    Examples:

      trace diagnose requests.parquet --steps steps.csv --metrics prom.json --model Llama-3.1-8B

      trace diagnose conversation_trace.jsonl --format json -o diagnosis.json

      trace diagnose logs.jsonl --threshold stall_factor=4 --threshold window_s=10

      trace diagnose sim.parquet --steps steps.parquet --model Llama-3.1-8B --gpu H100
      --link-gbps 400
    """
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.diagnosis.diagnose import diagnose as run
    from yaotu_trace.diagnosis.thresholds import parse_threshold_options
    from yaotu_trace.ingest.metrics import read_metrics

    thresholds = parse_threshold_options(threshold or [])
    if preset is not None:
        from yaotu_trace.replay.rules import rules_for

        rules_for(preset)  # an unknown preset is a one-line ConfigError before any work
    spec = None
    if model is not None:
        from yaotu_trace.catalog import find_model

        spec = find_model(model)
    gpu_spec = None
    if gpu is not None:
        from yaotu_trace.hardware import find_gpu

        gpu_spec = find_gpu(gpu)
    kv_b = kv_bytes_per_token or (spec.kv_bytes_per_token if spec is not None else None)
    block = block_size or 16
    capacity_tokens = None
    if kv_capacity is not None:
        from yaotu_trace.units import parse_capacity

        cap = parse_capacity(kv_capacity)
        if cap.unlimited:
            capacity_tokens = None
        elif cap.unit == "blocks":
            capacity_tokens = float(int(cap.amount) * block)
        else:
            tokens = cap.to_tokens(kv_b)
            capacity_tokens = None if tokens is None else float(tokens)
        if capacity_tokens is not None and capacity_tokens < block:
            raise ConfigError(f"--kv-capacity {kv_capacity!r} holds less than one {block}-token "
                              "block; give a larger capacity")
    settings = EngineSettings(
        block_size_tokens=block,
        block_size_given=block_size is not None,
        kv_capacity_tokens=capacity_tokens,
        max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens,
        kv_bytes_per_token=kv_b,
        active_params=None if spec is None else spec.active_nonembedding_params,
        model=None if spec is None else spec.name,
        link_gbps=link_gbps,
        replay_preset=preset,
        gpu=None if gpu_spec is None else gpu_spec.name,
        gpu_flops_per_s=None if gpu_spec is None else gpu_spec.bf16_flops * LEDGER_MFU,
        replay_jobs=jobs,
        replay_dask=dask,
    )
    engine_metrics = read_metrics(metrics) if metrics is not None else None
    loaded = load(trace, input_format, map, source_block_size, steps, lazy_content=True)
    emit(run(loaded, metrics=engine_metrics, settings=settings, thresholds=thresholds),
         format, output)
