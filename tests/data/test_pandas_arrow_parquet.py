"""A Parquet file written by pandas from Arrow-backed columns reads like any other.

pandas stores `large_list<element: int64>[pyarrow]` as the dtype of such a list column in the
file's metadata and cannot parse that name back (pandas 2.x `pandas_dtype`), so reading the
file with its metadata was an internal error. Found by writing a simulated trace read with
`dtype_backend="pyarrow"` back with `DataFrame.to_parquet`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from yaotu_trace.ingest.load import read_trace


def _arrow_backed(df: pd.DataFrame, path: Path) -> Path:
    """`df` as pandas writes it after reading a file whose lists are Arrow large lists."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    large = pa.schema([pa.field(f.name, pa.large_list(f.type.value_type))
                       if pa.types.is_list(f.type) else f for f in table.schema])
    table.cast(large).to_pandas(types_mapper=pd.ArrowDtype).to_parquet(path)
    return path


def test_a_trace_with_arrow_list_columns_reads(tmp_path: Path) -> None:
    df = pd.DataFrame({"arrival_s": [0.0, 1.5], "prompt_len": [3, 2], "output_len": [1, 4],
                       "prompt_tokens": [[1, 2, 3], [1, 2]]})
    path = _arrow_backed(df, tmp_path / "t.parquet")
    assert b"large_list" in pq.read_schema(path).metadata[b"pandas"]
    for lazy in (False, True):
        trace = read_trace(path, lazy_content=lazy)
        assert trace.requests["arrival_s"].tolist() == [0.0, 1.5]
        assert trace.requests["prompt_len"].tolist() == [3, 2]
    eager = read_trace(path)
    assert [list(t) for t in eager.requests["prompt_tokens"]] == [[1, 2, 3], [1, 2]]
