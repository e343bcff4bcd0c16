"""Mooncake (FAST'25) JSONL: ms timestamps and chained 512-token block ids.

`len(hash_ids) == ceil(input_length / 512)`: the last id may cover a partial block.

A clean file is also read without pandas (`read_clean`), for `trace sweep` and `trace analyze`:
importing pandas takes longer than reading and sweeping the Mooncake conversation trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.data.jsonl import iter_json_lines, read_json_lines, read_json_table
from yaotu_trace.data.schema import Columns, RawTrace, Trace, ids_cover, normalize
from yaotu_trace.data.values import SOURCE_ROW, TIME_LIMIT_S, clock_gap
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import count_keys, unused_note

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MOONCAKE_BLOCK_TOKENS = 512
# The keys a Mooncake record has; any other is named in a note (`read_mooncake`).
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def read_mooncake(path: Path) -> RawTrace:
    """Map timestamp (ms) → arrival_s, input/output_length → lengths, hash_ids → block ids;
    any other key of the records is counted and named in a note, not read."""
    columnar = _columnar(path)  # exactly the four keys
    if columnar is not None:
        return columnar
    records, lines = read_json_lines(path)
    unused: Counter[str] = Counter()
    for record in records:
        count_keys(unused, record, KEYS)
    raw = mooncake_part(records, lines)
    return replace(raw, notes=raw.notes + unused_note(unused, len(records), "fields"))


# The column types of a file read whole by pyarrow (`_columnar`), as Python's json reads them.
_COLUMN_TYPES = {"timestamp": "int64", "input_length": "int64", "output_length": "int64",
                 "hash_ids": "list<item: int64>"}


def _table(path: Path) -> pa.Table | None:
    """The file parsed whole by pyarrow when it is a plain file of Mooncake's four integer
    columns with no missing value (`read_json_table`); None for any other file."""
    table = read_json_table(path)
    if table is None or {f.name: str(f.type) for f in table.schema} != _COLUMN_TYPES:
        return None
    # Any missing id in the list values (`values` rather than `flatten()`, which imports
    # pyarrow.compute: 23 ms of a 0.4 s sweep).
    if table.column("hash_ids").combine_chunks().values.null_count:
        return None
    return table


def _columnar(path: Path) -> RawTrace | None:
    """`read_mooncake` of a plain file of integer columns and no missing value, parsed by
    pyarrow: the same table as `mooncake_part` makes of the records, without a Python object
    per block id. None for any other file (read line by line)."""
    table = _table(path)
    return None if table is None else _raw_of_table(table)


def _raw_of_table(table: pa.Table) -> RawTrace:
    import pandas as pd

    n = table.num_rows
    out = pd.DataFrame(
        {
            "arrival_s": pd.Series(table.column("timestamp").to_numpy()) / 1000.0,
            "prompt_len": table.column("input_length").to_numpy(),
            "output_len": table.column("output_length").to_numpy(),
            "prompt_block_ids": pd.Series(pd.arrays.ArrowExtensionArray(
                table.column("hash_ids"))),
            SOURCE_ROW: np.arange(1, n + 1, dtype=np.int64),
        }
    )
    return RawTrace(
        requests=out,
        format_name="mooncake",
        source_block_size=MOONCAKE_BLOCK_TOKENS,
        row_label="line",
        source_names={"arrival_s": "timestamp", "prompt_len": "input_length",
                      "output_len": "output_length", "prompt_block_ids": "hash_ids"},
        source_units={"arrival_s": "ms"},
    )


# The canonical columns of a Mooncake trace's table (`normalize` names every request).
_NAMES = ("request_id", "arrival_s", "prompt_len", "output_len", "prompt_block_ids")
# A length at or beyond 2**53 would round on its way through float64 in `normalize`: such a
# file (no real one) is read the usual way.
_EXACT_INT = 2**53


def read_clean(path: Path) -> Trace | None:
    """The trace of a clean Mooncake file, validated on numpy arrays without importing pandas:
    parsed whole by pyarrow (`_table`), its arrivals in order and every value one that
    `normalize` accepts without a note. None for anything else: the caller reads the file the
    usual way, which sorts, notes or names the row at fault. The pandas table, made only when a
    pass asks for `requests`, is the usual path's own, and must come with no note."""
    table = _table(path)
    if table is None:
        return None
    timestamp = _int64s(table.column("timestamp"))
    prompt = _int64s(table.column("input_length"))
    output = _int64s(table.column("output_length"))
    ids = table.column("hash_ids").combine_chunks()
    first = ids.offset
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[first:first + len(ids) + 1]
    values = _int64s(ids.values)[offsets[0]:offsets[-1]]
    offsets = offsets.astype(np.int64) - offsets[0]
    arrival_s = timestamp / 1000.0
    arrival_s.flags.writeable = False  # as the other columns, views of Arrow's buffers
    lengths = np.diff(offsets)
    size = MOONCAKE_BLOCK_TOKENS
    clean = (
        bool((np.abs(arrival_s) <= TIME_LIMIT_S).all())
        and not (np.diff(arrival_s) < 0).any()
        and clock_gap({"arrival_s": arrival_s}) is None
        and all(bool(((v >= 0) & (v < _EXACT_INT)).all()) for v in (prompt, output))
        and bool(ids_cover(lengths, prompt, size).all())
    )
    if not clean:
        return None
    where = str(path)

    def frame() -> pd.DataFrame:
        usual = normalize(_raw_of_table(table), where)
        if usual.notes or usual.num_requests != table.num_rows:
            raise RuntimeError(f"{where}: the trace read without pandas differs from the "
                               f"usual read ({usual.notes})")
        return usual.requests

    return Trace(
        columns=Columns(num_rows=table.num_rows, names=_NAMES,
                        scalars={"arrival_s": arrival_s, "prompt_len": prompt,
                                 "output_len": output},
                        lists={"prompt_block_ids": (offsets, values)}, frame=frame),
        path=where,
        format_name="mooncake",
        source_block_size=size,
        rows_read=table.num_rows,
    )


