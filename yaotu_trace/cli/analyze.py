"""`trace analyze`: the workload profile of a trace (and every analysis registered with it)."""

from __future__ import annotations

from yaotu_trace.cli.app import (
    FormatOpt,
    InputFormatOpt,
    MapOpt,
    OutputOpt,
    SourceBlockOpt,
    StepsOpt,
    TraceArg,
    app,
    emit,
    load,
)
from yaotu_trace.pipeline import analyze as analyze_trace
from yaotu_trace.render import OutputFormat


@app.command()
def analyze(
    trace: TraceArg,
    format: FormatOpt = OutputFormat.TABLE,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    steps: StepsOpt = None,
) -> None:
    """Profile a trace: arrivals and burstiness, lengths, population, observed timing.

    Examples:

      trace analyze sample_traces/chat.parquet

      trace analyze conversation_trace.jsonl --format json -o profile.json

      trace analyze logs.csv --map arrival_s=ts --map prompt_len=input_tokens
    """
    loaded = load(trace, input_format, map, source_block_size, steps, lazy_content=True)
    emit(analyze_trace(loaded), format, output)
