"""One column's values checked and coerced, with errors that name the file, row and column.

Shared by the request table (`schema`) and the step log (`steplog`); a reader adds
`SOURCE_ROW` or `SOURCE_WHERE` to its rows so that an error names the row as the source file
counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from yaotu_trace.errors import TraceSchemaError

# pandas is imported where a function needs it: a clean trace read without it
# (`ingest.traces.mooncake.read_clean`) checks its clock here.
if TYPE_CHECKING:
    import pandas as pd

# Times are seconds from any origin; beyond 1e12 s (31,700 years) from it, a time is a unit
# mistake (ms or ns given as s) and its sums would overflow.
TIME_LIMIT_S: Final = 1e12
TIME_FIX: Final = "times are seconds: convert ms, us or ns to s"
INT64_LIMIT: Final = 2.0**63  # whole numbers at or beyond this do not fit int64
# One trace has one clock. Its times, sorted, are refused when one gap between them is at least
# a year and more than CLOCK_GAP_RATIO × the span of every other time: the longest public
# traces span months (BurstGPT 121 days), so such a gap is a second clock (epoch seconds among
# seconds from the start, µs among s) that would make every rate and window meaningless.
CLOCK_GAP_MIN_S: Final = 365 * 86400.0
CLOCK_GAP_RATIO: Final = 1000.0

# Columns a reader may add to locate rows in error messages; dropped by `normalize`.
SOURCE_ROW: Final = "_source_row"  # 1-based line or row number in the source file
SOURCE_WHERE: Final = "_source_where"  # free-form location, e.g. "trace_0001.json, request 3"


def locate(df: pd.DataFrame, pos: int, row_label: str) -> str:
    """Name the source location of positional row `pos` for an error message."""
    if SOURCE_WHERE in df.columns:
        return str(df[SOURCE_WHERE].iloc[pos])
    if SOURCE_ROW in df.columns:
        return f"{row_label} {int(df[SOURCE_ROW].iloc[pos])}"
    return f"{row_label} {pos + 1}"


def fail_at(path: str, df: pd.DataFrame, pos: int, row_label: str, column: str, msg: str) -> None:
    raise TraceSchemaError(f"{path}: {locate(df, pos, row_label)}, column '{column}': {msg}")


def coerce_numeric(
    df: pd.DataFrame, column: str, path: str, row_label: str, *, integer: bool
) -> pd.Series:
    """Coerce a column to float64 or nullable int64, naming the first bad value."""
    import pandas as pd

    raw = df[column]
    num = pd.to_numeric(raw, errors="coerce")
    bad = num.isna() & raw.notna()
    # Booleans are numbers to pandas but never valid lengths or times.
    if raw.dtype == bool or (raw.dtype == object and raw.map(lambda v: isinstance(v, bool)).any()):
        bad = bad | raw.map(lambda v: isinstance(v, bool | np.bool_))
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        fail_at(path, df, pos, row_label, column,
              f"{shown(raw.iloc[pos])} is not a number; give a number"
              + (" of tokens" if integer else " of seconds"))
    num = num.astype("float64")
    if not np.isfinite(num.fillna(0.0).to_numpy()).all():
        pos = int(np.flatnonzero(~np.isfinite(num.fillna(0.0).to_numpy()))[0])
        fail_at(path, df, pos, row_label, column,
              f"{num.iloc[pos]} is not finite; give a finite number")
    values = num.to_numpy()
    if not integer:
        far = np.flatnonzero(np.abs(values) > TIME_LIMIT_S)
        if far.size:
            pos = int(far[0])
            fail_at(path, df, pos, row_label, column,
                  f"{values[pos]:g} s is beyond 1e12 s; {TIME_FIX}")
        return num
    frac = np.flatnonzero(~np.isnan(values) & (values != np.round(values)))
    if frac.size:
        pos = int(frac[0])
        fail_at(path, df, pos, row_label, column,
              f"{values[pos]} is not a whole number; token counts are integers")
    neg = np.flatnonzero(~np.isnan(values) & (values < 0))
    if neg.size:
        pos = int(neg[0])
        fail_at(path, df, pos, row_label, column,
              f"{shown(raw.iloc[pos])} is negative; token counts must be >= 0")
    beyond = np.flatnonzero(~np.isnan(values) & (values >= INT64_LIMIT))
    if beyond.size:
        pos = int(beyond[0])
        fail_at(path, df, pos, row_label, column,
              f"{shown(raw.iloc[pos])} is beyond int64; token counts must be below 2**63")
    return num.astype("Int64")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockGap:
    """A gap between a trace's times that one clock cannot have (`CLOCK_GAP_MIN_S`): the first
    value past it in position order (`column`, `pos`, `value_s`), which side of the gap it lies
    on, the gap, the span of the other times and how many values lie on its side."""

    column: str
    pos: int
    value_s: float
    after: bool
    gap_s: float
    rest_s: float
    beyond: int

    def message(self) -> str:
        """The words after the file, row and column of an error."""
        more = (f" (with {self.beyond - 1:,} more value{'s' if self.beyond > 2 else ''} "
                "there)" if self.beyond > 1 else "")
        return (f"{self.value_s:g} s lies {self.gap_s:.3g} s ({self.gap_s / 31_536_000:,.0f} "
                f"years) {'after' if self.after else 'before'} the trace's other times{more}, "
                f"which span {self.rest_s:.3g} s together: one trace has one clock; convert it "
                "to the clock of the others (seconds from the start, or epoch seconds) or drop "
                "the row")


def clock_gap(times: Mapping[str, np.ndarray]) -> ClockGap | None:
    """The gap that cannot be one clock among the finite values of `times` (columns of one
    table, position-aligned), or None. The side beyond the gap is the one with fewer values
    (the later one on a tie)."""
    columns = {name: np.asarray(v, dtype=np.float64) for name, v in times.items()}
    values = np.concatenate([v[np.isfinite(v)] for v in columns.values()] or [np.zeros(0)])
    if values.size < 2:
        return None
    values.sort()
    gaps = np.diff(values)
    k = int(np.argmax(gaps))
    gap = float(gaps[k])
    rest = float(values[-1] - values[0]) - gap
    if gap < CLOCK_GAP_MIN_S or gap <= CLOCK_GAP_RATIO * rest:
        return None
    after = values.size - k - 1 <= k + 1
    cut = float(values[k + 1]) if after else float(values[k])
    first: tuple[int, str] | None = None
    for name, v in columns.items():
        beyond = np.flatnonzero(v >= cut) if after else np.flatnonzero(v <= cut)
        if beyond.size and (first is None or int(beyond[0]) < first[0]):
            first = int(beyond[0]), name
    assert first is not None
    pos, name = first
    return ClockGap(column=name, pos=pos, value_s=float(columns[name][pos]), after=after,
                    gap_s=gap, rest_s=rest,
                    beyond=values.size - k - 1 if after else k + 1)


def check_unique_names(path: object, names: Sequence[object]) -> None:
    """Refuse a table that names a column twice: which of the two holds the data would be a
    guess (pandas renames a CSV's second `x` to `x.1`, pyarrow cannot convert the pair)."""
    seen: dict[str, list[int]] = {}
    for i, name in enumerate(names, start=1):
        seen.setdefault(str(name), []).append(i)
    twice = next(((n, at) for n, at in seen.items() if len(at) > 1), None)
    if twice is None:
        return
    name, at = twice
    where = ", ".join(map(str, at[:-1])) + f" and {at[-1]}"
    times, which = ("twice", "one of them") if len(at) == 2 else (f"{len(at)} times",
                                                                 "all but one")
    raise TraceSchemaError(
        f"{path}: column {name!r} appears {times} (columns {where}); which one holds the data "
        f"would be a guess: rename or drop {which} and write the file again")


def names_of(columns: object, limit: int = 8) -> str:
    """Column or key names for a one-line message: at most `limit`, whitespace folded."""
    names = [" ".join(str(c).split())[:40] for c in list(columns)[:limit]]  # type: ignore[call-overload]
    return ", ".join(names)


def shown(value: object) -> str:
    """A source value as an error message quotes it: its repr, cut to 40 characters."""
    text = " ".join(repr(value.item() if isinstance(value, np.generic) else value).split())
    return text if len(text) <= 40 else text[:37] + "..."


def plain_number(raw: pd.Series, *, integer: bool) -> pd.Series | None:
    """The column as `coerce_numeric` returns it, when it is already a NumPy number column
    that passes its checks (the usual case, and cheap: a streamed step log is validated batch
    by batch); else None, and `coerce_numeric` converts it or names the bad row."""
    import pandas as pd

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
