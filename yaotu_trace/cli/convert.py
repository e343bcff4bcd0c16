"""`trace convert`: rewrite a trace of any supported format as a canonical table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace._visible import visible
from yaotu_trace.cli.app import command
from yaotu_trace.cli.options import (
    InputFormatOpt,
    MapOpt,
    SourceBlockOpt,
    TokenizerOpt,
    TraceArg,
)
from yaotu_trace.cli.progress import QuietOpt


@command()
def convert(
    trace: TraceArg,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Output file; the extension picks the format: "
                     ".parquet, .jsonl or .csv.", show_default=False),
    ],
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    steps_out: Annotated[
        Path | None,
        typer.Option("--steps-out", help="The engine steps a capture records itself (a "
                     "vllm-vcr trace's), as a step log for --steps (.parquet, .jsonl or .csv).",
                     show_default=False),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Write a trace (Mooncake, Azure, BurstGPT, vLLM bench, OpenTelemetry, ...) as a canonical
    table: validated, sorted by arrival, with canonical column names.

    Canonical Parquet is the format the other commands stream: its token columns stay on disk
    and are read in record batches, so a trace larger than memory gets its report. Canonical
    JSONL or CSV and Mooncake JSONL are converted to Parquet in parts of about 32 MB, so they
    may be larger than memory too (if their arrivals are in order); other formats are read
    whole. The input is never modified, and the output is written atomically.

    \b
    Examples:

      trace convert ../traces/mooncake/conversation_trace.jsonl --out conversation.parquet

      trace convert azure_code_2023.csv --out azure.parquet

      trace convert spans.json --input-format otel --out requests.jsonl

      trace convert gateway.jsonl --tokenizer tokenizer.json --out requests.parquet

      trace convert vcr_trace.jsonl --out requests.parquet --steps-out steps.parquet
    """
    from yaotu_trace.commands import convert as convert_command

    report = convert_command.convert(trace, out=out, input_format=input_format,
                                     column_map=map or (), source_block_size=source_block_size,
                                     tokenizer=tokenizer, steps_out=steps_out)
    done = report.sections["conversion"]
    for note in done.notes:
        sys.stderr.write(f"note: {visible(note, one_line=True)}\n")
    how = f", read in {done.parts} parts" if done.parts > 1 else ""
    if not quiet:
        sys.stderr.write(visible(f"wrote {done.requests:,} requests ({done.format_name} → "
                                 f"canonical {out.suffix.lower().lstrip('.')}{how}) to {out}",
                                 one_line=True) + "\n")
