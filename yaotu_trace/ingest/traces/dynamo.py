"""NVIDIA Dynamo's request trace, `DYN_REQUEST_TRACE=1`: schema `dynamo.request.trace.v1`,
rotating gzipped JSON Lines (`/tmp/dynamo-request-trace.NNNNNN.jsonl.gz`; a sink's
`{"timestamp", "event"}` envelope is unwrapped).

Give one segment or the folder of segments (every `.jsonl`/`.jsonl.gz` file whose first record
has the schema, in name order, read as one trace). A `request_end` record's `request` maps to:

- `request_id`; `model`; `session_id` = `agent_context.session_id`;
- `arrival_s` = `request_received_ms`, seconds since the first; `scheduled_s` = arrival +
  `prefill_wait_time_ms`; `first_token_s` = arrival + `ttft_ms`; `finish_s` = arrival +
  `total_time_ms`;
- `prompt_len` = `replay.input_length` (else `input_tokens`), `output_len` = `output_tokens`,
  `cached_tokens` = `cached_tokens` (Dynamo's own count of prefix-cache hits);
- `prompt_block_ids` = `replay.input_sequence_hashes` (unsigned 64-bit, kept as the int64 of
  the same bits), `source_block_size` = `replay.trace_block_size` (one value per trace);
- `prefill_instance`, `decode_instance` = `worker.prefill_worker_id`,
  `worker.decode_worker_id`; `instance` = the decode worker (else the prefill worker);
- `kv_transfer_s` = `kv_transfer_estimated_latency_ms` (Dynamo's estimate, not a measurement).

Tool events (`tool_start`, `tool_end`, `tool_error`) and the request fields the trace does
not use (`avg_itl_ms`, `kv_hit_rate`, `queue_depth`, …) are counted and named in the notes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.data.compressed import format_suffix
from yaotu_trace.data.jsonl import first_record
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import (
    as_int64,
    count_keys,
    fail,
    json_record,
    number,
    text_lines,
    unused_note,
    whole,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

SCHEMA: Final = "dynamo.request.trace.v1"
FIX: Final = "pass the segments Dynamo wrote with DYN_REQUEST_TRACE=1"
USED: Final = frozenset({
    "request_id", "model", "input_tokens", "output_tokens", "cached_tokens",
    "request_received_ms", "prefill_wait_time_ms", "ttft_ms", "total_time_ms",
    "kv_transfer_estimated_latency_ms", "worker", "replay"})
_MS: Final = (("scheduled_s", "prefill_wait_time_ms"), ("first_token_s", "ttft_ms"),
              ("finish_s", "total_time_ms"))


def _unwrap(record: dict[str, Any]) -> dict[str, Any]:
    if "schema" not in record and isinstance(record.get("event"), dict):
        return record["event"]
    return record


def segments(folder: Path) -> list[Path]:
    """The trace's segments in a folder, in name order."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and format_suffix(p) in (".jsonl", ".ndjson"):
            first = first_record(p)
            if first is not None and _unwrap(first).get("schema") == SCHEMA:
                out.append(p)
    return out


