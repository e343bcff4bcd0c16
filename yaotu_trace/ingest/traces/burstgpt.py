"""BurstGPT CSV (Azure OpenAI GPT usage): relative second timestamps, model, lengths, log type.

Columns are read by name because release 3 inserts `Session ID` and `Elapsed time` in the
middle of the header. Mapping:

- `Timestamp` (s from 00:00 of the first day; int in `_1`, float later) → `arrival_s`;
- `Model` (`ChatGPT` or `GPT-4`) → `model`;
- `Request tokens` / `Response tokens` → `prompt_len` / `output_len`;
- `Log Type` (`Conversation log` or `API log`) → `tenant`: the two logs are different client
  populations (interactive chat versus programmatic API calls), the axis the publisher's own
  statistics are split by;
- `Session ID` (release 3, conversation rows only) → `session_id`;
- `Elapsed time` (release 3, s from submission to the full response, not TTFT) →
  `finish_s = arrival_s + Elapsed time`.

`Response tokens == 0` marks a failed request. Those rows stay, with `status` `error` and an
`error` text saying why, so that the profile counts them in the success rate and leaves them out
of every latency and length figure (`data/outcome.py`); a note counts them. Dropping them, as
the publisher's `without_fails` files do, would make a run that lost requests look faster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.csv_source import read_source_csv

_TIMESTAMP: Final = "Timestamp"
MODEL: Final = "Model"
REQUEST_TOKENS: Final = "Request tokens"
RESPONSE_TOKENS: Final = "Response tokens"
TOTAL_TOKENS: Final = "Total tokens"
LOG_TYPE: Final = "Log Type"
SESSION_ID: Final = "Session ID"
ELAPSED: Final = "Elapsed time"
_REQUIRED: Final = (_TIMESTAMP, REQUEST_TOKENS, RESPONSE_TOKENS)
_FIRST_DATA_LINE: Final = 2  # line 1 is the header
FAILED_ERROR: Final = f"no response ('{RESPONSE_TOKENS}' 0: BurstGPT's mark of a failed request)"


def read_burstgpt(path: Path) -> RawTrace:
    """Map the BurstGPT columns by name; failed requests (Response tokens == 0) get status
    `error`."""
    df = read_source_csv(path, _REQUIRED,
                         f"a BurstGPT file has {_TIMESTAMP}, {MODEL}, {REQUEST_TOKENS}, "
                         f"{RESPONSE_TOKENS}, {TOTAL_TOKENS}, {LOG_TYPE}",
                         dtype={MODEL: "string", LOG_TYPE: "string", SESSION_ID: "string"})
    out = pd.DataFrame(
        {
            "arrival_s": df[_TIMESTAMP],
            "prompt_len": df[REQUEST_TOKENS],
            "output_len": df[RESPONSE_TOKENS],
            SOURCE_ROW: np.arange(_FIRST_DATA_LINE, len(df) + _FIRST_DATA_LINE),
        }
    )
    if MODEL in df.columns:
        out["model"] = df[MODEL].str.strip()
    if LOG_TYPE in df.columns:
        out["tenant"] = df[LOG_TYPE].str.strip()
    if SESSION_ID in df.columns:
        out["session_id"] = df[SESSION_ID].str.strip()
    if ELAPSED in df.columns:
        # Non-numbers stay visible to validation, which names the line.
        elapsed_s = pd.to_numeric(df[ELAPSED], errors="coerce")
        arrival_s = pd.to_numeric(df[_TIMESTAMP], errors="coerce")
        out["finish_s"] = (arrival_s + elapsed_s).where(elapsed_s.notna(), df[ELAPSED])

    notes: list[str] = []
    response = pd.to_numeric(df[RESPONSE_TOKENS], errors="coerce")
    failed = (response == 0).to_numpy()
    n_failed = int(failed.sum())
    if n_failed:
        out["status"] = pd.Series(np.where(failed, "error", "ok"), dtype="string")
        out["error"] = pd.Series(FAILED_ERROR, index=out.index, dtype="string").where(failed)
        notes.append(
            f"{n_failed} failed request(s) ('{RESPONSE_TOKENS}' == 0, "
            f"{100.0 * n_failed / len(df):.1f}% of rows) are kept with status 'error': counted "
            "in the success rate, left out of latency and length figures"
        )
    notes.extend(_total_mismatch_note(df))
    return RawTrace(
        requests=out,
        format_name="burstgpt",
        row_label="line",
        notes=tuple(notes),
        source_names={"arrival_s": _TIMESTAMP, "prompt_len": REQUEST_TOKENS,
                      "output_len": RESPONSE_TOKENS},
    )


def _total_mismatch_note(df: pd.DataFrame) -> list[str]:
    """`Total tokens` is redundant; a disagreement hints at a shifted or edited column."""
    if TOTAL_TOKENS not in df.columns:
        return []
    total = pd.to_numeric(df[TOTAL_TOKENS], errors="coerce")
    parts = pd.to_numeric(df[REQUEST_TOKENS], errors="coerce") + pd.to_numeric(
        df[RESPONSE_TOKENS], errors="coerce"
    )
    n = int((total.notna() & parts.notna() & (total != parts)).sum())
    if not n:
        return []
    return [
        f"{n} row(s) have '{TOTAL_TOKENS}' != '{REQUEST_TOKENS}' + '{RESPONSE_TOKENS}'; "
        "the two length columns were used"
    ]


def _is_burstgpt_header(columns: set[str]) -> bool:
    return {REQUEST_TOKENS, RESPONSE_TOKENS} <= columns


FORMAT = TraceFormatSpec(
    name=TraceFormat.BURSTGPT,
    description="BurstGPT CSV (Azure OpenAI usage): relative arrivals, model, lengths, log type",
    reader=read_burstgpt,
    row_label="line",
    csv_header=_is_burstgpt_header,
)
