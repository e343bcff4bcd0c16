"""The canonical request table: column names, dtypes, validation and the `Trace` value.

Every reader produces a `RawTrace` with canonical column names; `normalize` validates it once,
at the boundary, coerces dtypes, sorts by arrival (stably) and records data-quality notes.
Everything downstream trusts a `Trace`. A clean Mooncake file is read without pandas
(`ingest.traces.mooncake.read_clean`): its `Trace` holds numpy `Columns` and makes the pandas
table only when a pass asks for `requests`, so pandas is imported here only where a function
needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

import numpy as np
import pyarrow as pa

from yaotu_trace.data.values import (
    INT64_LIMIT,
    TIME_FIX,
    TIME_LIMIT_S,
    clock_gap,
    coerce_numeric,
    fail_at,
    locate,
    names_of,
    shown,
)
from yaotu_trace.errors import TraceSchemaError

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.data.steplog import StepLog

# Scalar columns and their canonical dtypes. Strings use pandas' string dtype.
STRING_COLUMNS: Final = (
    "request_id",
    "tenant",
    "model",
    "adapter",
    "session_id",
    "instance",
    "prefill_instance",
    "decode_instance",
    "error",
)
# A request's outcome; a missing value means the source did not say, read as "ok".
STATUS_VALUES: Final = ("ok", "error", "aborted", "timeout", "rejected")
INT_COLUMNS: Final = ("prompt_len", "output_len", "num_preemptions", "cached_tokens")
FLOAT_COLUMNS: Final = ("arrival_s", "scheduled_s", "first_token_s", "finish_s",
                        "decode_start_s", "kv_transfer_s")
LIST_COLUMNS: Final = ("prompt_tokens", "prompt_block_ids", "output_tokens", "token_times_s")
# The columns that are times on the trace's clock (kv_transfer_s is a duration).
CLOCK_COLUMNS: Final = ("arrival_s", "scheduled_s", "first_token_s", "finish_s",
                        "decode_start_s")
REQUIRED_COLUMNS: Final = ("arrival_s", "prompt_len", "output_len")
LENGTHS_ONLY_NOTE: Final = (
    "lengths-only table (no timestamp column): the profile gives lengths and population only; "
    "the arrival and timing sections need a timestamp column (arrival_s, or --map "
    "arrival_s=<source column>)"
)
CANONICAL_COLUMNS: Final = (
    "request_id",
    "arrival_s",
    "tenant",
    "model",
    "adapter",
    "session_id",
    "instance",
    "prompt_len",
    "output_len",
    "prompt_tokens",
    "prompt_block_ids",
    "output_tokens",
    "scheduled_s",
    "first_token_s",
    "finish_s",
    "token_times_s",
    "num_preemptions",
    "cached_tokens",
    "prefill_instance",
    "decode_instance",
    "decode_start_s",
    "kv_transfer_s",
    "status",
    "error",
)
LIST_VALUE_TYPES: Final = {
    "prompt_tokens": pa.int64(),
    "prompt_block_ids": pa.int64(),
    "output_tokens": pa.int64(),
    "token_times_s": pa.float64(),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RawTrace:
    """What a reader returns: canonical column names, not yet validated.

    List columns may hold Python lists, NumPy arrays or Arrow lists. `row_label` says what the
    source calls a row ("line" for JSONL, "row" for CSV) so errors speak the user's language.
    """

    requests: pd.DataFrame
    format_name: str
    source_block_size: int | None = None
    row_label: str = "row"
    notes: tuple[str, ...] = ()
    # Canonical column -> the source's own name, so that errors name the column the user has.
    source_names: Mapping[str, str] = field(default_factory=dict)
    # Canonical time column -> the unit of its source column when not seconds ("ms", "us",
    # "ns"), which the reader divided by: an error on a time says so, not "convert to s".
    source_units: Mapping[str, str] = field(default_factory=dict)
    # The engine's steps when the capture itself records them (vllm-vcr's per-gap context), as
    # step-log columns on the trace's clock; `--steps FILE` takes their place when given.
    steps: pd.DataFrame | None = None
    steps_note: str | None = None  # what the trace says of them (how they were derived)
    engine_limits: EngineLimits | None = None  # what the capture says the engine ran with


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLimits:
    """The limits a capture says its engine ran with (None where it does not say): vLLM's
    registration reply in a vllm-vcr trace, say. The diagnosis takes each where no option
    (`--max-num-seqs`, `--max-batched-tokens`, `--kv-capacity`) gives it."""

    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    kv_capacity_tokens: int | None = None  # one instance's usable pool
    # vLLM's pool as it reports it, its null block included: what `--preset vllm --capacity`
    # takes to replay that pool.
    num_gpu_blocks: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LazyContent:
    """List columns of a canonical Parquet trace left on disk, for the replay to stream.

    Token columns are ~99 % of a trace's bytes; the replay reads them row group by row group and
    keeps only block-level arrays. Only set when the file's rows are already in arrival order,
    so file row i is request i. `num_values` (leaf values per column, from the Parquet
    metadata) is an upper bound on the ids, used to size tables before reading.
    Validation of these columns (lengths against `prompt_len`, token ids >= 0) happens while
    they are streamed.
    """

    path: str
    columns: tuple[str, ...]
    num_values: tuple[int, ...]

    def values_in(self, column: str) -> int:
        """Leaf values of `column` in the file (0 when it is not left on disk)."""
        return dict(zip(self.columns, self.num_values, strict=True)).get(column, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """A validated trace's canonical columns as numpy arrays, in arrival order, for a trace
    read without pandas (`ingest.traces.mooncake.read_clean`): scalar columns by name, list
    columns as (int64 offsets of n+1, int64 values). Every column has a value in every row.
    `names` are the canonical columns of the table `frame()` makes, the pandas table every
    other pass reads (validated by `normalize`, as a trace read the usual way)."""

    num_rows: int
    names: tuple[str, ...]
    scalars: Mapping[str, np.ndarray]
    lists: Mapping[str, tuple[np.ndarray, np.ndarray]]
    frame: Callable[[], pd.DataFrame]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A validated canonical request table, sorted by arrival (ties in file order).

    `requests` holds the canonical columns present in the source (list columns as Arrow-backed
    lists): the `table` given, or the one `columns` makes when first asked (a trace read
    without pandas). `source_block_size` is set when prompts are given as block ids rather than
    tokens: each id stands for that many tokens (the last id may cover a partial block).
    """

    table: pd.DataFrame | None = None
    columns: Columns | None = None
    path: str
    format_name: str
    source_block_size: int | None = None
    notes: tuple[str, ...] = ()
    rows_read: int = 0
    # False for a lengths-only table (no timestamp column, read by `trace analyze` only): its
    # `arrival_s` is 0 for every request, a placeholder no arrival or timing figure may use.
    has_arrivals: bool = True
    # The engine step log (`--steps`): in memory, or a Parquet file in start order read in
    # record batches (`yaotu_trace.data.steplog`).
    steps: StepLog | None = field(default=None)
    # List columns left on disk (`read_trace(..., lazy_content=True)`); not in `requests`.
    lazy: LazyContent | None = None
    # The engine's limits as the capture states them (`EngineLimits`; None: it does not).
    engine_limits: EngineLimits | None = None
    # Values derived from the trace once and shared by the passes that need them (e.g. the
    # inter-token gap summary, which reads the token times twice). Not copied by `replace`.
    derived: dict[str, object] = field(default_factory=dict, init=False, compare=False,
                                       repr=False)

    @property
    def requests(self) -> pd.DataFrame:
        """The canonical table (made from `columns` on first use, then kept)."""
        if self.table is not None:
            return self.table
        made = self.derived.get("requests")
        if made is None:
            assert self.columns is not None, "a Trace holds a table or columns"
            made = self.derived["requests"] = self.columns.frame()
        return cast("pd.DataFrame", made)

    @property
    def _arrays(self) -> Columns | None:
        """The columns of a trace read without pandas (None once it has a table)."""
        return self.columns if self.table is None else None

    @property
    def num_requests(self) -> int:
        """Requests in the trace."""
        arrays = self._arrays
        return len(self.requests) if arrays is None else arrays.num_rows

    def array(self, column: str, dtype: type = np.int64) -> np.ndarray:
        """A column every request has a value in (`arrival_s`, `prompt_len`, `output_len`) as
        a numpy array of `dtype`, without making the table of a trace read without pandas."""
        arrays = self._arrays
        if arrays is None:
            return self.requests[column].to_numpy(dtype=dtype)
        return np.asarray(arrays.scalars[column], dtype=dtype)

    def floats(self, column: str) -> np.ndarray | None:
        """A scalar column as float64 (NaN where a request has no value), or None when no
        request has one, without making the table of a trace read without pandas."""
        arrays = self._arrays
        if arrays is not None:
            if column not in arrays.scalars or not arrays.num_rows:
                return None
            return np.asarray(arrays.scalars[column], dtype=np.float64)
        table = self.requests
        if column not in table.columns or not table[column].notna().any():
            return None
        return table[column].to_numpy(dtype=np.float64, na_value=np.nan)

    def has(self, column: str) -> bool:
        """Whether the trace carries `column` with at least one value."""
        if self.lazy is not None and column in self.lazy.columns:
            return self.lazy.values_in(column) > 0
        arrays = self._arrays
        if arrays is not None:
            return column in arrays.names and arrays.num_rows > 0
        return column in self.requests.columns and bool(self.requests[column].notna().any())

    def _loaded_names(self) -> tuple[str, ...]:
        arrays = self._arrays
        return tuple(self.requests.columns) if arrays is None else arrays.names

    def is_lazy(self, column: str) -> bool:
        """Whether `column` is left on disk rather than loaded into `requests`."""
        return self.lazy is not None and column in self.lazy.columns

    @property
    def column_names(self) -> tuple[str, ...]:
        """Every canonical column of the trace, loaded or left on disk, in canonical order."""
        names = [c for c in self._loaded_names() if self.has_arrivals or c != "arrival_s"]
        if self.lazy is not None:
            names += [c for c in self.lazy.columns if c not in names]
        rank = {c: i for i, c in enumerate(CANONICAL_COLUMNS)}
        return tuple(sorted(names, key=lambda c: rank.get(c, len(rank))))

    @property
    def content_column(self) -> str | None:
        """The column carrying prompt content: token ids, block ids, or none (a column that
        holds no id, such as one missing in every row, carries none)."""
        names = set(self._loaded_names()) | set(self.lazy.columns if self.lazy else ())
        for column in ("prompt_tokens", "prompt_block_ids"):
            if column in names and self.has(column):
                return column
        return None


