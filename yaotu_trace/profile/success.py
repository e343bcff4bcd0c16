"""The success section of `trace analyze`: how many requests completed, overall, by status, by
tenant and instance, over time, and the commonest error texts.

Definitions: a request is successful when its `status` is missing or `ok`
(`data.outcome.successful_mask`); success_rate = successful / requests. Windows are
`window_s` wide from the first arrival and hold the requests that arrived in them; the width is
the smallest of `WINDOW_CHOICES_S` that cuts the arrival span into at most `MAX_WINDOWS` (a whole
number of days when even days would be more).
Built only when the trace has a `status` column with at least one value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.schema import STATUS_VALUES, Trace
from yaotu_trace.data.success_profile import ErrorText, SuccessCount, SuccessProfile, SuccessWindow

if TYPE_CHECKING:
    import pandas as pd

# Window widths a reader can say aloud, from a second to a day.
WINDOW_CHOICES_S: Final = (1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0,
                           86400.0)
MAX_WINDOWS: Final = 48
# Groups (tenants, instances) listed: the ones with the most failed requests.
MAX_GROUPS: Final = 20
# Error texts listed, by how many requests share them.
MAX_ERRORS: Final = 5
UNSTATED: Final = "unstated"  # the status key of requests whose source said nothing


def success_profile(trace: Trace) -> SuccessProfile | None:
    """The success section, or None when the trace says nothing of its requests' outcome."""
    if not trace.has("status"):
        return None
    df = trace.requests
    ok = successful_mask(df)
    n, n_ok = len(df), int(ok.sum())
    status = df["status"].fillna(UNSTATED)
    counts = status.value_counts()
    by_status = {s: int(counts.get(s, 0)) for s in (UNSTATED, *STATUS_VALUES)}
    tenants, by_tenant = _groups(df, "tenant", ok)
    instances, by_instance = _groups(df, "instance", ok)
    window_s = windows = None
    if trace.has_arrivals:
        window_s, windows = _windows(df["arrival_s"].to_numpy(dtype=np.float64), ok)
    texts, errors = _error_texts(df, ok)
    return SuccessProfile(
        requests=n, successful=n_ok, failed=n - n_ok, success_rate=n_ok / n,
        by_status=by_status, tenants=tenants, by_tenant=by_tenant, instances=instances,
        by_instance=by_instance, window_s=window_s, windows=windows, error_texts=texts,
        errors=errors,
    )


def _rate(successful: int, requests: int) -> float | None:
    return successful / requests if requests else None


def _groups(df: pd.DataFrame, column: str,
            ok: np.ndarray) -> tuple[int | None, tuple[SuccessCount, ...]]:
    """(distinct groups, the `MAX_GROUPS` with the most failures: most first, then by name)."""
    if column not in df.columns or not df[column].notna().any():
        return None, ()
    import pandas as pd

    frame = pd.DataFrame({"name": df[column].astype("string"), "ok": ok}).dropna()
    grouped = frame.groupby("name", sort=True)["ok"].agg(["size", "sum"])
    grouped["failed"] = grouped["size"] - grouped["sum"]
    ranked = grouped.sort_values("failed", ascending=False, kind="stable").head(MAX_GROUPS)
    rows = tuple(
        SuccessCount(name=str(name), requests=int(r["size"]), successful=int(r["sum"]),
                     success_rate=_rate(int(r["sum"]), int(r["size"])))
        for name, r in ranked.iterrows()
    )
    return len(grouped), rows


def window_width_s(span_s: float, choices: Sequence[float] = WINDOW_CHOICES_S,
                   most: int = MAX_WINDOWS) -> float:
    """The smallest width of `choices` that cuts `span_s` into at most `most` windows; beyond
    the largest, whole multiples of it, so that the count never follows the clock's span."""
    fit = next((w for w in choices if np.floor(span_s / w) + 1 <= most), None)
    if fit is not None:
        return fit
    return choices[-1] * math.ceil(span_s / ((most - 1) * choices[-1]))


def _windows(arrival_s: np.ndarray,
             ok: np.ndarray) -> tuple[float, tuple[SuccessWindow, ...]]:
    """Success per window of arrivals, every window of the span (empty ones included)."""
    t0 = float(arrival_s.min())
    width = window_width_s(float(arrival_s.max()) - t0)
    index = np.floor((arrival_s - t0) / width).astype(np.int64)
    count = int(index.max()) + 1
    requests = np.bincount(index, minlength=count)
    successful = np.bincount(index, weights=ok.astype(np.float64), minlength=count)
    return width, tuple(
        SuccessWindow(start_s=t0 + k * width, requests=int(requests[k]),
                      successful=int(successful[k]),
                      success_rate=_rate(int(successful[k]), int(requests[k])))
        for k in range(count)
    )


def _error_texts(df: pd.DataFrame, ok: np.ndarray) -> tuple[int, tuple[ErrorText, ...]]:
    """(distinct error texts of failed requests, the `MAX_ERRORS` commonest: most first, then
    in order of first appearance)."""
    if "error" not in df.columns:
        return 0, ()
    texts = df["error"].astype("string").str.strip()[~ok]
    texts = texts[texts.notna() & (texts != "")]
    if texts.empty:
        return 0, ()
    counts = texts.value_counts(sort=False)  # in order of first appearance
    ranked = counts.sort_values(ascending=False, kind="stable").head(MAX_ERRORS)
    return len(counts), tuple(ErrorText(error=str(text), requests=int(k))
                              for text, k in ranked.items())
