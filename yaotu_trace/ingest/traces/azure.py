"""Azure LLM inference trace (2023 and 2024) CSV: absolute wall-clock strings and two lengths.

Columns are `TIMESTAMP` (`YYYY-MM-DD HH:MM:SS.fffffff`, 100 ns resolution, no timezone),
`ContextTokens` (prompt length) and `GeneratedTokens` (output length). There is no request id,
tenant, session or prompt content, so prefix reuse cannot be measured from these files.

`arrival_s` is seconds since the earliest `TIMESTAMP`, computed in integer nanoseconds so the
sub-second digits survive; the absolute start is kept as a note. The clock is assumed to be
neither UTC nor local time: the string is reported as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.csv_source import read_source_csv

_TIMESTAMP: Final = "TIMESTAMP"
_PROMPT: Final = "ContextTokens"
_OUTPUT: Final = "GeneratedTokens"
# Python's strptime rejects 7 fractional digits; pandas' parser keeps them to the nanosecond.
TIMESTAMP_FORMAT: Final = "%Y-%m-%d %H:%M:%S.%f"
WHOLE_SECOND_FORMAT: Final = "%Y-%m-%d %H:%M:%S"
_FIRST_DATA_LINE: Final = 2  # line 1 is the header


def read_azure(path: Path) -> RawTrace:
    """Map TIMESTAMP → arrival_s (s since the earliest row); the token counts → lengths."""
    df = read_source_csv(path, (_TIMESTAMP, _PROMPT, _OUTPUT),
                         f"an Azure LLM trace has the header {_TIMESTAMP},{_PROMPT},{_OUTPUT}",
                         dtype={_TIMESTAMP: "string"})
    lines = np.arange(_FIRST_DATA_LINE, len(df) + _FIRST_DATA_LINE)
    stamps = df[_TIMESTAMP].str.strip()
    arrival_ns = _parse_timestamps_ns(stamps, path, lines)
    start = int(np.argmin(arrival_ns)) if len(arrival_ns) else 0
    out = pd.DataFrame(
        {
            # Subtract in int64 ns first: float seconds since 1970 would lose the 100 ns digits.
            "arrival_s": (arrival_ns - arrival_ns[start]) / 1e9 if len(arrival_ns) else [],
            "prompt_len": df[_PROMPT],
            "output_len": df[_OUTPUT],
            SOURCE_ROW: lines,
        }
    )
    notes: tuple[str, ...] = ()
    if len(df):
        notes = (
            f"arrival_s is seconds since {stamps.iloc[start]} (the earliest {_TIMESTAMP}; "
            "time zone not stated by the source)",
        )
    return RawTrace(requests=out, format_name="azure", row_label="line", notes=notes,
                    source_names={"arrival_s": _TIMESTAMP, "prompt_len": _PROMPT,
                                  "output_len": _OUTPUT})


def _parse_timestamps_ns(stamps: pd.Series, path: Path, lines: np.ndarray) -> np.ndarray:
    """Parse the wall-clock strings to int64 ns since the epoch, naming the first bad line."""
    parsed = pd.to_datetime(stamps, format=TIMESTAMP_FORMAT, errors="coerce")
    retry = parsed.isna() & stamps.notna()
    if retry.any():
        # NOTE: a whole-second value has no fractional part at all; accept it rather than fail.
        whole = pd.to_datetime(stamps.where(retry), format=WHOLE_SECOND_FORMAT, errors="coerce")
        parsed = parsed.fillna(whole)
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        pos = int(bad[0])
        value = stamps.iloc[pos]
        what = "value is missing" if pd.isna(value) else f"{str(value)[:40]!r} is not a timestamp"
        raise TraceSchemaError(
            f"{path}: line {int(lines[pos])}, column '{_TIMESTAMP}': {what}; "
            "write it as YYYY-MM-DD HH:MM:SS.fffffff (e.g. 2023-11-16 18:17:03.9799600)"
        )
    return np.asarray(parsed.dt.as_unit("ns").astype("int64").to_numpy(), dtype=np.int64)


def _is_azure_header(columns: set[str]) -> bool:
    return {_TIMESTAMP, _PROMPT, _OUTPUT} <= columns


FORMAT = TraceFormatSpec(
    name=TraceFormat.AZURE,
    description="Azure LLM inference trace CSV (2023, 2024): wall-clock arrivals and two lengths",
    reader=read_azure,
    row_label="line",
    csv_header=_is_azure_header,
)
