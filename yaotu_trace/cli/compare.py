"""`trace compare`: several simulated deployments on one request chain, with remedy ledgers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
    FormatOpt,
    GpuOpt,
    InputFormatOpt,
    KvDtypeOpt,
    MapOpt,
    ModelOpt,
    OutputOpt,
    SourceBlockOpt,
    TraceArg,
)
from yaotu_trace.cli.progress import QuietOpt, progress


@command()
def compare(
    trace: TraceArg,
    scenario: Annotated[list[Path], typer.Option(
        "--scenario", help="Scenario TOML file (repeat; the first one is the baseline).",
        dir_okay=False)],
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    gpu: GpuOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run each scenario on the same requests and show them side by side: TTFT and
    inter-token percentiles, throughput, preemptions, hit ratio, GPU-seconds, bytes moved, and
    per remedy the work saved and the work added relative to the first scenario.

    --model and --gpu fill in scenarios that do not name them.

    Examples:

      trace compare conversation_trace.jsonl --scenario chunked.toml --scenario pd.toml
    """
    from yaotu_trace.commands import compare as compare_command

    with progress("compare", quiet) as update:
        report = compare_command.compare(
            trace_input(trace, input_format, map, source_block_size), scenarios=scenario,
            model=model, gpu=gpu, kv_dtype=kv_dtype, progress=update)
    emit(report, format, output)
