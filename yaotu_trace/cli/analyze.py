"""`trace analyze`: the workload profile of a trace (and every analysis registered with it)."""

from __future__ import annotations

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
    FormatOpt,
    InputFormatOpt,
    MapOpt,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsOpt,
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
    steps: StepsOpt = None,
    warmup: WarmupOpt = None,
    preset: PresetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Profile a trace: arrivals and burstiness, lengths, population, observed timing.

    Examples:

      trace analyze sample_traces/chat.parquet

      trace analyze conversation_trace.jsonl --format json -o profile.json

      trace analyze chat.parquet --preset sglang

      trace analyze logs.csv --map arrival_s=ts --map prompt_len=input_tokens

      trace analyze conversation_trace.jsonl --warmup 50%
    """
    from yaotu_trace.commands.analyze import analyze as run
    from yaotu_trace.commands.analyze import bench_summary_report
    from yaotu_trace.commands.load import open_trace
    from yaotu_trace.prefix.window import parse_warmup

    if warmup is not None:
        parse_warmup(warmup)  # a bad window fails before the trace is read

    with progress("analyze", quiet) as update:
        source = trace_input(trace, input_format, map, source_block_size, steps)
        report = bench_summary_report(source)  # a benchmark result with run-level numbers only
        if report is None:
            loaded = open_trace(source, lazy_content=True, progress=update,
                                arrivals_optional=True)
            update("profiling", 0.5)
            report = run(loaded, preset=preset, warmup=warmup)
    emit(report, format, output)
