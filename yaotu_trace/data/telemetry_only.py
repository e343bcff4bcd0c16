"""A diagnosis from telemetry alone: the empty request table that stands for "no trace".

`trace diagnose --metrics server.log` without a TRACE judges the axes from the engine's own
telemetry (a server log, a Prometheus export or scrape, a step log). The analyzers read an
`AxisInput` built from a `Trace`; this one has the canonical required columns and no row, so
every rule that needs requests finds none and the telemetry's rules decide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace.data.report import TELEMETRY_ONLY
from yaotu_trace.data.schema import Trace

if TYPE_CHECKING:
    from yaotu_trace.data.steplog import StepLog


def telemetry_trace(path: str, *, steps: StepLog | None = None,
                    notes: tuple[str, ...] = ()) -> Trace:
    """No request, only telemetry: `path` names the telemetry judged (the report's input)."""
    import pandas as pd

    requests = pd.DataFrame({
        "request_id": pd.Series([], dtype="string"),
        "arrival_s": pd.Series([], dtype="float64"),
        "prompt_len": pd.Series([], dtype="Int64"),
        "output_len": pd.Series([], dtype="Int64"),
    })
    return Trace(table=requests, path=path, format_name=TELEMETRY_ONLY, notes=notes,
                 rows_read=0, steps=steps)


def is_telemetry_only(trace: Trace) -> bool:
    """Whether `trace` is `telemetry_trace`'s: no request trace was given."""
    return trace.format_name == TELEMETRY_ONLY and trace.num_requests == 0
