"""`trace convert`: rewrite a trace of any supported format as a canonical table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.errors import ConfigError, TraceReadError
from yaotu_trace.ingest import parse_column_map
from yaotu_trace.ingest.convert import convert_trace
from yaotu_trace.ingest.formats import TraceFormat

# The tables `--out` is written as.
WRITABLE_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


def convert(
    trace: str | Path,
    *,
    out: Path,
    input_format: TraceFormat | None = None,
    column_map: Sequence[str] = (),
    source_block_size: int | None = None,
    tokenizer: Path | None = None,
    steps_out: Path | None = None,
) -> Report:
    """`trace convert`: the trace at `trace` written to `out` as a canonical table (format by
    extension), validated and sorted by arrival, atomically; the input is never modified.

    `tokenizer` (a `tokenizer.json`) writes a log of text (a gateway log) with its prompts'
    token ids, as `--tokenizer` reads it for the other commands. `steps_out` receives the
    engine steps a capture records itself (a vllm-vcr trace's), as the step log `--steps`
    reads.

    The report's `conversion` section says how many requests were written, from which format
    and in how many parts the input was read, with the notes of the conversion.
    """
    path = Path(trace)
    if out.suffix.lower() not in WRITABLE_SUFFIXES:
        raise ConfigError(
            f"--out {out}: cannot tell the format from '{out.suffix or '(no extension)'}'; "
            "end the name with .parquet, .jsonl or .csv"
        )
    if steps_out is not None and steps_out.suffix.lower() not in WRITABLE_SUFFIXES:
        raise ConfigError(f"--steps-out {steps_out}: cannot tell the format from "
                          f"'{steps_out.suffix or '(no extension)'}'; end the name with "
                          ".parquet, .jsonl or .csv")
    if not path.exists():
        raise TraceReadError(f"{path}: no such file; check the path")
    done = convert_trace(path, out, fmt=input_format,
                         column_map=parse_column_map(list(column_map)),
                         source_block_size=source_block_size, tokenizer=tokenizer,
                         steps_out=steps_out)
    summary = InputSummary(path=str(path), format=done.format_name, rows_read=done.requests,
                           requests=done.requests, source_block_size=source_block_size,
                           content=None, columns=(), notes=done.notes)
    config = {"out": str(out), **({"steps_out": str(steps_out)} if steps_out else {})}
    return Report(command="convert", input=summary, config=config,
                  sections={"conversion": done})
