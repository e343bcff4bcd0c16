"""`trace analyze`: the workload profile of a trace (and every analysis registered with it)."""

from __future__ import annotations

from yaotu_trace.cli.app import command, emit, load
from yaotu_trace.cli.options import (
    FormatOpt,
    InputFormatOpt,
    MapOpt,
    OutputOpt,
    SourceBlockOpt,
    StepsOpt,
    TraceArg,
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
    quiet: QuietOpt = False,
) -> None:
    """Profile a trace: arrivals and burstiness, lengths, population, observed timing.

    Examples:

      trace analyze sample_traces/chat.parquet

      trace analyze conversation_trace.jsonl --format json -o profile.json

      trace analyze logs.csv --map arrival_s=ts --map prompt_len=input_tokens
    """
    from yaotu_trace.commands.analyze import analyze as analyze_trace

    with progress("analyze", quiet) as update:
        update("reading the trace", 0.0)
        loaded = load(trace, input_format, map, source_block_size, steps, lazy_content=True)
        update("profiling", 0.5)
        report = analyze_trace(loaded)
    emit(report, format, output)
