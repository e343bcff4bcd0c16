"""Reading a trace in parts, for the formats whose lines stand alone.

`trace convert` writes a large JSONL or CSV trace as canonical Parquet without holding it:
each part (about 32 MB of text) is mapped and validated like a whole file, with the file's
own line numbers; a compressed file is decompressed as its parts are read, never whole.
Formats whose rows depend on each other (Bailian's chat trees, Azure's clock, RAGPulse's
joined files, WEKA's conversations, benchmark results, spans) are read whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from yaotu_trace.data.compressed import open_trace
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import names_of
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat

PARTABLE = (TraceFormat.CANONICAL_JSONL, TraceFormat.CANONICAL_CSV, TraceFormat.MOONCAKE)
PART_BYTES = 32 << 20


def apply_options(raw: RawTrace, path: Path, column_map: Mapping[str, str] | None,
                  source_block_size: int | None) -> RawTrace:
    """`--map` renames and `--source-block-size`, applied to what a reader returned."""
    from dataclasses import replace

    if column_map:
        missing = [s for s in column_map if s not in raw.requests.columns]
        if missing:
            raise TraceSchemaError(
                f"{path}: --map names column(s) {', '.join(map(repr, missing))} that the file "
                f"lacks (have: {names_of(raw.requests.columns, 12)})"
            )
        raw = replace(raw, requests=raw.requests.rename(columns=dict(column_map)))
    if source_block_size is not None:
        raw = replace(raw, source_block_size=source_block_size)
    return raw


def read_parts(path: Path, fmt: TraceFormat, *,
               part_bytes: int = PART_BYTES) -> Iterator[RawTrace]:
    """The raw tables of consecutive parts of a file in a `PARTABLE` format."""
    if fmt is TraceFormat.CANONICAL_CSV:
        yield from _csv_parts(path, part_bytes)
        return
    from yaotu_trace.data.canonical import jsonl_part
    from yaotu_trace.data.jsonl import iter_json_lines
    from yaotu_trace.ingest.mooncake import mooncake_part

    for records, lines in iter_json_lines(path, part_bytes=part_bytes):
        yield (mooncake_part(records, lines) if fmt is TraceFormat.MOONCAKE
               else jsonl_part(records, lines, path))


def _csv_parts(path: Path, part_bytes: int) -> Iterator[RawTrace]:
    """CSV rows in parts of about `part_bytes`, sized from the first rows' length."""
    from yaotu_trace.data.canonical import CSV_ERRORS, csv_error, csv_frame, csv_part

    with open_trace(path) as fh:
        head = fh.read(1 << 20).splitlines()
    per_row = max(1, sum(len(line) + 1 for line in head[1:]) // max(1, len(head) - 1))
    rows = max(1, part_bytes // per_row)
    first_line = 2
    with open_trace(path) as fh:
        frames = csv_frame(path, fh, chunksize=rows)
        while True:
            try:
                frame = next(frames)
            except StopIteration:
                return
            except CSV_ERRORS as exc:
                raise csv_error(path, exc, after_line=first_line - 1) from exc
            yield csv_part(frame, path, first_line=first_line)
            first_line += len(frame)
