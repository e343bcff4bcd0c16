"""`trace simulate`: replay a trace through a modelled serving engine; write timing + step log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
    FormatOpt,
    GpuOpt,
    InputFormatOpt,
    KvDtypeOpt,
    LinkGbpsOpt,
    MapOpt,
    MetricsOutOpt,
    ModelOpt,
    OutputOpt,
    ScenarioOpt,
    SourceBlockOpt,
    TpOpt,
    TraceArg,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.sim.config import EngineVersion, RoutePolicy, SchedulerKind

if TYPE_CHECKING:
    from yaotu_trace.sim.scenario import Scenario

KvBlocksOpt = Annotated[int | None, typer.Option(
    "--kv-blocks", help="KV blocks per instance (vLLM num_gpu_blocks); default from GPU memory, "
    "model weights and --gpu-memory-utilization.", min=2)]
BlockSizeOpt = Annotated[int | None, typer.Option(
    "--block-size", help="Tokens per KV block [16].", min=1)]
MaxSeqsOpt = Annotated[int | None, typer.Option(
    "--max-num-seqs", help="Requests running at once per instance [by GPU memory].", min=1)]
MaxTokensOpt = Annotated[int | None, typer.Option(
    "--max-batched-tokens", help="Token budget per step [by GPU memory].", min=1)]
ChunkedOpt = Annotated[bool | None, typer.Option(
    "--chunked-prefill/--no-chunked-prefill", help="Split long prefills across steps [on].",
    show_default=False)]
LongPrefillOpt = Annotated[int | None, typer.Option(
    "--long-prefill-token-threshold", help="Cap on one request's tokens per step (0: none).",
    min=0)]
PrefixOpt = Annotated[bool | None, typer.Option(
    "--prefix-caching/--no-prefix-caching", help="Automatic prefix caching [on].",
    show_default=False)]
InstancesOpt = Annotated[int | None, typer.Option(
    "--instances", help="Colocated instances [1].", min=1)]
RouteOpt = Annotated[RoutePolicy | None, typer.Option(
    "--route", help="Routing over instances: prefix-affinity is sgl-router's cache_aware, "
    "kv-aware is Dynamo's cost, trace keeps the trace's instance column, weighted sends fixed "
    "shares (--route-weights), random draws each request's instance uniformly (fixed seed) "
    "[round-robin].", case_sensitive=False)]
RouteWeightsOpt = Annotated[str | None, typer.Option(
    "--route-weights", help="Shares of the requests per instance for --route weighted, e.g. "
    "0.85,0.15 (one per instance; normalised).", metavar="W1,W2,...")]
PdOpt = Annotated[str | None, typer.Option(
    "--pd", help="Disaggregate: P prefill and D decode instances, e.g. 1:3.", metavar="P:D")]
LinkLatencyOpt = Annotated[float | None, typer.Option(
    "--link-latency-ms", help="Fixed KV transfer latency α, ms [0.57].")]
OverlapOpt = Annotated[bool | None, typer.Option(
    "--layerwise-overlap/--no-layerwise-overlap",
    help="Stream KV layer by layer during prefill [on].", show_default=False)]
SchedulerOpt = Annotated[SchedulerKind | None, typer.Option(
    "--scheduler", help="Engine scheduling rules [vllm].", case_sensitive=False)]
EngineOpt = Annotated[EngineVersion | None, typer.Option(
    "--engine", help="Engine release to follow: its scheduler and the defaults it ships with "
    "(vllm-0.33: async scheduling on) [vllm-0.33, or sglang-0.5 with --scheduler sglang].",
    case_sensitive=False)]
AsyncOpt = Annotated[bool | None, typer.Option(
    "--async-scheduling/--no-async-scheduling", help="vLLM's async scheduling: the next batch "
    "is decided while the GPU runs the current one [on for vllm-0.33].", show_default=False)]
MaxModelLenOpt = Annotated[int | None, typer.Option(
    "--max-model-len", help="The model's context limit; vLLM's step budget without chunked "
    "prefill [131072].", min=1)]
UtilOpt = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization", help="Share of GPU memory the engine takes [0.92].")]
MfuOpt = Annotated[float | None, typer.Option("--mfu", help="Model FLOP utilisation [0.5].")]
MbuOpt = Annotated[float | None, typer.Option("--mbu", help="Memory bandwidth utilisation [0.7].")]
OverheadOpt = Annotated[float | None, typer.Option(
    "--overhead-ms", help="Fixed host overhead per step, ms [2].")]
HostGapOpt = Annotated[float | None, typer.Option(
    "--host-gap-ms", help="Host time per step that does not overlap the GPU (the GPU idles "
    "between steps), ms [0].")]
CalibrateOpt = Annotated[Path | None, typer.Option(
    "--calibrate", help="Fit a + b·prefill_tokens + c·Σcontext on this real step log and use it "
    "as the step time.", metavar="STEPS")]

FailShareOpt = Annotated[float | None, typer.Option(
    "--fail-share", help="Inject failures: this share of the requests fails mid-stream "
    "(status error after a uniform number of their output tokens), spread over the run, or "
    "of --fail-instance's requests only [0].", min=0.0, max=0.999999)]
FailInstanceOpt = Annotated[str | None, typer.Option(
    "--fail-instance", help="Tie the injected failures to one instance, e.g. i1 or d0.")]
FailSeedOpt = Annotated[int | None, typer.Option(
    "--fail-seed", help="Seed of the failure draw [0].", min=0)]


def scenario_from_options(**options: object) -> Scenario:
    """The scenario the command-line options give (None: not given)."""
    from yaotu_trace.sim.scenario import Scenario

    values = {k: v for k, v in options.items() if v is not None}
    for key in ("route", "scheduler", "engine"):
        if key in values:
            values[key] = str(values[key])
    if "calibrate" in values:
        values["calibrate"] = str(values["calibrate"])
    return Scenario(**values)  # type: ignore[arg-type]


@command()
def simulate(
    trace: TraceArg,
    out: Annotated[Path, typer.Option(
        "--out", help="Canonical table with simulated timing (.parquet, .jsonl or .csv).")],
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    gpu: GpuOpt = None,
    scenario: ScenarioOpt = None,
    steps_out: Annotated[Path | None, typer.Option(
        "--steps-out", help="Step log (.parquet, .jsonl or .csv).")] = None,
    metrics_out: MetricsOutOpt = None,
    scrape_interval_s: Annotated[float | None, typer.Option(
        "--scrape-interval-s", help="Seconds between scrapes of --metrics-out [1].")] = None,
    kv_blocks: KvBlocksOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    max_batched_tokens: MaxTokensOpt = None,
    chunked_prefill: ChunkedOpt = None,
    long_prefill_token_threshold: LongPrefillOpt = None,
    prefix_caching: PrefixOpt = None,
    instances: InstancesOpt = None,
    route: RouteOpt = None,
    route_weights: RouteWeightsOpt = None,
    pd: PdOpt = None,
    link_gbps: LinkGbpsOpt = None,
    link_latency_ms: LinkLatencyOpt = None,
    layerwise_overlap: OverlapOpt = None,
    scheduler: SchedulerOpt = None,
    engine: EngineOpt = None,
    async_scheduling: AsyncOpt = None,
    max_model_len: MaxModelLenOpt = None,
    gpu_memory_utilization: UtilOpt = None,
    tp: TpOpt = None,
    mfu: MfuOpt = None,
    mbu: MbuOpt = None,
    overhead_ms: OverheadOpt = None,
    host_gap_ms: HostGapOpt = None,
    calibrate: CalibrateOpt = None,
    fail_share: FailShareOpt = None,
    fail_instance: FailInstanceOpt = None,
    fail_seed: FailSeedOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Simulate a serving engine on the trace: per-request timing and a step log, so that
    traces without engine timing (Mooncake, Azure, BurstGPT) can be diagnosed.

    Examples:

      trace simulate conversation_trace.jsonl --model Llama-3.1-8B --gpu H100 --out sim.parquet
      --steps-out steps.parquet

      trace simulate azure_conv.csv --scenario pd.toml --out sim.parquet

      trace simulate chat.parquet --model Qwen2.5-7B --gpu A100 --kv-blocks 4000
      --no-chunked-prefill --out sim.parquet
    """
    from yaotu_trace.commands import simulate as simulate_command
    from yaotu_trace.sim.options import EngineOptions

    given = scenario_from_options(
        model=model, kv_dtype=kv_dtype, gpu=gpu, kv_blocks=kv_blocks, block_size=block_size,
        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
        chunked_prefill=chunked_prefill, long_prefill_token_threshold=long_prefill_token_threshold,
        prefix_caching=prefix_caching, instances=instances, route=route,
        route_weights=route_weights, pd=pd,
        link_gbps=link_gbps, link_latency_ms=link_latency_ms, layerwise_overlap=layerwise_overlap,
        scheduler=scheduler, engine=engine, async_scheduling=async_scheduling,
        max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, tp=tp, mfu=mfu,
        mbu=mbu, overhead_ms=overhead_ms, host_gap_ms=host_gap_ms, calibrate=calibrate,
        fail_share=fail_share, fail_instance=fail_instance, fail_seed=fail_seed,
    )
    with progress("simulate", quiet) as update:
        report = simulate_command.simulate(
            trace_input(trace, input_format, map, source_block_size),
            EngineOptions(scenario=given, file=scenario), out=out, steps_out=steps_out,
            metrics_out=metrics_out, scrape_interval_s=scrape_interval_s, progress=update)
    emit(report, format, output)
