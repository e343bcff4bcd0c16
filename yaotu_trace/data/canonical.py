"""Readers and the writer for the canonical table in Parquet, JSONL and CSV."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from yaotu_trace.data import parquet_file
from yaotu_trace.data.compressed import format_suffix, is_compressed, open_compressed
from yaotu_trace.data.jsonl import read_json_lines
from yaotu_trace.data.run_id import RUN_ID_KEY
from yaotu_trace.data.schema import (
    CANONICAL_COLUMNS,
    LIST_COLUMNS,
    LIST_VALUE_TYPES,
    LazyContent,
    RawTrace,
    Trace,
    normalize,
)
from yaotu_trace.data.values import SOURCE_ROW, check_unique_names
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.files import replace_atomically

SOURCE_BLOCK_SIZE_KEY = b"yaotu.source_block_size"


def _list_mapper(dtype: pa.DataType) -> pd.ArrowDtype | None:
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return pd.ArrowDtype(dtype)
    return None


# List columns `read_trace(..., lazy_content=True)` leaves on disk (the replay streams the
# token columns, `token_times` the emission times).
LAZY_COLUMNS = ("prompt_tokens", "prompt_block_ids", "output_tokens", "token_times_s")


def read_parquet(path: Path, *, skip: tuple[str, ...] = ()) -> RawTrace:
    """Read a canonical Parquet table; list columns stay Arrow lists (no Python objects).

    Columns named in `skip` are not read (see `lazy_content`).
    """
    columns = None
    if skip:
        columns = [c for c in parquet_file.open_file(path).schema_arrow.names if c not in skip]
    table = parquet_file.read_table(path, columns=columns)
    meta = table.schema.metadata or {}
    block = meta.get(SOURCE_BLOCK_SIZE_KEY)
    df = parquet_file.to_frame(table, types_mapper=_list_mapper)
    return RawTrace(
        requests=df,
        format_name="parquet",
        source_block_size=_block_size(path, block),
        row_label="row",
    )


def _block_size(path: Path, raw: bytes | None) -> int | None:
    """The `yaotu.source_block_size` metadata value, checked."""
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise TraceSchemaError(
            f"{path}: metadata '{SOURCE_BLOCK_SIZE_KEY.decode()}' is {raw[:40]!r}, not a whole "
            "number of tokens per id; fix it or pass --source-block-size"
        ) from None


def lazy_content(path: Path) -> LazyContent | None:
    """The list columns of a Parquet file that can stay on disk, with their value counts.

    None when the file has none of `LAZY_COLUMNS` or lacks `prompt_len` (which the replay needs
    up front), when it is compressed (it is then read into memory), or when it cannot be opened
    (the eager reader then reports why). A column's count excludes missing lists and values
    when the file's statistics say how many there are; a column with none stays in memory.
    """
    try:
        if is_compressed(path):
            return None
        with parquet_file.reading(path):
            file = pq.ParquetFile(path)
            meta, schema = file.metadata, file.schema_arrow
    except TraceReadError:
        return None
    present = tuple(c for c in LAZY_COLUMNS if c in schema.names)
    if not present or "prompt_len" not in schema.names:
        return None
    if not all(pa.types.is_list(t) or pa.types.is_large_list(t)
               for t in (schema.field(c).type for c in present)):
        return None  # the eager reader names the row that is not a list
    counts = []
    for column in present:
        leaves = [j for j in range(meta.num_columns)
                  if meta.schema.column(j).path.split(".")[0] == column]
        if len(leaves) != 1:
            return None
        counts.append(sum(_leaf_values(meta.row_group(i).column(leaves[0]))
                          for i in range(meta.num_row_groups)))
    # A column without a value is read (cheaply) and dropped like any column missing throughout.
    kept = [(c, n) for c, n in zip(present, counts, strict=True) if n > 0]
    if not kept:
        return None
    return LazyContent(path=str(path), columns=tuple(c for c, _ in kept),
                       num_values=tuple(n for _, n in kept))


def load_full(trace: Trace) -> Trace:
    """The same trace with the list columns it left on disk (`lazy_content`) read into memory,
    validated as when it was read."""
    if trace.lazy is None:
        return trace
    path = Path(trace.path)
    raw = read_parquet(path)
    if trace.source_block_size is not None:
        raw = replace(raw, source_block_size=trace.source_block_size)
    return replace(normalize(raw, str(path)), steps=trace.steps)


def _leaf_values(chunk: pq.ColumnChunkMetaData) -> int:
    """Values of one column chunk, less its null count when the statistics have one (for a
    list column that counts missing and empty lists, which hold no value)."""
    stats = chunk.statistics
    if stats is not None and stats.has_null_count:
        return max(0, chunk.num_values - stats.null_count)
    return chunk.num_values


def read_jsonl(path: Path) -> RawTrace:
    """Read canonical JSONL: one request object per line, canonical keys."""
    return jsonl_part(*read_json_lines(path), path)


def jsonl_part(records: list[dict[str, Any]], lines: list[int], path: Path) -> RawTrace:
    """Canonical JSONL records (some lines of a file, or all) as a raw table."""
    df = pd.DataFrame.from_records(records)
    df[SOURCE_ROW] = lines
    block = None
    if "source_block_size" in df:
        block = _one_block_size(df.pop("source_block_size").tolist(), lines, path)
    return RawTrace(requests=df, format_name="jsonl", source_block_size=block, row_label="line")


def _one_block_size(values: list[object], lines: list[int], path: Path) -> int | None:
    """The `source_block_size` of JSONL rows: one whole number >= 1 wherever it is given."""
    found: tuple[int, int] | None = None
    for value, line in zip(values, lines, strict=True):
        if value is None or (isinstance(value, float) and value != value):
            continue
        whole = isinstance(value, int | float) and not isinstance(value, bool) and (
            float(value).is_integer() and 1 <= value < 2**31)
        if not whole:
            raise TraceSchemaError(
                f"{path}: line {line}, column 'source_block_size': {repr(value)[:40]} is not "
                "a whole number of tokens per id; fix it or pass --source-block-size")
        if found is not None and int(value) != found[0]:  # type: ignore[call-overload]
            raise TraceSchemaError(
                f"{path}: line {line}, column 'source_block_size': {value} differs from "
                f"{found[0]} on line {found[1]}; one trace has one block size")
        found = found or (int(value), line)  # type: ignore[call-overload]
    return None if found is None else found[0]


def read_csv(path: Path) -> RawTrace:
    """Read a canonical CSV; list columns are JSON arrays in a cell (e.g. "[1, 2, 3]")."""
    return csv_part(read_csv_frame(path), path, first_line=2)


def csv_part(df: pd.DataFrame, path: Path, *, first_line: int) -> RawTrace:
    """Canonical CSV rows (some of a file, or all) as a raw table; `first_line` is the file
    line of the first row (2 after the header)."""
    for column in LIST_COLUMNS:
        if column in df.columns:
            df[column] = [_parse_list_cell(v, path, first_line + i, column)
                          for i, v in enumerate(df[column])]
    df[SOURCE_ROW] = range(first_line, len(df) + first_line)
    block = None
    if "source_block_size" in df:
        block = _one_block_size(df.pop("source_block_size").tolist(),
                                df[SOURCE_ROW].tolist(), path)
    return RawTrace(requests=df, format_name="csv", source_block_size=block, row_label="line")


def read_csv_frame(path: Path, *, names_once: bool = True, **kwargs: object) -> pd.DataFrame:
    """pandas.read_csv of a (possibly compressed) file, errors as one-line `TraceReadError`s
    (`names_once` as in `csv_frame`)."""
    with open_compressed(path) as handle:
        frame = csv_frame(path, handle, names_once=names_once, **kwargs)
    assert isinstance(frame, pd.DataFrame)
    return frame


def csv_frame(path: Path, handle: IO[bytes], *, names_once: bool = True,
              **kwargs: object) -> Any:
    """pandas.read_csv of an open file (an iterator of frames with `chunksize`), with its
    errors as one-line `TraceReadError`s naming `path`; a `.tsv` file is tab-separated. With
    `names_once`, a header that names a column twice is refused (`check_unique_names`):
    pandas would rename the second `x` to `x.1` and read the first. Format detection reads
    headers without it (a benchmark's summary CSV repeats its group names)."""
    if format_suffix(path) == ".tsv":
        kwargs.setdefault("sep", "\t")
    try:
        frames = pd.read_csv(handle, **kwargs)
    except CSV_ERRORS as exc:
        raise csv_error(path, exc) from exc
    if names_once:
        check_unique_names(path, _header(path, kwargs))
    return frames


def _header(path: Path, kwargs: dict[str, object]) -> list[str]:
    """The CSV's header as written, before pandas renames repeated names (read again: the
    file has already parsed once, so this cannot fail but on a file changed meanwhile)."""
    split = {k: v for k, v in kwargs.items() if k in ("sep", "skipinitialspace")}
    try:
        with open_compressed(path) as handle:
            row = pd.read_csv(handle, header=None, nrows=1, dtype=str, keep_default_na=False,
                              **split)
    except CSV_ERRORS:
        return []
    return [str(v) for v in row.iloc[0].tolist()] if len(row) else []


# What pandas raises on a malformed CSV (a C parser error, bad bytes, a value it cannot hold).
CSV_ERRORS = (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError,
              OverflowError)
_RAGGED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def csv_error(path: Path, exc: Exception, after_line: int | None = None) -> TraceReadError:
    """The one-line error for a CSV pandas cannot parse, with the fix when it is known."""
    reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    ragged = _RAGGED.search(reason)
    if ragged:
        fields, line, saw = ragged.groups()  # pandas counts the file's own lines
        return TraceReadError(
            f"{path}: line {line}: {saw} fields where the header has "
            f"{fields}; quote values that contain commas, or fix the row"
        )
    if isinstance(exc, UnicodeDecodeError):
        return TraceReadError(f"{path}: not UTF-8 text ({reason}); save the CSV as UTF-8")
    if isinstance(exc, pd.errors.EmptyDataError):
        return TraceReadError(f"{path}: the CSV is empty; it needs a header line and one line "
                              "per row")
    at = f" after line {after_line}" if after_line else ""
    return TraceReadError(
        f"{path}: not a readable CSV{at} ({reason}); check the file or pass --input-format"
    )


def _parse_list_cell(value: object, path: Path, line: int, column: str) -> object:
    if value is None or (isinstance(value, float) and value != value):
        return None
    try:
        parsed = json.loads(str(value))
    except (ValueError, RecursionError) as exc:
        raise TraceReadError(
            f"{path}: line {line}, column '{column}': {str(value)[:40]!r} is not a JSON list; "
            'write lists as "[1, 2, 3]"'
        ) from exc
    return parsed


def write_trace(
    requests: pd.DataFrame, path: Path, *, source_block_size: int | None = None,
    run: str | None = None,
) -> None:
    """Write a canonical table atomically, by extension: .parquet, .jsonl or .csv. `run` is
    the id of the simulated run that wrote it (`run_id.py`), kept in Parquet's metadata."""
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".ndjson", ".csv"):
        raise TraceReadError(f"{path}: cannot write '{suffix}' files; use .parquet, .jsonl or .csv")
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        if suffix == ".parquet":
            table = _to_arrow(requests)
            meta = dict(table.schema.metadata or {})
            if source_block_size is not None:
                meta[SOURCE_BLOCK_SIZE_KEY] = str(source_block_size).encode()
            if run is not None:
                meta[RUN_ID_KEY] = run.encode("ascii")
            if meta:
                table = table.replace_schema_metadata(meta)
            pq.write_table(table, tmp, row_group_size=1024, **parquet_file.WRITE_OPTIONS)
        elif suffix == ".csv":
            frame = requests.copy()
            for column in LIST_COLUMNS:
                if column in frame.columns:
                    # Arrow-backed columns give pd.NA for a missing list and NumPy arrays
                    # (of NumPy scalars) for the others.
                    frame[column] = [
                        None if v is None or v is pd.NA else json.dumps(np.asarray(v).tolist())
                        for v in frame[column].tolist()
                    ]
            if source_block_size is not None:
                # NOTE: CSV has no file metadata; a column (as in JSONL) carries the block size,
                # so the file reads back without a --source-block-size guess.
                frame["source_block_size"] = source_block_size
            frame.to_csv(tmp, index=False)
        else:
            with tmp.open("w", encoding="utf-8") as fh:
                for record in _records(requests, source_block_size):
                    fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    replace_atomically(path, write)


