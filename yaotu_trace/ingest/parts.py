"""Reading a trace in parts, for the formats whose lines stand alone.

`trace convert` writes a large JSONL or CSV trace as canonical Parquet without holding it:
each part (about 32 MB of text) is mapped and validated like a whole file, with the file's
own line numbers; a compressed file is decompressed as its parts are read, never whole.
A format can be read so when its descriptor has a `parts_reader` (canonical JSONL and CSV,
Mooncake). Formats whose rows depend on each other (Bailian's chat trees, Azure's clock,
RAGPulse's joined files, WEKA's conversations, benchmark results, spans) are read whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from yaotu_trace.data.jsonl import PART_BYTES
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import names_of
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.registry import spec_of


def apply_options(raw: RawTrace, path: Path, column_map: Mapping[str, str] | None,
                  source_block_size: int | None) -> RawTrace:
    """`--map` renames and `--source-block-size`, applied to what a reader returned."""
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


def can_read_in_parts(fmt: TraceFormat) -> bool:
    """Whether a format's records stand alone, so a file of it can be read in parts."""
    return spec_of(fmt).parts_reader is not None


def read_parts(path: Path, fmt: TraceFormat, *,
               part_bytes: int = PART_BYTES) -> Iterator[RawTrace]:
    """The raw tables of consecutive parts of a file in a format that `can_read_in_parts`."""
    parts_reader = spec_of(fmt).parts_reader
    if parts_reader is None:
        raise ValueError(f"{fmt.value} traces are read whole, not in parts")
    yield from parts_reader(path, part_bytes)
