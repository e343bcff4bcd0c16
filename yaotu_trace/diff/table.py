"""The matched requests side by side, for `trace diff --out`: one row per matched request."""

from __future__ import annotations

import numpy as np
import pandas as pd

from yaotu_trace.data.run_diff import MatchedRequests
from yaotu_trace.data.schema import Trace
from yaotu_trace.diff.conditions import completed_mask


def matched_table(before: Trace, after: Trace, matched: MatchedRequests) -> dict[str, object]:
    """Columns of the matched pairs, in the before run's arrival order: the ids, prompt length,
    and per run TTFT, latency, prefix-cache hits (cached_tokens), preemptions and status
    (`ok` for a completed request, else the run's status, `unfinished` without one)."""
    rows_b = np.asarray(matched.before_rows, dtype=np.int64)
    rows_a = np.asarray(matched.after_rows, dtype=np.int64)
    columns: dict[str, object] = {
        "before_row": rows_b, "after_row": rows_a,
        "before_request_id": _strings(before.requests, "request_id", rows_b),
        "after_request_id": _strings(after.requests, "request_id", rows_a),
        "prompt_len": before.requests["prompt_len"].to_numpy(dtype=np.int64)[rows_b],
    }
    for side, trace, rows in (("before", before, rows_b), ("after", after, rows_a)):
        req = trace.requests
        arrival = _floats(req, "arrival_s", rows)
        columns[f"{side}_ttft_s"] = _floats(req, "first_token_s", rows) - arrival
        columns[f"{side}_latency_s"] = _floats(req, "finish_s", rows) - arrival
        columns[f"{side}_cached_tokens"] = _floats(req, "cached_tokens", rows)
        columns[f"{side}_preemptions"] = _floats(req, "num_preemptions", rows)
        columns[f"{side}_status"] = _status(req, rows)
    return {name: _nullable(values) for name, values in columns.items()}


def _floats(req: pd.DataFrame, column: str, rows: np.ndarray) -> np.ndarray:
    if column not in req.columns:
        return np.full(rows.size, np.nan)
    return req[column].to_numpy(dtype=np.float64, na_value=np.nan)[rows]


def _strings(req: pd.DataFrame, column: str, rows: np.ndarray) -> list[str | None]:
    if column not in req.columns:
        return [None] * rows.size
    values = req[column].astype("string").iloc[rows]
    return [None if v is pd.NA else str(v) for v in values]


def _status(req: pd.DataFrame, rows: np.ndarray) -> list[str]:
    done = completed_mask(req)[rows]
    given = (req["status"].astype("string").iloc[rows].tolist() if "status" in req.columns
             else [pd.NA] * rows.size)
    return ["ok" if ok else ("unfinished" if s is pd.NA or s == "ok" else str(s))
            for ok, s in zip(done.tolist(), given, strict=True)]


def _nullable(values: object) -> object:
    """NaN as a missing value, so that the written table has nulls, not NaN."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return [None if not np.isfinite(v) else float(v) for v in values]
    return values
