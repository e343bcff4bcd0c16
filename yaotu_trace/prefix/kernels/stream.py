"""Streaming replay input: a Parquet token column read row group by row group.

A trace of 1e9 tokens is 4–8 GB of token ids but only ~6e7 blocks at B = 16. `ParquetPrompts`
reads the content column (`prompt_tokens` or `prompt_block_ids`) one row group at a time (cut
into record batches when a group is large), keeps Arrow's own integer width
(int32 tokens stay int32), and hands out validated batches: `blocks.build_block_chains_streaming`
hashes each into the chains as it comes, so only block-level arrays and one batch of ids are
ever held. Reader threads decode the next row groups while the current batch is hashed (pyarrow
and the kernels release the GIL): decoding is most of a pass, so two readers share it, each
with its own file handle, and the batches come out in file order. Nothing here imports numba:
a small trace's overview reads its batches with the numpy passes.

The same batches serve the ideal pass of the waterfall (`ideal.ideal_hit_tokens_streaming`).
Validation that `normalize` does for in-memory list columns happens here, per batch: ids
that are whole numbers within int64 (`schema.list_value_problem`), list lengths against
`prompt_len` and token ids >= 0. A damaged page is a `TraceReadError` naming its row group.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
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
# Row groups of at most this many ids are read whole, by one reader each.
WHOLE_GROUP_VALUES = 4 * BATCH_VALUES
# Reader threads decoding row groups side by side (each a file handle), and how many row
# groups may be decoded ahead of the one being hashed.
READERS = 2
GROUPS_AHEAD = 4


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
        """Validated record batches in file order, decoded ahead on reader threads; the
        readers' memory is given back once the last is read.

        A column of a few batches is read on this thread: nothing to overlap. Row groups that
        are read whole go to `READERS` threads side by side; a file with a larger one is read
        in file order by one thread, batch by batch.
        """
        if self.num_values <= 2 * BATCH_VALUES:
            yield from self._read()
            return
        pf = parquet_file.open_file(self.path, pre_buffer=False)
        meta = pf.metadata
        leaf = self._leaf(meta)
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        readers = min(READERS, os.cpu_count() or 1)
        if readers < 2 or len(groups) < 2 or any(
                g.column(leaf).num_values > WHOLE_GROUP_VALUES for g in groups):
            yield from _prefetched(self._read())
            parquet_file.give_back_read_memory()
            return
        starts = np.concatenate(([0], np.cumsum([g.num_rows for g in groups])))
        handles = threading.local()

        def group(i: int) -> list[Batch]:
            if not hasattr(handles, "file"):
                handles.file = parquet_file.open_file(self.path, pre_buffer=False)
            batches, row0 = [], int(starts[i])
            for arr in self._group_arrays(handles.file, i, meta.num_row_groups):
                batches.append(self._batch(row0, arr))
                row0 += len(arr)
            return batches

        yield from _in_order(group, len(groups), readers, GROUPS_AHEAD)
        self._check_rows(int(starts[-1]))
        # The pool keeps the decoded batches' memory for another read (0.3 GiB after a pass
        # over the 1e9-token trace): a pass over the whole file gives it back for the next.
        parquet_file.give_back_read_memory()

    def _read(self) -> Iterator[Batch]:
        row0 = 0
        for arr in self._arrays():
            batch = self._batch(row0, arr)
            yield batch
            row0 += len(batch.offsets) - 1
        self._check_rows(row0)

    def _check_rows(self, rows: int) -> None:
        if rows != len(self.prompt_len):
            raise TraceSchemaError(f"{self.path}: column '{self.column}' has {rows} rows, the "
                                   f"trace {len(self.prompt_len)}; the file changed while read")

    def _batch(self, row0: int, arr: Any) -> Batch:
        """One Arrow list array of the column, checked, as a `Batch` of requests from `row0`."""
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
        return Batch(row0=row0, offsets=frozen_input(local, np.int64),
                     values=frozen_input(values, values.dtype))

    def _leaf(self, meta: Any) -> int:
        return next(j for j in range(meta.num_columns)
                    if meta.schema.column(j).path.split(".")[0] == self.column)

    def _group_arrays(self, pf: Any, i: int, groups: int) -> list[Any]:
        """Row group `i`, read whole, as its list arrays in row order."""
        with parquet_file.reading(self.path, f"row group {i + 1} of {groups}", self.column):
            table = pf.read_row_group(i, columns=[self.column], use_threads=False)
        return list(table.column(0).chunks)

    def _arrays(self) -> Iterator[Any]:
        """The content column as Arrow list arrays of about `BATCH_VALUES` ids, in row order.

        Row groups of moderate size are read whole (`read_row_group`): flat memory and faster
        than `iter_batches`. Larger row groups are cut into record batches of that one group,
        with pre-buffering off: with it the reader keeps every decoded batch allocated.
        """
        pf = parquet_file.open_file(self.path, pre_buffer=False)
        meta = pf.metadata
        leaf = self._leaf(meta)
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            if group.column(leaf).num_values <= WHOLE_GROUP_VALUES:
                yield from self._group_arrays(pf, i, meta.num_row_groups)
                continue
            # A damaged page is reported with its row group and column, however late it is met.
            with parquet_file.reading(self.path, f"row group {i + 1} of {meta.num_row_groups}",
                                      self.column):
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


def _in_order(job: Callable[[int], list[Batch]], jobs: int, workers: int,
              ahead: int) -> Iterator[Batch]:
    """The batches of job(0), job(1), … in that order, the jobs run on `workers` threads at
    most `ahead` jobs past the one being consumed; a job's error re-raises here, in order."""
    cond = threading.Condition()
    done: dict[int, list[Batch] | BaseException] = {}
    state = {"next": 0, "consumed": 0, "stop": False}

    def work() -> None:
        while True:
            with cond:
                while (not state["stop"] and state["next"] < jobs
                       and state["next"] >= state["consumed"] + ahead):
                    cond.wait()
                if state["stop"] or state["next"] >= jobs:
                    return
                j = state["next"]
                state["next"] += 1
            try:
                out: list[Batch] | BaseException = job(j)
            except BaseException as exc:  # re-raised by the consumer, in file order
                out = exc
            with cond:
                done[j] = out
                cond.notify_all()

    threads = [threading.Thread(target=work, name=f"parquet-reader-{w}", daemon=True)
               for w in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for j in range(jobs):
            with cond:
                while j not in done:
                    cond.wait()
                out = done.pop(j)
                state["consumed"] = j + 1
                cond.notify_all()
            if isinstance(out, BaseException):
                raise out
            yield from out
    finally:
        with cond:
            state["stop"] = True
            cond.notify_all()
        for thread in threads:
            thread.join()
