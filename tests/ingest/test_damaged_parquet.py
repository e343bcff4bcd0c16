"""Damaged Parquet traces are one-line read errors (exit 3), whether the damage is met when the
trace is loaded or later, when its token columns are streamed batch by batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_cli
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.token_times import gap_summary
from yaotu_trace.errors import ExitCode, TraceReadError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels.stream import ParquetPrompts

FIX = "copy it again or re-export the trace"


def _table(n: int = 4000) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({
        "arrival_s": np.arange(n) * 0.01,
        "prompt_len": [32] * n,
        "output_len": [4] * n,
        "prompt_tokens": [rng.integers(0, 50_000, 32).tolist() for _ in range(n)],
        "token_times_s": [(i * 0.01 + np.arange(4) * 0.02).tolist() for i in range(n)],
    })


def _damage_column(path: Path, column: str, row_group: int = 0) -> None:
    """Overwrite 64 bytes in the middle of one column chunk's pages."""
    meta = pq.ParquetFile(path).metadata
    chunk = next(meta.row_group(row_group).column(j) for j in range(meta.num_columns)
                 if meta.row_group(row_group).column(j).path_in_schema.startswith(column))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    middle = start + chunk.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[middle:middle + 64] = bytes(range(64))
    path.write_bytes(bytes(data))


@pytest.fixture(params=["written by trace", "pyarrow snappy"])
def damaged_tokens(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A trace whose prompt_tokens pages of the second row group are damaged: by this tool's
    writer (zstd pages with checksums) or a plain pyarrow file (snappy, no checksums)."""
    path = tmp_path / "t.parquet"
    if request.param == "written by trace":
        write_trace(_table(), path)
    else:
        pq.write_table(pa.Table.from_pandas(_table(), preserve_index=False), path,
                       row_group_size=1024, compression="snappy")
    _damage_column(path, "prompt_tokens", row_group=1)
    return path


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_damaged_page_read_eagerly_names_row_group_and_column(damaged_tokens: Path) -> None:
    with pytest.raises(TraceReadError) as exc:
        read_trace(damaged_tokens)
    message = _one_line(exc)
    assert message.startswith(f"{damaged_tokens}: row group 2 of 4, column 'prompt_tokens': "
                              "the Parquet file is damaged (")
    assert message.endswith(FIX)


def test_damaged_page_met_while_streaming_is_a_read_error(damaged_tokens: Path) -> None:
    # GIVEN the trace loaded with its token columns left on disk (the scalar columns are fine)
    trace = read_trace(damaged_tokens, lazy_content=True)
    assert trace.lazy is not None and "prompt_tokens" in trace.lazy.columns
    prompts = ParquetPrompts(path=str(damaged_tokens), column="prompt_tokens",
                             prompt_len=trace.requests["prompt_len"].to_numpy(np.int64),
                             source_block_size=None,
                             num_values=trace.lazy.values_in("prompt_tokens"))
    # WHEN the replay streams the column THEN the damage is a read error naming where it is
    with pytest.raises(TraceReadError) as exc:
        for _ in prompts.batches():
            pass
    message = _one_line(exc)
    assert message.startswith(f"{damaged_tokens}: row group 2 of 4, column 'prompt_tokens': "
                              "the Parquet file is damaged (")
    assert message.endswith(FIX)


def test_damaged_token_times_met_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_trace(_table(), path)
    _damage_column(path, "token_times_s", row_group=2)
    trace = read_trace(path, lazy_content=True)
    with pytest.raises(TraceReadError) as exc:
        gap_summary(trace.requests, trace.lazy)
    message = _one_line(exc)
    assert message.startswith(f"{path}: rows from ")
    assert "column 'token_times_s': the Parquet file is damaged (" in message


def test_cli_exit_3_for_a_page_damaged_in_a_streamed_column(
        damaged_tokens: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["analyze", str(damaged_tokens), "--format", "json"], capsys)
    assert code == ExitCode.INPUT
    assert err.count("\n") == 1 and "column 'prompt_tokens'" in err and FIX in err


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "the file is empty (0 bytes)"),
    (b"arrival_s,prompt_len\n0,1\n", "not a Parquet file (it does not start with"),
    (b"PAR1" + bytes(100), "the Parquet file is cut short (its footer is missing)"),
])
def test_not_parquet_or_cut_short(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(content)
    with pytest.raises(TraceReadError) as exc:
        read_trace(path, lazy_content=True)
    assert _one_line(exc).startswith(f"{path}: {expected}")


def test_footer_overwritten_is_damaged(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_trace(_table(200), path)
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer
    data[start:start + footer // 2] = bytes(footer // 2)  # the length and magic bytes kept
    path.write_bytes(bytes(data))
    with pytest.raises(TraceReadError) as exc:
        read_trace(path, lazy_content=True)
    assert "the Parquet file is damaged" in _one_line(exc)


def test_public_trace_converted_then_damaged_is_caught_by_its_checksums(tmp_path: Path) -> None:
    # GIVEN the Mooncake conversation trace converted to Parquet (block ids left on disk)
    from tests.conftest import shared_trace
    from yaotu_trace.ingest.convert import convert_trace

    path = tmp_path / "mooncake.parquet"
    convert_trace(shared_trace("mooncake/conversation_trace.jsonl"), path)
    trace = read_trace(path, lazy_content=True)
    assert trace.lazy is not None and "prompt_block_ids" in trace.lazy.columns
    # WHEN one byte of a block-id page in the middle of the file flips
    meta = pq.ParquetFile(path).metadata
    group = meta.num_row_groups // 2
    chunk = next(meta.row_group(group).column(j) for j in range(meta.num_columns)
                 if meta.row_group(group).column(j).path_in_schema.startswith("prompt_block"))
    data = bytearray(path.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start + chunk.total_compressed_size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    # THEN streaming the column is a read error naming that row group, not other ids
    prompts = ParquetPrompts(path=str(path), column="prompt_block_ids",
                             prompt_len=trace.requests["prompt_len"].to_numpy(np.int64),
                             source_block_size=trace.source_block_size,
                             num_values=trace.lazy.values_in("prompt_block_ids"))
    with pytest.raises(TraceReadError) as exc:
        for _ in prompts.batches():
            pass
    assert _one_line(exc).startswith(
        f"{path}: row group {group + 1} of {meta.num_row_groups}, column 'prompt_block_ids': "
        "the Parquet file is damaged (")
