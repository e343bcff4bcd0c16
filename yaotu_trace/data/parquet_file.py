"""A trace's Parquet file, opened and read with one translation of pyarrow's errors.

A trace is read from Parquet in several places: whole by the reader, and batch by batch later
in the run when its token columns are left on disk (`prefix.kernels.stream`, `token_times`).
Wherever pyarrow meets a damaged file it raises `OSError` or an `ArrowException` (a
`UnicodeDecodeError` for a damaged column name); `reading` turns those
into one `TraceReadError` that names the file, the row group or rows and the column when known,
and says what to do. Files written by this tool carry page checksums (`WRITE_OPTIONS`), which
are verified on every read, so a flipped byte in their data pages is caught rather than read.

A compressed Parquet file (`x.parquet.zst`) is decompressed into memory: Parquet needs random
access, and it compresses its own pages anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from yaotu_trace.data.compressed import codec_of, read_bytes
from yaotu_trace.data.values import check_unique_names
from yaotu_trace.errors import TraceReadError, YaotuError, where

MAGIC = b"PAR1"
# Options of every Parquet file this tool writes.
WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "write_page_checksum": True}


@contextmanager
def reading(path: str | Path, place: str | None = None,
            column: str | None = None) -> Iterator[None]:
    """Turn pyarrow's errors on a damaged file into a `TraceReadError` naming `place`
    (e.g. "row group 3" or "rows 1 to 65536") and `column` when given."""
    try:
        yield
    except YaotuError:
        raise
    except (OSError, pa.ArrowException, EOFError, UnicodeDecodeError) as exc:
        raise _damaged(Path(path), exc, place, column) from exc


def _damaged(path: Path, exc: BaseException, place: str | None,
             column: str | None) -> TraceReadError:
    reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    head, tail = _ends(path)
    if head == b"" and place is None:
        return TraceReadError(f"{path}: the file is empty (0 bytes); copy it again or "
                              "re-export it")
    if head is not None and head != MAGIC and place is None:
        return TraceReadError(
            f"{path}: not a Parquet file (it does not start with Parquet's magic bytes); check "
            "the file, or pass --input-format if it holds another format"
        )
    if head == MAGIC and tail is not None and tail != MAGIC:
        return TraceReadError(
            f"{path}: the Parquet file is cut short (its footer is missing); copy it again or "
            "re-export the trace"
        )
    return TraceReadError(
        f"{where(path, place, column)}: the Parquet file is damaged ({reason}); copy it again "
        "or re-export the trace"
    )


def _ends(path: Path) -> tuple[bytes | None, bytes | None]:
    """The first and last four bytes of a plain file (None when it cannot be read)."""
    try:
        if codec_of(path) is not None:
            return None, None
        with path.open("rb") as fh:
            head = fh.read(4)
            fh.seek(0, 2)
            if fh.tell() < 8:
                return head, b""
            fh.seek(-4, 2)
            return head, fh.read(4)
    except (OSError, YaotuError):
        return None, None


def source(path: str | Path) -> Any:
    """What pyarrow should open: the path of a plain file, or a compressed one's bytes."""
    path = Path(path)
    if codec_of(path) is None:
        return str(path)

    return pa.BufferReader(read_bytes(path))


def open_file(path: str | Path, **options: Any) -> Any:
    """A `pyarrow.parquet.ParquetFile` with page checksums verified; damage is an error, and
    so is a column name that appears twice."""
    # NOTE: imported here: pyarrow.parquet brings pyarrow's file systems (9 ms), which a run
    # that opens no Parquet file never needs.
    import pyarrow.parquet as pq

    with reading(path):
        file = pq.ParquetFile(source(path), page_checksum_verification=True, **options)
    check_unique_names(path, file.schema_arrow.names)
    return file


def read_table(path: str | Path, columns: list[str] | None = None) -> Any:
    """The file (or some columns) as one Arrow table; damage names the row group and column."""
    file = open_file(path)
    try:
        with reading(path):
            return file.read(columns=columns)
    except TraceReadError:
        _locate(path, file, columns)
        raise


def _locate(path: str | Path, file: Any, columns: list[str] | None) -> None:
    """Read row group by row group, column by column, to raise the error with its place."""
    names = columns if columns is not None else file.schema_arrow.names
    for group in range(file.metadata.num_row_groups):
        for column in names:
            with reading(path, f"row group {group + 1} of {file.metadata.num_row_groups}",
                         column):
                file.read_row_group(group, columns=[column])


def to_frame(table: Any, **options: Any) -> Any:
    """`table.to_pandas(**options)`, also for a file pandas itself cannot read back.

    pandas records each column's dtype in the file's metadata; for an Arrow-backed list column
    it writes `large_list<element: int64>[pyarrow]`, a name it then refuses to parse. The
    metadata only restores dtypes and the index, so such a table is converted without it.
    """
    try:
        return table.to_pandas(**options)
    except TypeError as err:
        if "not understood" not in str(err):
            raise
        return table.to_pandas(ignore_metadata=True, **options)


def give_back_read_memory() -> None:
    """Return to the system the memory a large read left free: pyarrow's pool keeps what it
    freed for the next read, and glibc's heap keeps freed small blocks. After reading the
    scalar columns of 2.4 M requests (1e10 prompt tokens), 460 MiB of 800 came back; the
    passes that follow allocate large numpy arrays, which glibc maps afresh rather than
    drawing from either. Costs a few milliseconds; a no-op where glibc is absent."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim() -> Any:
    """glibc's `malloc_trim` from the symbols this process has loaded, or None (macOS, musl,
    Windows)."""
    import ctypes

    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):
        return None
