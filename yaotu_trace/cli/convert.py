"""`trace convert`: rewrite a trace of any supported format as a canonical table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace.cli.app import InputFormatOpt, MapOpt, SourceBlockOpt, TraceArg, app, load
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.canonical import write_trace

WRITABLE_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


@app.command()
def convert(
    trace: TraceArg,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Output file; the extension picks the format: "
                     ".parquet, .jsonl or .csv.", dir_okay=False, show_default=False),
    ],
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
) -> None:
    """Write a trace (Mooncake, Azure, BurstGPT, vLLM bench, OpenTelemetry, ...) as a canonical
    table: validated, sorted by arrival, with canonical column names.

    Canonical Parquet is the format the other commands stream: its token columns stay on disk
    and are read in record batches, so a trace larger than memory gets its report. The input
    is read whole once, here; it is never modified, and the output is written atomically.

    \b
    Examples:

      trace convert ../traces/mooncake/conversation_trace.jsonl --out conversation.parquet

      trace convert azure_code_2023.csv --out azure.parquet

      trace convert spans.json --input-format otel --out requests.jsonl
    """
    if out.suffix.lower() not in WRITABLE_SUFFIXES:
        raise ConfigError(
            f"--out {out}: cannot tell the format from '{out.suffix or '(no extension)'}'; "
            "end the name with .parquet, .jsonl or .csv"
        )
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{out}: folder '{parent}' does not exist; create it or pick another "
                          "path")
    if out.exists() and trace.exists() and out.resolve() == trace.resolve():
        raise ConfigError(f"--out {out}: is the input trace; inputs are never overwritten, "
                          "pick another name")
    loaded = load(trace, input_format, map, source_block_size)
    write_trace(loaded.requests, out, source_block_size=loaded.source_block_size)
    for note in loaded.notes:
        sys.stderr.write(f"note: {note}\n")
    sys.stderr.write(f"wrote {len(loaded.requests):,} requests ({loaded.format_name} → "
                     f"canonical {out.suffix.lower().lstrip('.')}) to {out}\n")
