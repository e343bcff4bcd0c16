"""Mooncake (FAST'25) JSONL: ms timestamps and chained 512-token block ids.

`len(hash_ids) == ceil(input_length / 512)`: the last id may cover a partial block.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from yaotu_trace.data.jsonl import iter_json_lines, read_json_lines, read_json_table
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

MOONCAKE_BLOCK_TOKENS = 512


def read_mooncake(path: Path) -> RawTrace:
    """Map timestamp (ms) → arrival_s, input/output_length → lengths, hash_ids → block ids."""
    return _columnar(path) or mooncake_part(*read_json_lines(path))


# The column types of a file read whole by pyarrow (`_columnar`), as Python's json reads them.
_COLUMN_TYPES = {"timestamp": "int64", "input_length": "int64", "output_length": "int64",
                 "hash_ids": "list<item: int64>"}


def _columnar(path: Path) -> RawTrace | None:
    """`read_mooncake` of a plain file of integer columns and no missing value, parsed by
    pyarrow: the same table as `mooncake_part` makes of the records, without a Python object
    per block id. None for any other file (read line by line)."""
    table = read_json_table(path)
    if table is None or {f.name: str(f.type) for f in table.schema} != _COLUMN_TYPES:
        return None
    if table.column("hash_ids").combine_chunks().flatten().null_count:
        return None
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
    )


def mooncake_part(records: list[dict[str, Any]], lines: list[int]) -> RawTrace:
    """The mapping of `read_mooncake` for some lines of the file (each line stands alone)."""
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
    )


def read_mooncake_parts(path: Path, part_bytes: int) -> Iterator[RawTrace]:
    """`read_mooncake` in parts of about `part_bytes` of text, with the file's line numbers."""
    for records, lines in iter_json_lines(path, part_bytes=part_bytes):
        yield mooncake_part(records, lines)


def _is_mooncake_record(keys: set[str]) -> bool:
    # RAGPulse rows also have these four keys; its session_id tells them apart.
    return {"timestamp", "input_length", "output_length", "hash_ids"} <= keys and (
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
