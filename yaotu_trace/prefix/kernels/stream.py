"""Streaming replay input: a Parquet token column read row group by row group.

A trace of 1e9 tokens is 4–8 GB of token ids but only ~6e7 blocks at B = 16. `ParquetPrompts`
reads the content column (`prompt_tokens` or `prompt_block_ids`) one row group at a time (cut
into record batches when a group is large), keeps Arrow's own integer width
(int32 tokens stay int32), and hands out validated batches: `blocks.build_block_chains_streaming`
hashes each into the chains as it comes, so only block-level arrays and one batch of ids are
ever held. A reader thread decodes the next batch while the current one is hashed (pyarrow and
the kernels release the GIL), so decoding and hashing overlap on two cores. Nothing here
imports numba: a small trace's overview reads its batches with the numpy passes.

The same batches serve the ideal pass of the waterfall (`ideal.ideal_hit_tokens_streaming`).
Validation that `normalize` does for in-memory list columns happens here, per batch: ids
that are whole numbers within int64 (`schema.list_value_problem`), list lengths against
`prompt_len` and token ids >= 0. A damaged page is a `TraceReadError` naming its row group.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from yaotu_trace.data import parquet_file
from yaotu_trace.data.schema import list_value_problem
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.prefix.kernels.chains import frozen_input, offsets_of

# Ids per record batch: large enough to amortise per-batch costs, small enough to stay a few
# tens of MB (one batch is decoded while the previous one is hashed).
BATCH_VALUES = 4_000_000


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch of the content column: requests `row0 .. row0 + n − 1`."""

    row0: int
    offsets: np.ndarray  # int64 n+1, local to `values`
    values: np.ndarray  # int32 or int64, read-only


@dataclass(slots=True, kw_only=True)
class ParquetPrompts:
    """The prompt content column of a canonical Parquet file, read on demand.

    `unit_offsets` (int64, n+1: ids per request) is filled by the first full pass, so later
    consumers (notes, the ideal pass) need no extra read for it.
    """

    path: str
    column: str
    prompt_len: np.ndarray  # int64 per request (file order = replay order)
    source_block_size: int | None
    num_values: int
    unit_offsets: np.ndarray | None = field(default=None)

    def batches(self) -> Iterator[Batch]:
        """Validated record batches in file order, decoded one ahead on a reader thread.

        A column of a few batches is read on this thread: nothing to overlap.
        """
        if self.num_values <= 2 * BATCH_VALUES:
            yield from self._read()
        else:
            yield from _prefetched(self._read())

    def _read(self) -> Iterator[Batch]:
        row0 = 0
        for arr in self._arrays():
            problem = list_value_problem(arr.flatten(), self.column)
            if problem is not None:  # 1.5 or 2**64 - 1 would be cast to another id silently
                rows = pa.compute.list_parent_indices(arr).to_numpy()
                self._fail(row0 + int(rows[problem[0]]), self.column, problem[1])
            valid = None
            if arr.null_count:
                valid = np.asarray(arr.is_valid())
                arr = arr.fill_null(pa.scalar([], type=arr.type))
            offsets = np.asarray(arr.offsets)
            first, last = int(offsets[0]), int(offsets[-1])
            values = arr.values.to_numpy(zero_copy_only=False)[first:last]
            if values.dtype not in (np.int32, np.int64) or (
                    values.dtype == np.int32 and self.source_block_size is not None):
                values = values.astype(np.int64)  # negative block ids stay exact as int64
            local = offsets.astype(np.int64) - first
            self._validate(row0, np.diff(local), values, valid)
            yield Batch(row0=row0, offsets=frozen_input(local, np.int64),
                        values=frozen_input(values, values.dtype))
            row0 += len(local) - 1
        if row0 != len(self.prompt_len):
            raise TraceSchemaError(f"{self.path}: column '{self.column}' has {row0} rows, the "
                                   f"trace {len(self.prompt_len)}; the file changed while read")

    def _arrays(self) -> Iterator[Any]:
        """The content column as Arrow list arrays of about `BATCH_VALUES` ids, in row order.

        Row groups of moderate size are read whole (`read_row_group`): flat memory and faster
        than `iter_batches`. Larger row groups are cut into record batches of that one group,
        with pre-buffering off: with it the reader keeps every decoded batch allocated.
        """
        pf = parquet_file.open_file(self.path, pre_buffer=False)
        meta = pf.metadata
        leaf = next(j for j in range(meta.num_columns)
                    if meta.schema.column(j).path.split(".")[0] == self.column)
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            # A damaged page is reported with its row group and column, however late it is met.
            with parquet_file.reading(self.path, f"row group {i + 1} of {meta.num_row_groups}",
                                      self.column):
                if group.column(leaf).num_values <= 4 * BATCH_VALUES:
                    table = pf.read_row_group(i, columns=[self.column], use_threads=False)
                    yield from table.column(0).chunks
                    continue
                per_row = max(1.0, group.column(leaf).num_values / max(1, group.num_rows))
                rows = int(max(16, min(65_536, BATCH_VALUES / per_row)))
                for record in pf.iter_batches(batch_size=rows, row_groups=[i],
                                              columns=[self.column], use_threads=False):
                    yield record.column(0)

    def _validate(self, row0: int, lengths: np.ndarray, values: np.ndarray,
                  valid: np.ndarray | None) -> None:
        """The checks `normalize` applies to an in-memory content column (nulls are skipped)."""
        n = len(lengths)
        plen = self.prompt_len[row0:row0 + n]
        has = np.ones(n, dtype=bool) if valid is None else valid
        size = self.source_block_size
        if size is None:
            bad = np.flatnonzero(has & (lengths != plen))
            if bad.size:
                pos = int(bad[0])
                self._fail(row0 + pos, "prompt_len",
                           f"{plen[pos]} disagrees with the {lengths[pos]} ids in "
                           f"'{self.column}'; fix the length or the token list")
            if values.size and int(values.min()) < 0:
                neg = int(np.flatnonzero(values < 0)[0])
                pos = int(np.searchsorted(np.cumsum(lengths), neg, side="right"))
                self._fail(row0 + pos, self.column, "token ids must be >= 0")
        else:
            low, high = plen // size, -(-plen // size)
            bad = np.flatnonzero(has & ((lengths < low) | (lengths > high)))
            if bad.size:
                pos = int(bad[0])
                self._fail(row0 + pos, self.column,
                           f"{lengths[pos]} ids cannot cover prompt_len {plen[pos]} at {size} "
                           f"tokens per id (expected {low[pos]} or {high[pos]}); "
                           "check --source-block-size")

    def _fail(self, row: int, column: str, msg: str) -> None:
        raise TraceSchemaError(f"{self.path}: row {row + 1}, column '{column}': {msg}")

    def offsets(self) -> np.ndarray:
        """Ids per request as int64 offsets (n+1); one pass over the file if not yet known."""
        if self.unit_offsets is None:
            lengths = np.zeros(len(self.prompt_len), dtype=np.int64)
            for batch in self.batches():
                lengths[batch.row0:batch.row0 + len(batch.offsets) - 1] = np.diff(batch.offsets)
            self.unit_offsets = offsets_of(lengths)
        return self.unit_offsets


_DONE = object()


def _prefetched(source: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """Run `source` on a thread, `depth` items ahead; its errors re-raise here."""
    box: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        box.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            box.put(_DONE)
        except BaseException as exc:
            box.put(exc)

    thread = threading.Thread(target=work, name="parquet-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = box.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)