def series_arrow(series: pd.Series) -> pa.ChunkedArray:
    """The Arrow data of an Arrow-backed series."""
    return pa.chunked_array(series.array._pa_array)


def list_arrays(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Flatten an Arrow-backed list column into (offsets int64 of n+1, values).

    This is how the replay receives prompts: no Python objects per token.
    """
    chunked = pa.chunked_array(series.array._pa_array) if hasattr(series.array, "_pa_array") else (
        pa.chunked_array([pa.array(series.tolist())])
    )
    arr = chunked.combine_chunks()
    if isinstance(arr, pa.ListArray):
        arr = arr.cast(pa.large_list(arr.type.value_type))
    arr = arr.fill_null([]) if arr.null_count else arr
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    if offsets[0] != 0:
        values = values[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
    return offsets, values


def list_value_problem(values: pa.Array, column: str) -> tuple[int, str] | None:
    """The first of a list column's flattened values that the schema refuses, and why.

    Ids (`prompt_tokens`, `prompt_block_ids`, `output_tokens`) are whole numbers within int64:
    1.0 is 1, but 1.5, a value beyond int64, true, "a", a nested list or a missing value is
    refused rather than truncated or guessed. Token times are finite numbers (missing ones are
    allowed: they form no gap). Negative token ids are checked by the callers.
    """
    kind = values.type
    times = column == "token_times_s"
    if len(values) == 0 or (times and values.null_count == len(values)):
        return None
    if values.null_count and not times:
        pos = int(np.flatnonzero(~np.asarray(values.is_valid()))[0])
        return pos, "a value inside the list is missing; ids cannot be missing"
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        pos = int(np.flatnonzero(np.asarray(values.is_valid()))[0])
        what = "a nested list" if pa.types.is_nested(kind) else shown(values[pos].as_py())
        want = "numbers of seconds" if times else "whole numbers"
        return pos, f"{what} is not a number; list values must be {want}"
    if times:
        numbers = values.to_numpy(zero_copy_only=False)
        infinite = np.flatnonzero(np.isinf(numbers))
        if infinite.size:
            return int(infinite[0]), f"{numbers[infinite[0]]} is not finite; give a finite time"
        far = np.flatnonzero(np.abs(numbers) > TIME_LIMIT_S)
        if far.size:
            return int(far[0]), f"{numbers[far[0]]:g} s is beyond 1e12 s; {TIME_FIX}"
        return None
    if pa.types.is_signed_integer(kind):
        return None
    numbers = values.to_numpy(zero_copy_only=False)
    if pa.types.is_unsigned_integer(kind):
        beyond = np.flatnonzero(numbers > np.iinfo(np.int64).max)
        if beyond.size:
            return int(beyond[0]), f"{numbers[beyond[0]]} is beyond int64; ids must be below 2**63"
        return None
    bad = np.flatnonzero(~np.isfinite(numbers) | (numbers != np.round(numbers)))
    if bad.size:
        return int(bad[0]), f"{numbers[bad[0]]} is not a whole number; ids are integers"
    beyond = np.flatnonzero(np.abs(numbers) >= INT64_LIMIT)
    if beyond.size:
        return int(beyond[0]), f"{numbers[beyond[0]]:.17g} is beyond int64; ids must be below 2**63"
    return None


def _arrow_list(df: pd.DataFrame, column: str, path: str, row_label: str) -> pd.Series:
    """Convert a list column to an Arrow-backed list series of the canonical value type.

    Values are checked (`list_value_problem`) before the cast, which would otherwise truncate
    1.5 to 1 without a word.
    """
    import pandas as pd

    value_type = LIST_VALUE_TYPES[column]
    series = df[column]
    try:
        if isinstance(series.dtype, pd.ArrowDtype):
            arr = pa.chunked_array(series.array._pa_array).combine_chunks()
        else:
            arr = pa.array(series.tolist(), from_pandas=True)
    except LIST_ERRORS as exc:
        pos, why = _first_bad_list(series, column)
        fail_at(path, df, pos, row_label, column, why)
        raise AssertionError("unreachable") from exc
    if pa.types.is_null(arr.type):  # every row missing: the column is as good as absent
        arr = pa.nulls(len(arr), pa.large_list(value_type))
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        pos, why = _first_bad_list(series, column)
        fail_at(path, df, pos, row_label, column, why)
    flat = arr.flatten()
    problem = list_value_problem(flat, column)
    if problem is not None:
        rows = pa.compute.list_parent_indices(arr).to_numpy()
        fail_at(path, df, int(rows[problem[0]]), row_label, column, problem[1])
    # Checked above; times may round (2**53 + 1 s is no time anyway), ids never do.
    arr = arr.cast(pa.large_list(value_type), safe=column != "token_times_s")
    ids = column not in ("token_times_s", "prompt_block_ids")
    if ids and len(flat) and pa.compute.min(flat).as_py() < 0:
        pos = _first_negative(pa.chunked_array([arr]))
        fail_at(path, df, pos, row_label, column, "token ids must be >= 0")
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([arr])), index=df.index,
                     name=column)


# What pyarrow raises on a Python list it cannot convert (mixed types, ints beyond int64).
LIST_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _first_bad_list(series: pd.Series, column: str) -> tuple[int, str]:
    """The first row whose value is not a list the schema accepts, and why."""
    want = "numbers" if column == "token_times_s" else "integers"
    for pos, value in enumerate(series.tolist()):
        try:
            arr = pa.array([value], from_pandas=True)
        except LIST_ERRORS as exc:
            return pos, _why_not_a_list(value, column, exc)
        if pa.types.is_null(arr.type):
            continue
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            return pos, f"{shown(value)} is not a list; write a list of {want}, e.g. [1, 2]"
        problem = list_value_problem(arr.flatten(), column)
        if problem is not None:
            return pos, problem[1]
    return 0, f"expected a list of {want} in every row"


def _why_not_a_list(value: object, column: str, exc: Exception) -> str:
    """Why pyarrow could not convert one row's list: its first value that is not a number."""
    want = "numbers of seconds" if column == "token_times_s" else "whole numbers"
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, list | tuple | dict):
                return f"a nested list is not a number; list values must be {want}"
            if isinstance(item, bool) or not isinstance(item, int | float | type(None)):
                return f"{shown(item)} is not a number; list values must be {want}"
            if isinstance(item, int) and not -(2**63) <= item < 2**63:
                return f"{item} is beyond int64; ids must be below 2**63"
    return f"expected a list of {want} ({str(exc).splitlines()[0][:120]})"


