"""The canonical table in Parquet, JSONL and CSV, described as trace formats.

The readers themselves live with the writer in `yaotu_trace.data.canonical` (the table's
codecs are data, not ingest); the descriptors here point at them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from yaotu_trace.data import canonical
from yaotu_trace.data.canonical import CSV_ERRORS, csv_error, csv_frame, csv_part, jsonl_part
from yaotu_trace.data.compressed import open_compressed
from yaotu_trace.data.jsonl import iter_json_lines
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

CSV_HEAD_BYTES = 1 << 20  # text read to estimate a CSV row's length before reading in parts


def jsonl_parts(path: Path, part_bytes: int) -> Iterator[RawTrace]:
    """Canonical JSONL in parts of about `part_bytes` of text, with the file's line numbers."""
    for records, lines in iter_json_lines(path, part_bytes=part_bytes):
        yield jsonl_part(records, lines, path)


def csv_parts(path: Path, part_bytes: int) -> Iterator[RawTrace]:
    """CSV rows in parts of about `part_bytes`, sized from the first rows' length."""
    with open_compressed(path) as fh:
        head = fh.read(CSV_HEAD_BYTES).splitlines()
    per_row = max(1, sum(len(line) + 1 for line in head[1:]) // max(1, len(head) - 1))
    rows = max(1, part_bytes // per_row)
    first_line = 2
    with open_compressed(path) as fh:
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


# A table with the two lengths but no timestamp is canonical too: lengths-only, which
# `trace analyze` profiles and every command that needs arrivals refuses by name.
LENGTHS: frozenset[str] = frozenset({"prompt_len", "output_len"})


def _is_canonical_record(keys: set[str]) -> bool:
    return "arrival_s" in keys or keys >= LENGTHS


def _is_canonical_jsonl_document(head: str) -> bool:
    """JSON Lines saved as `.json`: several objects, one per line, with canonical keys."""
    return head.lstrip().startswith("{") and "\n{" in head and '"arrival_s"' in head


def _is_canonical_header(columns: set[str]) -> bool:
    return "arrival_s" in columns or columns >= LENGTHS


def _is_canonical_footer(footer: bytes) -> bool:
    """A Parquet footer (its column names stored as text) naming the canonical columns."""
    return b"arrival_s" in footer or all(name.encode() in footer for name in LENGTHS)


PARQUET = TraceFormatSpec(
    name=TraceFormat.CANONICAL_PARQUET,
    description="the canonical table in Parquet, the one format read out of core",
    reader=canonical.read_parquet,
    row_label="row",
    extensions=(".parquet",),
    parquet_footer=_is_canonical_footer,
)
JSONL = TraceFormatSpec(
    name=TraceFormat.CANONICAL_JSONL,
    description="the canonical table in JSON Lines, one request object per line",
    reader=canonical.read_jsonl,
    row_label="line",
    parts_reader=jsonl_parts,
    json_keys=_is_canonical_record,
    json_document=_is_canonical_jsonl_document,
)
CSV = TraceFormatSpec(
    name=TraceFormat.CANONICAL_CSV,
    description="the canonical table in CSV (or TSV); list cells are JSON arrays",
    reader=canonical.read_csv,
    row_label="line",
    parts_reader=csv_parts,
    csv_header=_is_canonical_header,
)