def join_parquet_parts(parts: list[Path], path: Path, *,
                       source_block_size: int | None = None) -> int:
    """Write canonical Parquet parts, in order, as one file atomically; returns its rows.

    Parts may lack columns that others have (a reader drops a column empty in its part): the
    file has every column, in canonical order, null where a part had none. One part is held
    at a time.
    """
    schemas = [pq.read_schema(part) for part in parts]
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for field in schema:
            fields.setdefault(field.name, field.remove_metadata())
    order = [c for c in CANONICAL_COLUMNS if c in fields]
    schema = pa.schema([fields[c] for c in order])
    if source_block_size is not None:
        schema = schema.with_metadata({SOURCE_BLOCK_SIZE_KEY: str(source_block_size).encode()})
    rows = 0

    def write(tmp: Path) -> None:
        nonlocal rows
        with pq.ParquetWriter(tmp, schema, **parquet_file.WRITE_OPTIONS) as writer:
            for part in parts:
                table = pq.read_table(part)
                columns = [table.column(c).cast(fields[c].type) if c in table.column_names
                           else pa.nulls(table.num_rows, fields[c].type) for c in order]
                writer.write_table(pa.Table.from_arrays(columns, schema=schema),
                                   row_group_size=1024)
                rows += table.num_rows

    replace_atomically(path, write)
    return rows


def _to_arrow(requests: pd.DataFrame) -> pa.Table:
    arrays = {}
    for column in requests.columns:
        series = requests[column]
        if column in LIST_VALUE_TYPES:
            value_type = LIST_VALUE_TYPES[column]
            if isinstance(series.dtype, pd.ArrowDtype):
                arrays[column] = pa.chunked_array(series.array._pa_array).cast(
                    pa.large_list(value_type)
                )
            else:
                arrays[column] = pa.array(
                    series.tolist(), type=pa.large_list(value_type), from_pandas=True
                )
        else:
            arrays[column] = pa.array(series, from_pandas=True)
    return pa.table(arrays)


def _records(requests: pd.DataFrame, source_block_size: int | None) -> list[dict[str, object]]:
    table = _to_arrow(requests)
    records = table.to_pylist()
    out = []
    for record in records:
        clean = {k: v for k, v in record.items() if v is not None}
        if source_block_size is not None:
            clean["source_block_size"] = source_block_size
        out.append(clean)
    return out