def _first_negative(arr: pa.ChunkedArray) -> int:
    import pandas as pd

    offsets, values = list_arrays(pd.Series(pd.arrays.ArrowExtensionArray(arr)))
    neg = int(np.flatnonzero(values < 0)[0])
    return int(np.searchsorted(offsets, neg, side="right") - 1)


def normalize(raw: RawTrace, path: str, *, arrivals_optional: bool = False,
              whole: bool = True) -> Trace:
    """Validate a reader's table and return the canonical `Trace`.

    Errors (exit code 3) name file, row and column, in the source's own column names when the
    reader renamed them (Mooncake's `input_length` rather than `prompt_len`); repairs and
    oddities become notes. `arrivals_optional=True` accepts a table with lengths but no
    `arrival_s` as lengths-only (`Trace.has_arrivals` False), for the length profile.
    `whole=False` validates one part of a file: the one-clock rule (`check_one_clock`), which
    needs every row, is then the caller's.
    """
    try:
        return _normalize(raw, path, arrivals_optional, whole)
    except TraceSchemaError as err:
        text = str(err)
        renamed = _in_source_terms(_in_source_units(text, raw.source_units), raw.source_names)
        if renamed == text:
            raise
        raise TraceSchemaError(renamed) from err


def _in_source_terms(message: str, source_names: Mapping[str, str]) -> str:
    """`column 'prompt_len'` of a message as `column 'input_length' (read as prompt_len)`."""
    for canonical, source in source_names.items():
        message = message.replace(f"column '{canonical}'",
                                  f"column '{source}' (read as {canonical})")
    return message