def _int64s(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An int64 Arrow column without nulls as numpy, read from its buffer: pyarrow's
    `to_numpy` imports pandas."""
    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    return np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr)]


def mooncake_part(records: list[dict[str, Any]], lines: list[int]) -> RawTrace:
    """The mapping of `read_mooncake` for some lines of the file (each line stands alone)."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    out = pd.DataFrame(
        {
            "arrival_s": pd.to_numeric(df["timestamp"], errors="coerce") / 1000.0
            if "timestamp" in df
            else np.nan,
            "prompt_len": df.get("input_length"),
            "output_len": df.get("output_length"),
            "prompt_block_ids": df.get("hash_ids"),
            SOURCE_ROW: lines,
        }
    )
    # Keep the raw timestamp's non-numeric values visible to validation.
    if "timestamp" in df:
        bad = out["arrival_s"].isna() & df["timestamp"].notna()
        if bad.any():
            out["arrival_s"] = out["arrival_s"].astype(object)
            out.loc[bad, "arrival_s"] = df.loc[bad, "timestamp"]
    return RawTrace(
        requests=out.dropna(axis=1, how="all"),
        format_name="mooncake",
        source_block_size=MOONCAKE_BLOCK_TOKENS,
        row_label="line",
        source_names={"arrival_s": "timestamp", "prompt_len": "input_length",
                      "output_len": "output_length", "prompt_block_ids": "hash_ids"},
        source_units={"arrival_s": "ms"},
    )


def read_mooncake_parts(path: Path, part_bytes: int) -> Iterator[RawTrace]:
    """`read_mooncake` in parts of about `part_bytes` of text, with the file's line numbers."""
    for records, lines in iter_json_lines(path, part_bytes=part_bytes):
        yield mooncake_part(records, lines)


def _is_mooncake_record(keys: set[str]) -> bool:
    # RAGPulse rows also have these four keys; its session_id tells them apart.
    return set(KEYS) <= keys and (
        "session_id" not in keys
    )


FORMAT = TraceFormatSpec(
    name=TraceFormat.MOONCAKE,
    description="Mooncake (FAST'25) JSONL: ms timestamps and chained 512-token block ids",
    reader=read_mooncake,
    row_label="line",
    parts_reader=read_mooncake_parts,
    json_keys=_is_mooncake_record,
)
