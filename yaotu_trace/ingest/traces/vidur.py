"""Vidur request trace CSV (`data/processed_traces/` of microsoft/vidur): lengths, maybe arrivals.

Vidur's trace replay reads `arrived_at` (s since the start of the trace, before its
`time_scale_factor`), `num_prefill_tokens` and `num_decode_tokens`. Mapping:

- `arrived_at` → `arrival_s`;
- `num_prefill_tokens` / `num_decode_tokens` → `prompt_len` / `output_len`.

Vidur also ships length-only tables (`num_prefill_tokens,num_decode_tokens,num_total_tokens,
pd_ratio`, used by its trace length generator with a synthetic arrival process): those have no
`arrived_at`, and are read as a lengths-only table (length profile only). The redundant
`num_total_tokens` is checked against the two lengths and a disagreement is a note. Vidur
clips lengths to at least 1 and to `max_tokens` when it replays; the file's own numbers are
kept here.
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

ARRIVED_AT: Final = "arrived_at"
PREFILL: Final = "num_prefill_tokens"
DECODE: Final = "num_decode_tokens"
TOTAL: Final = "num_total_tokens"
_FIRST_DATA_LINE: Final = 2  # line 1 is the header


def read_vidur(path: Path) -> RawTrace:
    """Map arrived_at (s) → arrival_s and the prefill/decode token counts → the lengths."""
    df = read_source_csv(path, (PREFILL, DECODE),
                         f"a Vidur trace has {ARRIVED_AT},{PREFILL},{DECODE}")
    out = pd.DataFrame(
        {
            "prompt_len": df[PREFILL],
            "output_len": df[DECODE],
            SOURCE_ROW: np.arange(_FIRST_DATA_LINE, len(df) + _FIRST_DATA_LINE),
        }
    )
    # arrival_s is named even when absent, so a command that needs it asks for `arrived_at`.
    names = {"arrival_s": ARRIVED_AT, "prompt_len": PREFILL, "output_len": DECODE}
    if ARRIVED_AT in df.columns:
        out.insert(0, "arrival_s", df[ARRIVED_AT])
    return RawTrace(requests=out, format_name="vidur", row_label="line",
                    notes=tuple(_total_mismatch_note(df)), source_names=names)


def _total_mismatch_note(df: pd.DataFrame) -> list[str]:
    """`num_total_tokens` is redundant; a disagreement hints at a shifted or edited column."""
    if TOTAL not in df.columns:
        return []
    total = pd.to_numeric(df[TOTAL], errors="coerce")
    parts = pd.to_numeric(df[PREFILL], errors="coerce") + pd.to_numeric(df[DECODE],
                                                                         errors="coerce")
    n = int((total.notna() & parts.notna() & (total != parts)).sum())
    if not n:
        return []
    return [f"{n} row(s) have '{TOTAL}' != '{PREFILL}' + '{DECODE}'; "
            "the two length columns were used"]


def _is_vidur_header(columns: set[str]) -> bool:
    return {PREFILL, DECODE} <= columns


FORMAT = TraceFormatSpec(
    name=TraceFormat.VIDUR,
    description="Vidur request trace CSV: arrivals in s (or none) and prefill/decode lengths",
    reader=read_vidur,
    row_label="line",
    csv_header=_is_vidur_header,
)
