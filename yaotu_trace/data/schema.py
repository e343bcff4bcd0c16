"""The canonical request table: column names, dtypes, validation and the `Trace` value.

Every reader produces a `RawTrace` with canonical column names; `normalize` validates it once,
at the boundary, coerces dtypes, sorts by arrival (stably) and records data-quality notes.
Everything downstream trusts a `Trace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.errors import TraceSchemaError

if TYPE_CHECKING:
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
)
INT_COLUMNS: Final = ("prompt_len", "output_len", "num_preemptions", "cached_tokens")
FLOAT_COLUMNS: Final = ("arrival_s", "scheduled_s", "first_token_s", "finish_s")
LIST_COLUMNS: Final = ("prompt_tokens", "prompt_block_ids", "output_tokens", "token_times_s")
REQUIRED_COLUMNS: Final = ("arrival_s", "prompt_len", "output_len")
INT64_LIMIT: Final = 2.0**63  # whole numbers at or beyond this do not fit int64
# Times are seconds from any origin; beyond 1e12 s (31,700 years) from it, a time is a unit
# mistake (ms or ns given as s) and its sums would overflow.
TIME_LIMIT_S: Final = 1e12
TIME_FIX: Final = "times are seconds: convert ms, us or ns to s"
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
)
LIST_VALUE_TYPES: Final = {
    "prompt_tokens": pa.int64(),
    "prompt_block_ids": pa.int64(),
    "output_tokens": pa.int64(),
    "token_times_s": pa.float64(),
}
# Columns a reader may add to locate rows in error messages; dropped by `normalize`.
SOURCE_ROW: Final = "_source_row"  # 1-based line or row number in the source file
SOURCE_WHERE: Final = "_source_where"  # free-form location, e.g. "trace_0001.json, request 3"

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
    "num_preempted",
)
STEP_REQUIRED: Final = ("start_s", "end_s")


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
class Trace:
    """A validated canonical request table, sorted by arrival (ties in file order).

    `requests` holds the canonical columns present in the source (list columns as Arrow-backed
    lists). `source_block_size` is set when prompts are given as block ids rather than tokens:
    each id stands for that many tokens (the last id may cover a partial block).
    """

    requests: pd.DataFrame
    path: str
    format_name: str
    source_block_size: int | None = None
    notes: tuple[str, ...] = ()
    rows_read: int = 0
    # The engine step log (`--steps`): in memory, or a Parquet file in start order read in
    # record batches (`yaotu_trace.data.steplog`).
    steps: StepLog | None = field(default=None)
    # List columns left on disk (`load_trace(..., lazy_content=True)`); not in `requests`.
    lazy: LazyContent | None = None
    # Values derived from the trace once and shared by the passes that need them (e.g. the
    # inter-token gap summary, which reads the token times twice). Not copied by `replace`.
    derived: dict[str, object] = field(default_factory=dict, init=False, compare=False,
                                       repr=False)

    def has(self, column: str) -> bool:
        """Whether the trace carries `column` with at least one value."""
        if self.lazy is not None and column in self.lazy.columns:
            return self.lazy.values_in(column) > 0
        return column in self.requests.columns and bool(self.requests[column].notna().any())

    def is_lazy(self, column: str) -> bool:
        """Whether `column` is left on disk rather than loaded into `requests`."""
        return self.lazy is not None and column in self.lazy.columns

    @property
    def column_names(self) -> tuple[str, ...]:
        """Every canonical column of the trace, loaded or left on disk, in canonical order."""
        names = list(self.requests.columns)
        if self.lazy is not None:
            names += [c for c in self.lazy.columns if c not in names]
        rank = {c: i for i, c in enumerate(CANONICAL_COLUMNS)}
        return tuple(sorted(names, key=lambda c: rank.get(c, len(rank))))

    @property
    def content_column(self) -> str | None:
        """The column carrying prompt content: token ids, block ids, or none (a column that
        holds no id, such as one missing in every row, carries none)."""
        names = set(self.requests.columns) | set(self.lazy.columns if self.lazy else ())
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


def _locate(df: pd.DataFrame, pos: int, row_label: str) -> str:
    """Name the source location of positional row `pos` for an error message."""
    if SOURCE_WHERE in df.columns:
        return str(df[SOURCE_WHERE].iloc[pos])
    if SOURCE_ROW in df.columns:
        return f"{row_label} {int(df[SOURCE_ROW].iloc[pos])}"
    return f"{row_label} {pos + 1}"


def _fail(path: str, df: pd.DataFrame, pos: int, row_label: str, column: str, msg: str) -> None:
    raise TraceSchemaError(f"{path}: {_locate(df, pos, row_label)}, column '{column}': {msg}")


def _coerce_numeric(
    df: pd.DataFrame, column: str, path: str, row_label: str, *, integer: bool
) -> pd.Series:
    """Coerce a column to float64 or nullable int64, naming the first bad value."""
    raw = df[column]
    num = pd.to_numeric(raw, errors="coerce")
    bad = num.isna() & raw.notna()
    # Booleans are numbers to pandas but never valid lengths or times.
    if raw.dtype == bool or (raw.dtype == object and raw.map(lambda v: isinstance(v, bool)).any()):
        bad = bad | raw.map(lambda v: isinstance(v, bool | np.bool_))
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        _fail(path, df, pos, row_label, column,
              f"{_shown(raw.iloc[pos])} is not a number; give a number"
              + (" of tokens" if integer else " of seconds"))
    num = num.astype("float64")
    if not np.isfinite(num.fillna(0.0).to_numpy()).all():
        pos = int(np.flatnonzero(~np.isfinite(num.fillna(0.0).to_numpy()))[0])
        _fail(path, df, pos, row_label, column,
              f"{num.iloc[pos]} is not finite; give a finite number")
    values = num.to_numpy()
    if not integer:
        far = np.flatnonzero(np.abs(values) > TIME_LIMIT_S)
        if far.size:
            pos = int(far[0])
            _fail(path, df, pos, row_label, column,
                  f"{values[pos]:g} s is beyond 1e12 s; {TIME_FIX}")
        return num
    frac = np.flatnonzero(~np.isnan(values) & (values != np.round(values)))
    if frac.size:
        pos = int(frac[0])
        _fail(path, df, pos, row_label, column,
              f"{values[pos]} is not a whole number; token counts are integers")
    neg = np.flatnonzero(~np.isnan(values) & (values < 0))
    if neg.size:
        pos = int(neg[0])
        _fail(path, df, pos, row_label, column,
              f"{_shown(raw.iloc[pos])} is negative; token counts must be >= 0")
    beyond = np.flatnonzero(~np.isnan(values) & (values >= INT64_LIMIT))
    if beyond.size:
        pos = int(beyond[0])
        _fail(path, df, pos, row_label, column,
              f"{_shown(raw.iloc[pos])} is beyond int64; token counts must be below 2**63")
    return num.astype("Int64")


def names_of(columns: object, limit: int = 8) -> str:
    """Column or key names for a one-line message: at most `limit`, whitespace folded."""
    names = [" ".join(str(c).split())[:40] for c in list(columns)[:limit]]  # type: ignore[call-overload]
    return ", ".join(names)


def _shown(value: object) -> str:
    """A source value as an error message quotes it: its repr, cut to 40 characters."""
    text = " ".join(repr(value.item() if isinstance(value, np.generic) else value).split())
    return text if len(text) <= 40 else text[:37] + "..."


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
        what = "a nested list" if pa.types.is_nested(kind) else _shown(values[pos].as_py())
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
    value_type = LIST_VALUE_TYPES[column]
    series = df[column]
    try:
        if isinstance(series.dtype, pd.ArrowDtype):
            arr = pa.chunked_array(series.array._pa_array).combine_chunks()
        else:
            arr = pa.array(series.tolist(), from_pandas=True)
    except LIST_ERRORS as exc:
        pos, why = _first_bad_list(series, column)
        _fail(path, df, pos, row_label, column, why)
        raise AssertionError("unreachable") from exc
    if pa.types.is_null(arr.type):  # every row missing: the column is as good as absent
        arr = pa.nulls(len(arr), pa.large_list(value_type))
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        pos, why = _first_bad_list(series, column)
        _fail(path, df, pos, row_label, column, why)
    flat = arr.flatten()
    problem = list_value_problem(flat, column)
    if problem is not None:
        rows = pa.compute.list_parent_indices(arr).to_numpy()
        _fail(path, df, int(rows[problem[0]]), row_label, column, problem[1])
    # Checked above; times may round (2**53 + 1 s is no time anyway), ids never do.
    arr = arr.cast(pa.large_list(value_type), safe=column != "token_times_s")
    ids = column not in ("token_times_s", "prompt_block_ids")
    if ids and len(flat) and pa.compute.min(flat).as_py() < 0:
        pos = _first_negative(pa.chunked_array([arr]))
        _fail(path, df, pos, row_label, column, "token ids must be >= 0")
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
            return pos, f"{_shown(value)} is not a list; write a list of {want}, e.g. [1, 2]"
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
                return f"{_shown(item)} is not a number; list values must be {want}"
            if isinstance(item, int) and not -(2**63) <= item < 2**63:
                return f"{item} is beyond int64; ids must be below 2**63"
    return f"expected a list of {want} ({str(exc).splitlines()[0][:120]})"


def _first_negative(arr: pa.ChunkedArray) -> int:
    offsets, values = list_arrays(pd.Series(pd.arrays.ArrowExtensionArray(arr)))
    neg = int(np.flatnonzero(values < 0)[0])
    return int(np.searchsorted(offsets, neg, side="right") - 1)


def normalize(raw: RawTrace, path: str) -> Trace:
    """Validate a reader's table and return the canonical `Trace`.

    Errors (exit code 3) name file, row and column, in the source's own column names when the
    reader renamed them (Mooncake's `input_length` rather than `prompt_len`); repairs and
    oddities become notes.
    """
    try:
        return _normalize(raw, path)
    except TraceSchemaError as err:
        text = str(err)
        renamed = _in_source_terms(text, raw.source_names)
        if renamed == text:
            raise
        raise TraceSchemaError(renamed) from err


def _in_source_terms(message: str, source_names: Mapping[str, str]) -> str:
    """`column 'prompt_len'` of a message as `column 'input_length' (read as prompt_len)`."""
    for canonical, source in source_names.items():
        message = message.replace(f"column '{canonical}'",
                                  f"column '{source}' (read as {canonical})")
    return message


def _normalize(raw: RawTrace, path: str) -> Trace:
    """Validate in phases, each failing on the first bad row it finds: lists, required
    columns, types, ids, lengths; then sort by arrival."""
    df = raw.requests.reset_index(drop=True)
    rows_read = len(df)
    label = raw.row_label
    if rows_read == 0:
        raise TraceSchemaError(f"{path}: the trace has no requests; check the file is not empty")
    lists = _list_columns(df, path, label)
    if "prompt_len" not in df.columns and "prompt_tokens" in lists:
        lengths = pa.compute.list_value_length(series_arrow(lists["prompt_tokens"]))
        df = df.assign(prompt_len=pd.array(lengths.to_pylist(), dtype="Int64"))
    _require_columns(df, path)
    out = _typed_columns(df, path, label)
    out.update(lists)
    out["request_id"] = _request_ids(out.get("request_id"), df, path, label)
    _check_token_lengths(out, df, path, label)
    _check_block_ids(out, df, path, label, raw.source_block_size)
    table, notes = _in_arrival_order(out, list(raw.notes))
    return Trace(
        requests=table,
        path=path,
        format_name=raw.format_name,
        source_block_size=raw.source_block_size,
        notes=tuple(notes),
        rows_read=rows_read,
    )


def _list_columns(df: pd.DataFrame, path: str, label: str) -> dict[str, pd.Series]:
    """The token-list columns as Arrow lists; one missing in every row counts as absent."""
    lists: dict[str, pd.Series] = {}
    for column in LIST_COLUMNS:
        if column in df.columns:
            series = _arrow_list(df, column, path, label)
            if series.notna().any():
                lists[column] = series
    return lists


def _require_columns(df: pd.DataFrame, path: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
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
            out[column] = _coerce_numeric(df, column, path, label, integer=False)
    for column in INT_COLUMNS:
        if column in df.columns:
            out[column] = _coerce_numeric(df, column, path, label, integer=True)
    for column in ("arrival_s", "prompt_len", "output_len"):
        nulls = np.flatnonzero(out[column].isna().to_numpy())
        if nulls.size:
            _fail(path, df, int(nulls[0]), label, column,
                  "value is missing; every request needs one")
    for column in STRING_COLUMNS:
        if column in df.columns:
            out[column] = df[column].astype("string")
    return out


def _request_ids(ids: pd.Series | None, df: pd.DataFrame, path: str, label: str) -> pd.Series:
    """The given ids, each present and unique, or `r0, r1, ...` when the trace has none."""
    if ids is None:
        return pd.Series([f"r{i}" for i in range(len(df))], dtype="string")
    if ids.isna().any():
        _fail(path, df, int(np.flatnonzero(ids.isna().to_numpy())[0]), label, "request_id",
              "value is missing; give every request an id or drop the column")
    dup = ids.duplicated(keep=False).to_numpy()
    if dup.any():
        first = int(np.flatnonzero(dup)[0])
        again = int(np.flatnonzero(dup & (ids.to_numpy() == ids.iloc[first]))[1])
        _fail(path, df, again, label, "request_id",
              f"duplicate id {ids.iloc[first]!r} (also at {_locate(df, first, label)}); "
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
        _fail(path, df, pos, label, "prompt_len",
              f"{prompt_len[pos]} disagrees with the {lengths[pos]} ids in 'prompt_tokens'; "
              "fix the length or the token list")


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
    bad = np.flatnonzero(has & ((lengths < low) | (lengths > high)))
    if bad.size:
        pos = int(bad[0])
        _fail(path, df, pos, label, "prompt_block_ids",
              f"{lengths[pos]} ids cannot cover prompt_len {prompt_len[pos]} at "
              f"{size} tokens per id (expected {low[pos]} or {high[pos]}); "
              "check --source-block-size")


def _in_arrival_order(out: dict[str, pd.Series], notes: list[str]
                      ) -> tuple[pd.DataFrame, list[str]]:
    """The canonical table sorted stably by arrival (noted when it was not), plus timing notes."""
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
    )
    for column, before, what in checks:
        if column in table.columns:
            n = int((table[column] < before).sum())
            if n:
                notes.append(f"{n} request(s) have '{column}' {what}; "
                             "their derived times are skipped")
    return notes


def _plain_number(raw: pd.Series, *, integer: bool) -> pd.Series | None:
    """The column as `_coerce_numeric` returns it, when it is already a NumPy number column
    that passes its checks (the usual case, and cheap: a streamed step log is validated batch
    by batch); else None, and `_coerce_numeric` converts it or names the bad row."""
    if not isinstance(raw.dtype, np.dtype) or raw.dtype.kind not in "iuf":
        return None
    values = raw.to_numpy(dtype=np.float64)
    missing = np.isnan(values)
    finite = ~missing
    if not np.isfinite(values[finite]).all():
        return None
    if not integer:
        if (np.abs(values[finite]) > TIME_LIMIT_S).any():
            return None
        return pd.Series(values, index=raw.index, name=raw.name)
    whole = values[finite]
    if not ((whole == np.round(whole)).all() and (whole >= 0).all()
            and (whole < INT64_LIMIT).all()):
        return None
    ints = pd.arrays.IntegerArray(np.where(missing, 0.0, values).astype(np.int64), missing)
    return pd.Series(ints, index=raw.index, name=raw.name)


def validate_steps(df: pd.DataFrame, path: str, *, first_row: int | None = None) -> pd.DataFrame:
    """Validate an engine step log (one row per scheduler iteration), sorted stably by start_s.

    With `first_row` (0-based), `df` is one record batch, starting at that row, of a log already
    in start order (`yaotu_trace.data.steplog`): it is validated the same way but not sorted, and
    errors name the row of the whole file.
    """
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
            integer = column not in ("start_s", "end_s")
            number = _plain_number(df[column], integer=integer)
            out[column] = (number if number is not None
                           else _coerce_numeric(df, column, path, "row", integer=integer))
    steps = pd.DataFrame(out)
    bad = np.flatnonzero((steps["end_s"] < steps["start_s"]).to_numpy())
    if bad.size:
        _fail(path, df, int(bad[0]), "row", "end_s", "step ends before it starts")
    if first_row is not None:
        return steps
    return steps.sort_values("start_s", kind="stable").reset_index(drop=True)