UNIT_NAMES = {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def _in_source_units(message: str, source_units: Mapping[str, str]) -> str:
    """A time error's fix for a column the reader converted (Mooncake's milliseconds): the
    file's unit is the format's, so a value too large is another unit or corrupt."""
    for canonical, unit in source_units.items():
        if f"column '{canonical}'" in message and TIME_FIX in message:
            return message.replace(TIME_FIX, (
                f"the format gives this column in {UNIT_NAMES[unit]}, divided into seconds "
                "on reading: a value this large is in another unit, or corrupt; fix or drop "
                "the row"))
    return message


def _normalize(raw: RawTrace, path: str, arrivals_optional: bool = False,
               whole: bool = True) -> Trace:
    """Validate in phases, each failing on the first bad row it finds: lists, required
    columns, types, ids, lengths; then sort by arrival."""
    import pandas as pd

    df = raw.requests.reset_index(drop=True)
    rows_read = len(df)
    label = raw.row_label
    if rows_read == 0:
        raise TraceSchemaError(f"{path}: the trace has no requests; check the file is not empty")
    lists = _list_columns(df, path, label)
    if "prompt_len" not in df.columns and "prompt_tokens" in lists:
        lengths = pa.compute.list_value_length(series_arrow(lists["prompt_tokens"]))
        df = df.assign(prompt_len=pd.array(lengths.to_pylist(), dtype="Int64"))
    notes = list(raw.notes)
    has_arrivals = "arrival_s" in df.columns
    if not has_arrivals and arrivals_optional and {"prompt_len", "output_len"} <= set(df.columns):
        # File order stands in for arrival order; nothing reads these zeros as times.
        df = df.assign(arrival_s=0.0)
        notes.append(LENGTHS_ONLY_NOTE)
    _require_columns(df, path)
    out = _typed_columns(df, path, label)
    if whole and has_arrivals:
        check_one_clock({c: out[c].to_numpy(dtype=np.float64, na_value=np.nan)
                         for c in CLOCK_COLUMNS if c in out},
                        path, lambda pos: locate(df, pos, label))
    out.update(lists)
    out["request_id"] = _request_ids(out.get("request_id"), df, path, label)
    _check_token_lengths(out, df, path, label)
    _check_block_ids(out, df, path, label, raw.source_block_size)
    table, notes = _in_arrival_order(out, notes)
    return Trace(
        table=table,
        path=path,
        format_name=raw.format_name,
        source_block_size=raw.source_block_size,
        notes=tuple(notes),
        rows_read=rows_read,
        has_arrivals=has_arrivals,
        engine_limits=raw.engine_limits,
    )


def check_one_clock(times: Mapping[str, np.ndarray], path: str,
                    where: Callable[[int], str]) -> None:
    """Refuse a trace whose times cannot be one clock (`values.clock_gap`), naming the first
    value past the gap; `where(pos)` names row `pos` as the source counts it."""
    gap = clock_gap(times)
    if gap is not None:
        raise TraceSchemaError(f"{path}: {where(gap.pos)}, column '{gap.column}': "
                               f"{gap.message()}")


def _list_columns(df: pd.DataFrame, path: str, label: str) -> dict[str, pd.Series]:
    """The token-list columns as Arrow lists; one missing in every row counts as absent."""
    lists: dict[str, pd.Series] = {}
    for column in LIST_COLUMNS:
        if column in df.columns:
            series = _arrow_list(df, column, path, label)
            if series.notna().any():
                lists[column] = series
    return lists


# Columns that make a table a step log (docs/schema.md, "Step log") when it has no request
# lengths: the engine's steps, given where the request trace belongs.
_STEP_LOG_SIGNS: Final = ("start_s", "end_s")
_STEP_LOG_WORK: Final = ("prefill_tokens", "decode_tokens")


def _require_columns(df: pd.DataFrame, path: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if (missing and "prompt_len" in missing and all(c in df.columns for c in _STEP_LOG_SIGNS)
            and any(c in df.columns for c in _STEP_LOG_WORK)):
        raise TraceSchemaError(
            f"{path}: is a step log (one row per engine step: start_s, end_s, prefill_tokens, "
            "decode_tokens), not a request trace; give the request trace as TRACE and this "
            f"file as --steps {path} (--steps-before for the run before)"
        )
    if missing == ["arrival_s"]:
        raise TraceSchemaError(
            f"{path}: no arrival times (column 'arrival_s' missing; have: "
            f"{names_of([c for c in df.columns if not str(c).startswith('_source')], 12)}); "
            "this command needs them: rename the timestamp column with --map arrival_s=<source "
            "column>, or run `trace analyze` for the length profile of a lengths-only table"
        )
    if missing:
        raise TraceSchemaError(
            f"{path}: missing required column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(c) for c in missing)} "
            f"(have: {names_of([c for c in df.columns if not str(c).startswith('_source')], 12)}); "
            f"rename with --map {missing[0]}=<source column> or pass --input-format"
        )


def _typed_columns(df: pd.DataFrame, path: str, label: str) -> dict[str, pd.Series]:
    """Numbers and strings in their canonical dtypes; every request has its three numbers."""
    out: dict[str, pd.Series] = {}
    for column in FLOAT_COLUMNS:
        if column in df.columns:
            out[column] = coerce_numeric(df, column, path, label, integer=False)
    for column in INT_COLUMNS:
        if column in df.columns:
            out[column] = coerce_numeric(df, column, path, label, integer=True)
    for column in ("arrival_s", "prompt_len", "output_len"):
        nulls = np.flatnonzero(out[column].isna().to_numpy())
        if nulls.size:
            fail_at(path, df, int(nulls[0]), label, column,
                  "value is missing; every request needs one")
    for column in STRING_COLUMNS:
        if column in df.columns:
            out[column] = df[column].astype("string")
    if "kv_transfer_s" in out:
        negative = np.flatnonzero((out["kv_transfer_s"] < 0).to_numpy())
        if negative.size:
            fail_at(path, df, int(negative[0]), label, "kv_transfer_s",
                    f"{out['kv_transfer_s'].iloc[int(negative[0])]:g} s is negative; a transfer "
                    "takes >= 0 seconds")
    if "status" in df.columns:
        out["status"] = _statuses(df, path, label)
    return out


def _statuses(df: pd.DataFrame, path: str, label: str) -> pd.Series:
    """`status` in lower case, each one of STATUS_VALUES or missing (the source did not say)."""
    import pandas as pd

    status = df["status"].astype("string").str.strip().str.lower().replace("", pd.NA)
    bad = np.flatnonzero((status.notna() & ~status.isin(STATUS_VALUES)).to_numpy())
    if bad.size:
        fail_at(path, df, int(bad[0]), label, "status",
                f"{shown(df['status'].iloc[int(bad[0])])} is not a request status; use one of "
                f"{', '.join(STATUS_VALUES)} (or leave it empty)")
    return status


def _request_ids(ids: pd.Series | None, df: pd.DataFrame, path: str, label: str) -> pd.Series:
    """The given ids, each present and unique, or `r0, r1, ...` when the trace has none."""
    import pandas as pd

    if ids is None:
        return pd.Series(default_request_ids(len(df)), dtype="string")
    if ids.isna().any():
        fail_at(path, df, int(np.flatnonzero(ids.isna().to_numpy())[0]), label, "request_id",
              "value is missing; give every request an id or drop the column")
    dup = ids.duplicated(keep=False).to_numpy()
    if dup.any():
        first = int(np.flatnonzero(dup)[0])
        again = int(np.flatnonzero(dup & (ids.to_numpy() == ids.iloc[first]))[1])
        fail_at(path, df, again, label, "request_id",
              f"duplicate id {ids.iloc[first]!r} (also at {locate(df, first, label)}); "
              "request ids must be unique")
    return ids


def _check_token_lengths(out: dict[str, pd.Series], df: pd.DataFrame, path: str,
                         label: str) -> None:
    """`prompt_len` equals the number of ids in `prompt_tokens` wherever both are given."""
    if "prompt_tokens" not in out:
        return
    prompt_len = out["prompt_len"].to_numpy(dtype=np.int64)
    offsets, _ = list_arrays(out["prompt_tokens"])
    lengths = np.diff(offsets)
    has = out["prompt_tokens"].notna().to_numpy()
    bad = np.flatnonzero(has & (lengths != prompt_len))
    if bad.size:
        pos = int(bad[0])
        fail_at(path, df, pos, label, "prompt_len",
              f"{prompt_len[pos]} disagrees with the {lengths[pos]} ids in 'prompt_tokens'; "
              "fix the length or the token list")


def default_request_ids(n: int) -> list[str]:
    """The ids of a trace that gives none: `r0, r1, ...` in file order."""
    return [f"r{i}" for i in range(n)]


def ids_cover(lengths: np.ndarray, prompt_len: np.ndarray, size: int) -> np.ndarray:
    """Per request, whether its `lengths` block ids (one per `size` tokens) can cover its
    `prompt_len`: the floor or the ceiling of prompt_len / size (the last id may cover a
    partial block)."""
    return (lengths >= prompt_len // size) & (lengths <= -(-prompt_len // size))


def _check_block_ids(out: dict[str, pd.Series], df: pd.DataFrame, path: str, label: str,
                     size: int | None) -> None:
    """Block ids (one per `size` tokens) can cover `prompt_len`: floor or ceiling of it."""
    if "prompt_block_ids" not in out:
        return
    if size is None or size < 1:
        raise TraceSchemaError(
            f"{path}: column 'prompt_block_ids' needs the trace's source block size; "
            "pass --source-block-size N (tokens per id)"
        )
    prompt_len = out["prompt_len"].to_numpy(dtype=np.int64)
    offsets, _ = list_arrays(out["prompt_block_ids"])
    lengths = np.diff(offsets)
    has = out["prompt_block_ids"].notna().to_numpy()
    low, high = prompt_len // size, -(-prompt_len // size)
    bad = np.flatnonzero(has & ~ids_cover(lengths, prompt_len, size))
    if bad.size:
        pos = int(bad[0])
        fail_at(path, df, pos, label, "prompt_block_ids",
              f"{lengths[pos]} ids cannot cover prompt_len {prompt_len[pos]} at "
              f"{size} tokens per id (expected {low[pos]} or {high[pos]}); "
              "check --source-block-size")


def _in_arrival_order(out: dict[str, pd.Series], notes: list[str]
                      ) -> tuple[pd.DataFrame, list[str]]:
    """The canonical table sorted stably by arrival (noted when it was not), plus timing notes."""
    import pandas as pd

    arrival = out["arrival_s"].to_numpy()
    unsorted = int(np.count_nonzero(np.diff(arrival) < 0))
    if unsorted:
        notes.append(
            f"arrivals were out of order at {unsorted} place(s); requests were sorted stably by "
            "arrival_s (ties keep file order)"
        )
    ordered = [c for c in CANONICAL_COLUMNS if c in out]
    table = pd.DataFrame({c: out[c] for c in ordered})
    if unsorted:
        table = table.iloc[np.argsort(arrival, kind="stable")].reset_index(drop=True)
    notes.extend(_timing_notes(table))
    return table, notes


def _timing_notes(table: pd.DataFrame) -> list[str]:
    """Inconsistent timing is a data-quality note, not an error: the report says how much."""
    notes: list[str] = []
    arrival = table["arrival_s"]
    checks = (
        ("scheduled_s", arrival, "scheduled before arrival"),
        ("first_token_s", arrival, "first token before arrival"),
        ("finish_s", table.get("first_token_s", arrival), "finished before first token"),
        ("decode_start_s", arrival, "decode start before arrival"),
    )
    for column, before, what in checks:
        if column in table.columns:
            n = int((table[column] < before).sum())
            if n:
                notes.append(f"{n} request(s) have '{column}' {what}; "
                             "their derived times are skipped")
    return notes
