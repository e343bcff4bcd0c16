"""Which simulated run a table came from: `trace simulate` stamps both tables it writes.

A step log that overlaps its trace in time and computes at least the trace's work may still be
another run's: simulated runs all start at 0 s, and the work check is one-sided by design
(`step_work.py`: a trace may be a subset of the engine's traffic). So `trace simulate` and
`trace generate diag-*` write one id into the Parquet metadata of both the request table and
the step log (`yaotu.run_id`, a hash of the run's request timing and of its step log: the same
trace and options give the same id; two pools that time the requests alike still differ in
their steps' KV blocks), and the metrics export it writes (`--metrics-out`) names it in a
`yaotu:run_info{run_id}` sample. A trace and a step log or export that both carry an id and
differ are refused (exit 3). CSV and JSONL tables have no file metadata, and a table rewritten
by another tool keeps none: the time and work checks then stand alone.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.errors import TraceReadError, TraceSchemaError

if TYPE_CHECKING:
    import pandas as pd

RUN_ID_KEY = b"yaotu.run_id"
# What `run_id` writes; anything else under the key was written by hand or damaged.
_RUN_ID = re.compile(r"[0-9a-f]{16}")
# The columns whose values name a run: when each request arrived, was first scheduled and
# finished, in the engine's own clock.
_TIMING = ("arrival_s", "scheduled_s", "first_token_s", "finish_s")


def run_id(requests: pd.DataFrame, steps: pd.DataFrame | None) -> str:
    """The id of the run that timed `requests` with the step log `steps` (16 hex digits):
    the requests' timing columns and every numeric column of the steps, hashed."""
    digest = hashlib.sha256()
    for frame, columns in ((requests, [c for c in _TIMING if c in requests.columns]),
                           (steps, [] if steps is None else _numeric(steps))):
        if frame is None:
            continue
        digest.update(len(frame).to_bytes(8, "little"))
        for column in columns:
            digest.update(str(column).encode())
            values = np.asarray(frame[column].to_numpy(dtype=float, na_value=np.nan),
                                dtype="<f8")
            digest.update(values.tobytes())
    return digest.hexdigest()[:16]


def _numeric(frame: pd.DataFrame) -> list[str]:
    import pandas as pd

    return [str(c) for c in frame.columns
            if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]


def read_run_id(path: str | Path) -> str | None:
    """The run id in a Parquet file's metadata (None: not Parquet, not a file, or no id)."""
    path = Path(path)
    if path.suffix.lower() != ".parquet" or not path.is_file():
        return None
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):
        return None  # the reader of the file itself says what is wrong with it
    raw = metadata.get(RUN_ID_KEY)
    if raw is None:
        return None
    return checked_id(raw.decode("ascii", "replace"),
                      f"{path}: metadata '{RUN_ID_KEY.decode()}'")


def checked_id(value: str, where: str) -> str:
    """`value` when it is a run id as `run_id` writes it; else refused in one line (the value
    cut to 40 characters), `where` naming the file and the field."""
    if _RUN_ID.fullmatch(value):
        return value
    shown = repr(value[:40]) + (f" (and {len(value) - 40:,} more characters)"
                                if len(value) > 40 else "")
    raise TraceSchemaError(
        f"{where} is {shown}, not a run id (16 hex digits, as trace simulate writes it); "
        "remove it, or write the file again with trace simulate")


def check_same_run(trace_path: str | Path, steps_path: str | Path) -> None:
    """Refuse a step log that `trace simulate` wrote for another run than the trace's."""
    ours = read_run_id(trace_path)
    theirs = read_run_id(steps_path)
    if ours is None or theirs is None or ours == theirs:
        return
    raise TraceReadError(
        f"{steps_path}: the step log is of simulated run {theirs} but {trace_path} is of run "
        f"{ours} ('{RUN_ID_KEY.decode()}' in each file's metadata); they are from different "
        "runs (pass the step log written with this trace: the --steps-out of the same trace "
        "simulate or trace generate)")


def check_steps_and_metrics(steps_path: str | Path, metrics_path: str,
                            theirs: frozenset[str]) -> None:
    """Refuse a step log and a metrics export of two simulated runs given together (with or
    without a trace: telemetry alone is judged from both)."""
    _check_export(f"the step log {steps_path}", steps_path, metrics_path, theirs,
                  "pass the step log and export that one trace simulate or trace generate wrote")


def check_same_run_metrics(trace_path: str | Path, metrics_path: str,
                           theirs: frozenset[str]) -> None:
    """Refuse a metrics export that `trace simulate --metrics-out` wrote for another run
    than the trace's (`theirs`: the runs its `yaotu:run_info` names)."""
    _check_export(str(trace_path), trace_path, metrics_path, theirs,
                  "pass the export written with this trace: the --metrics-out of the same "
                  "trace simulate or trace generate")


def _check_export(named: str, table_path: str | Path, metrics_path: str,
                  theirs: frozenset[str], fix: str) -> None:
    """Refuse an export whose `yaotu:run_info` names runs (`theirs`) other than the one in
    the Parquet table at `table_path` (`named` in the message); no id on either side: no
    check."""
    for value in theirs:
        checked_id(value, f"{metrics_path}: the run_id label of yaotu:run_info")
    ours = read_run_id(table_path)
    if ours is None or not theirs or ours in theirs:
        return
    runs = ", ".join(sorted(theirs))
    raise TraceReadError(
        f"{metrics_path}: the metrics export is of simulated run {runs} (its yaotu:run_info) "
        f"but {named} is of run {ours} ('{RUN_ID_KEY.decode()}' in its metadata); they are "
        f"from different runs ({fix})")
