"""The engine step log (`--steps`): held in memory, or left on disk and read in record batches.

A fleet-week step log has billions of rows (one per scheduler iteration). A Parquet step log
whose rows are already in start order (start_s non-decreasing, none missing) stays on disk:
every consumer reads it with `StepLog.batches`, one record batch of at most `BATCH_ROWS` rows
and only the columns it asks for, and keeps only per-instance or fixed-size state. Other step
logs (JSONL, CSV, Parquet out of start order) are read whole, validated and sorted stably by
start_s, as they always were, and handed out in chunks of the same size.

Both kinds yield the same rows in the same order with the same dtypes (`validate_steps`
checks each batch; errors name the file, the row of the whole file and the column), so a
consumer whose result does not depend on where the batches are cut (per-instance carries,
`order_stats` sums and percentiles, counts, extremes) reports the same numbers either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa

from yaotu_trace.data import parquet_file
from yaotu_trace.data.order_stats import Summary, summarize
from yaotu_trace.data.parquet_file import reading
from yaotu_trace.data.values import (
    SOURCE_ROW,
    check_unique_names,
    coerce_numeric,
    fail_at,
    plain_number,
)
from yaotu_trace.errors import TraceReadError, TraceSchemaError, where

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.parquet as pq

# The step log's columns (docs/schema.md, "Step log"); a log needs at least a start and an end.
STEP_COLUMNS: Final = (
    "instance",
    "start_s",
    "end_s",
    "prefill_tokens",
    "decode_tokens",
    "num_running",
    "num_waiting",
    "kv_blocks_used",
    "kv_blocks_total",
    "kv_usage",
    "num_preempted",
    "num_readmitted",
    "recomputed_tokens",
    "head_blocks_needed",
    "kv_blocks_free",
)
STEP_REQUIRED: Final = ("start_s", "end_s")
# The columns a step's KV usage comes from: its blocks in use over the pool's, or the engine's
# own share (`kv_usage`, vLLM's `kv_cache_usage`) where the log does not count blocks.
KV_USAGE_COLUMNS: Final = ("kv_blocks_used", "kv_blocks_total", "kv_usage")
# The columns a step's preemptions come from: preempted in it, else readmitted after one in it
# (vLLM's statistics count a preemption when the request comes back: right in total, late in
# time, so only `num_preempted` places a preemption at its step's KV usage).
PREEMPTION_COLUMNS: Final = ("num_preempted", "num_readmitted")
# Step columns that hold a share or a time rather than a count.
_REAL_COLUMNS: Final = ("start_s", "end_s", "kv_usage")


BATCH_ROWS = 1 << 18  # rows per record batch (10 columns: about 20 MB as a DataFrame)


@dataclass(frozen=True, slots=True, eq=False)
class StepLog:
    """A validated step log: an in-memory frame, or a Parquet file in start order on disk.

    `columns` are the step columns the log carries (in `STEP_COLUMNS` order); `has` says
    whether one holds at least one value, `complete` whether one has a value in every row.
    Rows come out of `batches` in start order.
    """

    path: str
    columns: tuple[str, ...]
    num_rows: int
    present: frozenset[str]
    filled: frozenset[str] = frozenset()
    # (lo, hi) s: only steps that overlap it are read (`within`); None reads every step.
    window: tuple[float, float] | None = None
    _frame: pd.DataFrame | None = field(default=None, repr=False)
    # Samples summarised once and shared by the passes that need them (`summary`).
    _summaries: dict[str, Summary] = field(default_factory=dict, repr=False)

    @classmethod
    def of_frame(cls, frame: pd.DataFrame, path: str) -> StepLog:
        """A step log held in memory, from a frame `validate_steps` returned."""
        columns = tuple(c for c in STEP_COLUMNS if c in frame.columns)
        present = frozenset(c for c in columns if bool(frame[c].notna().any()))
        filled = frozenset(c for c in columns if bool(frame[c].notna().all()))
        return cls(path=path, columns=columns, num_rows=len(frame), present=present,
                   filled=filled, _frame=frame)

    @classmethod
    def from_frame(cls, raw: pd.DataFrame, path: str) -> StepLog:
        """Validate a raw step table (as a reader returns it) and hold it in memory."""
        return cls.of_frame(validated(raw, path), path)

    @property
    def streamed(self) -> bool:
        """Whether the rows stay on disk and are read batch by batch."""
        return self._frame is None

    def has(self, column: str) -> bool:
        """Whether the log has `column` with at least one value."""
        return column in self.present

    def has_preemptions(self) -> bool:
        """Whether some step counts preemptions (`PREEMPTION_COLUMNS`)."""
        return any(self.has(c) for c in PREEMPTION_COLUMNS)

    def has_kv_usage(self) -> bool:
        """Whether some step has a KV usage (`kv_usage`, or blocks used and the pool's)."""
        return self.has("kv_usage") or (self.has("kv_blocks_used")
                                        and self.has("kv_blocks_total"))

    def complete(self, column: str) -> bool:
        """Whether `column` has a value in every row (False when unsure)."""
        return column in self.filled

    def summary(self, name: str, columns: Iterable[str],
                values: Callable[[pd.DataFrame], np.ndarray],
                percentiles: Iterable[float] = ()) -> Summary:
        """`order_stats.summarize` of a per-step sample (`values` of each batch), computed
        once per log and `name`: analyzers that share a sample (KV usage) share its passes,
        so they must ask for the same percentiles."""
        found = self._summaries.get(name)
        if found is None:
            found = self._summaries[name] = summarize(self.reader(columns, values),
                                                      percentiles)
        return found

    def batches(self, columns: Iterable[str] = ()) -> Iterator[pd.DataFrame]:
        """Validated batches of the log in start order: start_s, end_s and those of `columns`
        the log carries (others are left out), at most `BATCH_ROWS` rows each."""
        asked = set(columns) | set(STEP_REQUIRED)
        wanted = [c for c in self.columns if c in asked]
        if self._frame is not None:
            for lo in range(0, self.num_rows, BATCH_ROWS):
                yield self._frame.iloc[lo:lo + BATCH_ROWS][wanted]
            return

        row = 0
        with reading(self.path):
            batches = _open(Path(self.path)).iter_batches(columns=wanted, batch_size=BATCH_ROWS)
        while True:
            with reading(self.path, f"rows from {row + 1}"):
                batch = next(batches, None)
            if batch is None:
                return
            frame = _read_batch(batch, self.path, row)
            row += batch.num_rows
            if self.window is not None:
                frame = frame[_overlapping(frame, self.window)]
            yield frame

    def span(self) -> tuple[float, float] | None:
        """(first start_s, last end_s) of the log, or None when it has no step.

        Cheap for a streamed log: its first row holds the first start (rows are in start
        order) and the Parquet statistics the largest end_s; a pass over end_s alone when a
        row group lacks them.
        """
        if self._frame is not None or self.window is not None:
            lo, hi = math.inf, -math.inf
            for batch in self.batches():
                if len(batch):
                    lo = min(lo, float(batch["start_s"].iloc[0]))
                    hi = max(hi, float(batch["end_s"].max()))
            return None if lo > hi else (lo, hi)

        with reading(self.path):
            file = _open(Path(self.path))
            first = next(file.iter_batches(columns=["start_s"], batch_size=1), None)
        if first is None or first.num_rows == 0:
            return None
        lo = float(first.column(0)[0].as_py())
        stats_hi = _statistics_max(file.metadata, "end_s")
        hi = -math.inf if stats_hi is None else stats_hi
        if stats_hi is None:
            for batch in self.batches():
                if len(batch):
                    hi = max(hi, float(batch["end_s"].max()))
        return lo, hi

    def within(self, lo: float, hi: float) -> StepLog:
        """The steps that overlap [lo, hi] s (end_s >= lo and start_s <= hi), in start order."""
        if self._frame is not None:
            kept = self._frame[_overlapping(self._frame, (lo, hi))].reset_index(drop=True)
            return StepLog.of_frame(kept, self.path)
        windowed = StepLog(path=self.path, columns=self.columns, num_rows=0,
                           present=self.present, filled=self.filled, window=(lo, hi))
        rows = sum(len(b) for b in windowed.batches())
        return StepLog(path=self.path, columns=self.columns, num_rows=rows,
                       present=self.present, filled=self.filled, window=(lo, hi))

    def instances(self) -> frozenset[str]:
        """The instance ids the log names (none when it has no instance column)."""
        if "instance" not in self.columns:
            return frozenset()
        names: set[str] = set()
        for batch in self.batches(("instance",)):
            names.update(str(v) for v in batch["instance"].dropna().unique())
        return frozenset(names)

    def reader(self, columns: Iterable[str],
               values: Callable[[pd.DataFrame], np.ndarray]) -> Callable[[], Iterator[np.ndarray]]:
        """A sample of one value per step for `order_stats.summarize`: each call of the result
        is a new pass over the log, yielding `values` of each batch."""
        wanted = tuple(columns)

        def read() -> Iterator[np.ndarray]:
            for batch in self.batches(wanted):
                yield values(batch)

        return read

    def frame(self) -> pd.DataFrame:
        """The whole log as one validated frame, in start order. Reads a streamed log into
        memory: only for consumers that need every row at once (`--calibrate` fits a model)."""
        if self._frame is not None:
            return self._frame

        names = _names(Path(self.path))
        columns = [c for c in names or () if c in STEP_COLUMNS] or None
        raw = parquet_file.read_table(self.path, columns=columns).to_pandas()
        whole = validated(raw, self.path)
        if self.window is not None:
            whole = whole[_overlapping(whole, self.window)].reset_index(drop=True)
        return whole


# Step counts are int64: a value at or beyond 2**63 would wrap around.
_INT64_LIMIT = 2.0**63


def validated(raw: pd.DataFrame, path: str, first_row: int | None = None) -> pd.DataFrame:
    """`validate_steps`, plus what a step log needs beyond it: counts within int64
    (a larger value would wrap to a negative one) and a start and an end in every step.

    Whole logs (`first_row` None) come back sorted stably by start_s; a batch stays in file
    order. Errors name the file, the row of the whole file and the column.
    """
    import pandas as pd

    offset = 0 if first_row is None else first_row

    def row_of(pos: int) -> str:
        if SOURCE_ROW in raw.columns:
            return f"row {int(raw[SOURCE_ROW].iloc[pos])}"
        return f"row {offset + pos + 1}"

    for name in STEP_COLUMNS:
        if name in ("instance", "start_s", "end_s") or name not in raw.columns:
            continue
        values = pd.to_numeric(raw[name], errors="coerce")
        number = np.asarray(values, dtype=np.float64)
        huge = np.flatnonzero(np.isfinite(number) & (np.abs(number) >= _INT64_LIMIT))
        if huge.size:
            pos = int(huge[0])
            raise TraceSchemaError(
                f"{where(path, row_of(pos), name)}: {raw[name].iloc[pos]} is beyond the 64-bit "
                "integer range; give a count below 9.2e18"
            )
    frame = validate_steps(raw, path, first_row=offset)
    for name in STEP_REQUIRED:
        missing = np.flatnonzero(frame[name].isna().to_numpy())
        if missing.size:
            pos = int(missing[0])
            value = raw[name].iloc[pos]
            shown = "missing" if np.ndim(value) == 0 and pd.isna(value) else f"{value!r}, "\
                "not a number"
            raise TraceSchemaError(
                f"{where(path, row_of(pos), name)}: {shown}; every step needs its start_s and "
                "end_s in seconds"
            )
    if first_row is not None:
        return frame
    return frame.sort_values("start_s", kind="stable").reset_index(drop=True)


def _overlapping(frame: pd.DataFrame, window: tuple[float, float]) -> np.ndarray:
    """Rows of a step frame whose [start_s, end_s] overlaps `window`."""
    lo, hi = window
    start = frame["start_s"].to_numpy(dtype=np.float64)
    end = frame["end_s"].to_numpy(dtype=np.float64)
    return (end >= lo) & (start <= hi)


def _read_batch(batch: pa.RecordBatch, path: str, first_row: int) -> pd.DataFrame:
    """A record batch as a validated frame; a value Arrow cannot convert is a one-line error."""
    try:
        frame = batch.to_pandas()
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        raise TraceReadError(
            f"{path}: rows {first_row + 1}–{first_row + batch.num_rows}: cannot convert "
            f"the step log ({exc}); write each step column as a number"
        ) from exc
    return validated(frame, path, first_row)


def column(batch: pd.DataFrame, name: str, fill: float = np.nan) -> np.ndarray:
    """A column of a batch as float64, missing values as `fill`."""
    return batch[name].to_numpy(dtype=np.float64, na_value=fill)


def preemptions(batch: pd.DataFrame) -> np.ndarray:
    """Each step's preemptions: `num_preempted`, else `num_readmitted` (0 where neither is)."""
    for name in PREEMPTION_COLUMNS:
        if name in batch.columns:
            return column(batch, name, 0.0)
    return np.zeros(len(batch))


def kv_usage(batch: pd.DataFrame) -> np.ndarray:
    """kv_blocks_used / kv_blocks_total per step, else its `kv_usage` (NaN where neither is
    there or the pool size is not positive). `batch` holds the `KV_USAGE_COLUMNS` it has."""
    usage = np.full(len(batch), np.nan)
    if "kv_blocks_used" in batch.columns and "kv_blocks_total" in batch.columns:
        total = column(batch, "kv_blocks_total")
        usage = column(batch, "kv_blocks_used") / np.where(total > 0, total, np.nan)
    if "kv_usage" in batch.columns:
        usage = np.where(np.isfinite(usage), usage, column(batch, "kv_usage"))
    return usage


# Percentiles of the KV usage per step that the queueing (P75) and memory (P95) axes report.
KV_USAGE_PERCENTILES = (75, 95)


def kv_usage_summary(log: StepLog) -> Summary:
    """The KV usage of every step with a finite one, summarised once for both axes."""
    return log.summary("kv_usage", KV_USAGE_COLUMNS, kv_usage,
                       KV_USAGE_PERCENTILES)


class InstanceIds:
    """Dense ids for the instances of a step log, stable across batches and passes.

    A step with no instance (or a log without the column) belongs to instance "all". Ids are
    given in order of first appearance, so per-instance state lives in arrays indexed by id.
    """

    def __init__(self) -> None:
        self._id: dict[str, int] = {}
        self.names: list[str] = []

    def __len__(self) -> int:
        return len(self.names)

    def id_of(self, name: str) -> int:
        """The id of instance `name` (a new one if not seen before)."""
        found = self._id.get(name)
        if found is None:
            found = self._id[name] = len(self.names)
            self.names.append(name)
        return found

    def get(self, name: str) -> int | None:
        """The id of instance `name`, or None if no step so far ran on it."""
        return self._id.get(name)

    def codes(self, batch: pd.DataFrame) -> np.ndarray:
        """The instance id of each row of a batch (int64)."""
        import pandas as pd

        if "instance" not in batch.columns:
            return np.full(len(batch), self.id_of("all"), dtype=np.int64)
        local, names = pd.factorize(batch["instance"], use_na_sentinel=True)
        ids = [self.id_of(str(n)) for n in names]
        if (local < 0).any():
            ids.append(self.id_of("all"))  # missing instances (code -1) take the last entry
        return np.asarray(ids, dtype=np.int64)[local]


def open_parquet(path: Path) -> StepLog | None:
    """The Parquet step log at `path` left on disk, or None to read it whole.

    It stays on disk when start_s is numeric, never missing or non-finite, and non-decreasing
    in file order, which one pass over start_s alone checks batch by batch. Which columns hold
    a value comes from the Parquet statistics (null counts, min/max), else from the same pass.
    Anything unusual (unreadable, no rows, missing start_s or end_s) is left to the whole
    read, which reports it.
    """
    try:
        file = _open(path)
        schema = file.schema_arrow
    except (pa.ArrowInvalid, OSError):
        return None
    check_unique_names(path, schema.names)
    meta = file.metadata
    if meta.num_rows == 0 or any(c not in schema.names for c in STEP_REQUIRED):
        return None
    start_type = schema.field("start_s").type
    if not (pa.types.is_integer(start_type) or pa.types.is_floating(start_type)):
        return None
    columns = tuple(c for c in STEP_COLUMNS if c in schema.names)
    present, filled, unknown = _from_statistics(meta, schema, columns)
    missing: set[str] = set()
    last = -math.inf
    read = list(dict.fromkeys(["start_s", *unknown]))
    batches = file.iter_batches(columns=read, batch_size=BATCH_ROWS)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError):  # a damaged page: the whole read names it
            return None
        if batch is None:
            break
        start_col = batch.column(0)
        if start_col.null_count:
            return None
        start = np.asarray(start_col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if start.size == 0:
            continue
        if (not np.isfinite(start).all() or start[0] < last
                or bool((start[1:] < start[:-1]).any())):
            return None
        last = float(start[-1])
        for name in unknown:
            known = batch.column(read.index(name)).to_pandas().notna()
            if bool(known.any()):
                present.add(name)
            if not bool(known.all()):
                missing.add(name)
    filled |= {c for c in unknown if c not in missing}
    return StepLog(path=str(path), columns=columns, num_rows=int(meta.num_rows),
                   present=frozenset(present), filled=frozenset(filled))


def _from_statistics(meta: pq.FileMetaData, schema: pa.Schema,
                     columns: tuple[str, ...]) -> tuple[set[str], set[str], list[str]]:
    """Columns the statistics show hold a value, those with no missing value, and those the
    statistics cannot decide.

    A row group with fewer nulls than rows and a min/max holds a value (min/max skip NaN);
    one with values but no min/max (all NaN, or statistics not written) is undecided. A column
    is complete when no row group has a null and it cannot hold NaN (integers, strings).
    """
    present: set[str] = set()
    filled: set[str] = set()
    unknown: list[str] = []
    leaf = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    for name in columns:
        j = leaf.get(name)
        state: bool | None = False if j is not None else None
        nulls = 0
        for i in range(meta.num_row_groups if j is not None else 0):
            group = meta.row_group(i)
            stats = group.column(j).statistics
            if stats is None or not stats.has_null_count:
                state = None
                break
            nulls += stats.null_count
            if stats.null_count >= group.num_rows:
                continue
            if not stats.has_min_max:
                state = None
                break
            state = True
        if state is None:
            unknown.append(name)
            continue
        if state:
            present.add(name)
        kind = schema.field(name).type
        if nulls == 0 and (pa.types.is_integer(kind) or pa.types.is_string(kind)
                           or pa.types.is_large_string(kind)):
            filled.add(name)
    return present, filled, unknown


def _statistics_max(meta: pq.FileMetaData, name: str) -> float | None:
    """The largest value of a numeric column from the Parquet statistics, or None when a row
    group with values lacks them."""
    leaf = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    j = leaf.get(name)
    if j is None:
        return None
    top = -math.inf
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        stats = group.column(j).statistics
        if stats is None or not stats.has_null_count:
            return None
        if stats.null_count >= group.num_rows:
            continue
        if not stats.has_min_max or not isinstance(stats.max, int | float):
            return None
        top = max(top, float(stats.max))
    return top if math.isfinite(top) else None


def _open(path: Path) -> pq.ParquetFile:
    """The file for reading record batches. NOTE: without `pre_buffer=False`, Arrow keeps the
    column chunks of every row group read so far: memory would grow with the file."""
    import pyarrow.parquet as pq  # its file systems cost 9 ms: only for a log on disk

    return pq.ParquetFile(path, pre_buffer=False)


def _names(path: Path) -> tuple[str, ...] | None:
    import pyarrow.parquet as pq

    try:
        return tuple(pq.ParquetFile(path).schema_arrow.names)
    except (pa.ArrowInvalid, OSError):
        return None


def validate_steps(df: pd.DataFrame, path: str, *, first_row: int | None = None) -> pd.DataFrame:
    """Validate an engine step log (one row per scheduler iteration), sorted stably by start_s.

    With `first_row` (0-based), `df` is one record batch, starting at that row, of a log already
    in start order (`yaotu_trace.data.steplog`): it is validated the same way but not sorted, and
    errors name the row of the whole file.
    """
    import pandas as pd

    if first_row is not None and SOURCE_ROW not in df.columns:
        df = df.assign(**{SOURCE_ROW: np.arange(first_row + 1, first_row + len(df) + 1)})
    missing = [c for c in STEP_REQUIRED if c not in df.columns]
    if missing:
        raise TraceSchemaError(
            f"{path}: step log is missing column(s) {', '.join(map(repr, missing))}; "
            f"a step log has {', '.join(STEP_COLUMNS)}"
        )
    out: dict[str, pd.Series] = {}
    for column in STEP_COLUMNS:
        if column not in df.columns:
            continue
        if column == "instance":
            out[column] = df[column].astype("string")
        else:
            integer = column not in _REAL_COLUMNS
            number = plain_number(df[column], integer=integer)
            out[column] = (number if number is not None
                           else coerce_numeric(df, column, path, "row", integer=integer))
    steps = pd.DataFrame(out)
    bad = np.flatnonzero((steps["end_s"] < steps["start_s"]).to_numpy())
    if bad.size:
        fail_at(path, df, int(bad[0]), "row", "end_s", "step ends before it starts")
    if "kv_usage" in steps.columns:
        share = steps["kv_usage"].to_numpy(dtype=np.float64, na_value=0.0)
        bad = np.flatnonzero((share < 0) | (share > 1))
        if bad.size:
            fail_at(path, df, int(bad[0]), "row", "kv_usage",
                    f"{share[bad[0]]} is not a share of the pool; write kv_usage from 0 "
                    "to 1, as vLLM's kv_cache_usage (a full pool is 1)")
    if first_row is not None:
        return steps
    return steps.sort_values("start_s", kind="stable").reset_index(drop=True)