def read_dynamo(path: Path) -> RawTrace:
    """Every `request_end` record of the segments (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    files = segments(path) if path.is_dir() else [path]
    if not files:
        raise TraceReadError(f"{path}: no segment of schema {SCHEMA} in this folder; {FIX}")
    rows: list[dict[str, Any]] = []
    events: Counter[str] = Counter()
    unused: Counter[str] = Counter()
    block_sizes: set[int] = set()
    for file in files:
        for line, text in text_lines(file):
            if not text.strip():
                continue
            record = _unwrap(json_record(text, file, "line", line))
            if record.get("schema") != SCHEMA:
                raise fail(file, "line", line, "schema", f"{record.get('schema')!r} is not "
                           f"{SCHEMA!r}", FIX)
            if record.get("event_type") != "request_end":
                events[str(record.get("event_type"))] += 1
                continue
            request = record.get("request")
            if not isinstance(request, dict):
                raise fail(file, "line", line, "request", "missing or not an object", FIX)
            count_keys(unused, request, USED, "request.")
            rows.append(_row(request, record, (file, line), block_sizes))
    if not rows:
        raise TraceSchemaError(f"{path}: no request_end record; {FIX}")
    if len(block_sizes) > 1:
        raise TraceSchemaError(f"{path}: replay.trace_block_size differs between records "
                               f"({sorted(block_sizes)}); give the segments of one deployment")
    df = pd.DataFrame.from_records(rows).rename(columns={"_line": SOURCE_ROW})
    origin = float(df["arrival_s"].min())
    for column in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        if column in df:
            df[column] = df[column] - origin
    notes = ["arrival_s is seconds since the first request was received (Dynamo's "
             "request_received_ms)"]
    if "cached_tokens" in df:
        notes.append("cached_tokens are Dynamo's own per-request prefix-cache hits: the replay "
                     "is compared with them")
    if "kv_transfer_s" in df:
        notes.append("kv_transfer_s is Dynamo's kv_transfer_estimated_latency_ms, an estimate")
    if len(files) > 1:
        notes.append(f"{len(files)} segments read as one trace, in name order")
    if events:
        notes.append("records other than request_end are not requests and are not used: "
                     + ", ".join(f"{n} {k}" for k, n in events.most_common()))
    return RawTrace(requests=df, format_name="dynamo", row_label="line",
                    source_block_size=next(iter(block_sizes), None),
                    notes=tuple(notes) + unused_note(unused, len(rows), "fields"),
                    source_names={"prompt_block_ids": "replay.input_sequence_hashes",
                                  "arrival_s": "request_received_ms"})


def _row(request: dict[str, Any], record: dict[str, Any], where: tuple[Path, int],
         block_sizes: set[int]) -> dict[str, Any]:
    file, line = where

    def field_(key: str, value: Any) -> float:
        return number(value, file, "line", line, f"request.{key}", FIX)

    received = request.get("request_received_ms", record.get("event_time_unix_ms"))
    arrival = field_("request_received_ms", received) / 1000.0
    row: dict[str, Any] = {"request_id": str(request.get("request_id")), "arrival_s": arrival,
                           "_line": line}
    replay: dict[str, Any] = request["replay"] if isinstance(request.get("replay"), dict) else {}
    length = replay.get("input_length", request.get("input_tokens"))
    row["prompt_len"] = whole(length, file, "line", line, "request.replay.input_length", FIX)
    row["output_len"] = whole(request.get("output_tokens"), file, "line", line,
                              "request.output_tokens", FIX)
    if request.get("cached_tokens") is not None:
        row["cached_tokens"] = whole(request["cached_tokens"], file, "line", line,
                                     "request.cached_tokens", FIX)
    if request.get("model"):
        row["model"] = str(request["model"])
    context = record.get("agent_context")
    if isinstance(context, dict) and context.get("session_id"):
        row["session_id"] = str(context["session_id"])
    for column, key in _MS:
        if request.get(key) is not None:
            row[column] = arrival + field_(key, request[key]) / 1000.0
    if request.get("kv_transfer_estimated_latency_ms") is not None:
        row["kv_transfer_s"] = field_("kv_transfer_estimated_latency_ms",
                                      request["kv_transfer_estimated_latency_ms"]) / 1000.0
    worker: dict[str, Any] = request["worker"] if isinstance(request.get("worker"), dict) else {}
    for column, key in (("prefill_instance", "prefill_worker_id"),
                        ("decode_instance", "decode_worker_id")):
        if worker.get(key) is not None:
            row[column] = str(worker[key])
    if "decode_instance" in row or "prefill_instance" in row:
        row["instance"] = row.get("decode_instance", row.get("prefill_instance"))
    hashes = replay.get("input_sequence_hashes")
    if isinstance(hashes, list):
        if any(isinstance(h, bool) or not isinstance(h, int) for h in hashes):
            raise fail(file, "line", line, "request.replay.input_sequence_hashes",
                       "holds a value that is not a whole number", FIX)
        row["prompt_block_ids"] = [as_int64(h) for h in hashes]
        block_sizes.add(whole(replay.get("trace_block_size"), file, "line", line,
                              "request.replay.trace_block_size", FIX))
    return row


def _is_dynamo_record(keys: set[str]) -> bool:
    return {"schema", "event_type", "event_time_unix_ms"} <= keys or keys == {"timestamp",
                                                                               "event"}


def _is_dynamo_folder(path: Path) -> bool:
    return bool(segments(path))


FORMAT = TraceFormatSpec(
    name=TraceFormat.DYNAMO,
    description="NVIDIA Dynamo request trace (`DYN_REQUEST_TRACE=1`, `dynamo.request.trace.v1`): "
                "a gzipped segment or their folder",
    reader=read_dynamo,
    row_label="line",
    json_keys=_is_dynamo_record,
    folder=_is_dynamo_folder,
)
