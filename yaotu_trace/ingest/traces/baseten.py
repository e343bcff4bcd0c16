"""Baseten's request traces in Parquet, in the schema AIPerf's `baseten_trace` loader reads
(`aiperf/dataset/loader/baseten_trace.py`, `BasetenTrace`): one row per request.

Mapping: `arrival_s` = `timestamp_start_unix_ms`, seconds since the first; `prompt_len` =
`input_tokens`, `output_len` = `output_tokens`; `prompt_block_ids` = `total_hashes` with
`source_block_size` = `block_size` (one value per trace); `session_id` = `provided_session_id`
(else `poor_man_session_id`); `first_token_s` = arrival + `duration_ttft_ms`, `finish_s` =
arrival + `duration_e2e_ms`; `cached_tokens` = `cached_tokens_reference` (the serving
engine's own count); `status` = `aborted` where `request_canceled` is set; `tenant` =
`org_id`; `model` = `model_name`. The prompt text and the other columns are counted in a note.
The file is read in record batches (pyarrow), never whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import as_int64

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

REQUIRED: Final = ("timestamp_start_unix_ms", "input_tokens", "output_tokens")
COLUMNS: Final = {
    "input_tokens": "prompt_len", "output_tokens": "output_len",
    "cached_tokens_reference": "cached_tokens", "org_id": "tenant", "model_name": "model",
}
TIMES: Final = {"duration_ttft_ms": "first_token_s", "duration_e2e_ms": "finish_s"}
USED: Final = frozenset({*REQUIRED, *COLUMNS, *TIMES, "total_hashes", "block_size",
                         "provided_session_id", "poor_man_session_id", "request_canceled"})
FIX: Final = "pass the Parquet export in the schema of AIPerf's baseten_trace loader"


def read_baseten(path: Path) -> RawTrace:
    """Every row of the Parquet file (see the module docstring)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise TraceReadError(f"{path}: cannot read the Parquet file ({str(exc)[:80]}); copy it "
                             "again or re-export the trace") from exc
    names = pf.schema_arrow.names
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceSchemaError(f"{path}: no column {', '.join(map(repr, missing))}; {FIX}")
    wanted = [c for c in names if c in USED]
    parts = [_part(batch.to_pandas()) for batch in pf.iter_batches(columns=wanted)]
    df = pd.concat(parts, ignore_index=True)
    df[SOURCE_ROW] = range(1, len(df) + 1)  # rows counted from 1, as every reader names them
    origin = float(df["arrival_s"].min())
    for column in ("arrival_s", "first_token_s", "finish_s"):
        if column in df:
            df[column] = df[column] - origin
    sizes = set()
    if "block_size" in df:
        sizes = {int(v) for v in df.pop("block_size").dropna().unique()}
    if len(sizes) > 1:
        raise TraceSchemaError(f"{path}: block_size differs between rows ({sorted(sizes)}); "
                               "give the trace of one deployment")
    notes = ["arrival_s is seconds since the first request (timestamp_start_unix_ms)"]
    if "cached_tokens" in df:
        notes.append("cached_tokens are the serving engine's own per-request prefix-cache hits "
                     "(cached_tokens_reference): the replay is compared with them")
    other = [c for c in names if c not in USED]
    if other:
        notes.append(f"columns of the file that the trace does not use ({pf.metadata.num_rows} "
                     f"rows each): {', '.join(other)}")
    return RawTrace(requests=df, format_name="baseten", row_label="row",
                    source_block_size=next(iter(sizes), None), notes=tuple(notes),
                    source_names={"arrival_s": "timestamp_start_unix_ms",
                                  "prompt_block_ids": "total_hashes", **COLUMNS},
                    source_units={"arrival_s": "ms"})


def _part(frame: Any) -> Any:
    out = frame.rename(columns=COLUMNS)
    out["arrival_s"] = out.pop("timestamp_start_unix_ms") / 1000.0
    for source, column in TIMES.items():
        if source in out:
            out[column] = out["arrival_s"] + out.pop(source) / 1000.0
    session = None
    for key in ("provided_session_id", "poor_man_session_id"):
        if key in out:
            values = out.pop(key)
            session = values if session is None else session.fillna(values)
    if session is not None:
        out["session_id"] = session.map(lambda v: None if v is None or v != v else str(v))
    if "total_hashes" in out:
        out["prompt_block_ids"] = out.pop("total_hashes").map(
            lambda ids: None if ids is None else [as_int64(int(i)) for i in ids])
    if "request_canceled" in out:
        canceled = out.pop("request_canceled").fillna(0).astype(bool)
        out["status"] = canceled.map({True: "aborted", False: "ok"})
    return out


def _is_baseten(footer: bytes) -> bool:
    return all(name.encode() in footer for name in REQUIRED) and b"prompt" in footer


FORMAT = TraceFormatSpec(
    name=TraceFormat.BASETEN,
    description="Baseten request trace (Parquet, AIPerf's `baseten_trace` schema): hashes, "
                "timings, cached tokens",
    reader=read_baseten,
    row_label="row",
    extensions=(".parquet",),
    parquet_footer=_is_baseten,
)
