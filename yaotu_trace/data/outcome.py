"""Which requests succeeded: the one definition every latency and throughput figure uses.

A request is successful when its `status` is missing (the source did not say) or `ok`. A
failed request (`error`, `aborted`, `timeout`, `rejected`) is counted, never timed: a run that
drops a tenth of its requests must not look like a faster run because the slowest ones never
finished.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.data.schema import Trace

OK: Final = "ok"


def has_status(requests: pd.DataFrame) -> bool:
    """Whether the table says the outcome of at least one request."""
    return "status" in requests.columns and bool(requests["status"].notna().any())


def successful_mask(requests: pd.DataFrame) -> np.ndarray:
    """Per request, True when its status is missing or `ok` (every request without a column).

    Reads the validated, lower-cased `status` of `data.schema`.
    """
    if "status" not in requests.columns:
        return np.ones(len(requests), dtype=bool)
    status = requests["status"]
    return (status.isna() | (status == OK)).to_numpy(dtype=bool, na_value=True)


def successful(trace: Trace) -> np.ndarray:
    """`successful_mask` of a trace's requests, without making the table of a trace that says
    no request's outcome (one read without pandas has no `status`)."""
    if not trace.has("status"):
        return np.ones(trace.num_requests, dtype=bool)
    return successful_mask(trace.requests)


def failed_count(requests: pd.DataFrame) -> int:
    """Requests whose status says they failed."""
    return int(len(requests) - successful_mask(requests).sum())
