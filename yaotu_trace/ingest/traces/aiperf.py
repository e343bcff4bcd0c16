"""AIPerf's per-request export, `profile_export.jsonl`: one record per request sent.

Each line is AIPerf's `MetricRecordInfo` (ai-dynamo/aiperf `aiperf/common/models/
record_models.py`): `metadata` (`x_request_id`, `x_correlation_id`, `request_start_ns` and
`request_end_ns` as wall-clock ns, `was_cancelled`, ...), `metrics` (tag -> `{"value", "unit"}`,
in display units such as ms) and `error` (`code`, `type`, `message`, or null). Mapping:

- `arrival_s` = `request_start_ns` less the earliest start in the file, in s;
- `first_token_s` = `arrival_s + time_to_first_token`;
- `token_times_s` = `first_token_s` followed by the running sum of `inter_chunk_latency`: one
  time per streamed chunk, as AIPerf measures it (a chunk may carry several tokens; a note
  counts the requests whose chunk count differs from `output_sequence_length`);
- `finish_s` = `arrival_s + request_latency`, else `request_end_ns`;
- `prompt_len` = the server's `usage_prompt_tokens` when AIPerf saved it (newer releases),
  else `input_sequence_length`, AIPerf's own count (`error_isl` for a failed request);
  `output_len` = `usage_completion_tokens`, else `output_sequence_length` (else
  `output_token_count`), 0 for a failed request, which has none. The server's counts come
  first because they are what the engine prefilled and decoded (they include the chat
  template, which a client tokenizer does not see);
- `request_id` = `x_request_id` (else `session_num`); `session_id` = `x_correlation_id`;
- records of the `warmup` phase are left out, as AIPerf's own statistics leave them out;
- `status` = "ok", "aborted" when AIPerf cancelled the request (`was_cancelled`), else "error"
  when `error` is set; `error` = "type (code): message".

A metric's unit is read from the record (`ns`, `us`, `ms`, `sec`); another time unit is an
error naming the line. AIPerf's run summary, `profile_export_aiperf.json` (each metric's
`unit`, `avg`, percentiles, ...), has no requests: `trace analyze` shows it as a summary
(`ingest.telemetry.bench_summary`) and the reader refuses it, naming `profile_export.jsonl`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from yaotu_trace.data.compressed import format_suffix, read_text
from yaotu_trace.data.jsonl import read_json_lines
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.telemetry import bench_summary as bs
from yaotu_trace.ingest.telemetry.bench_summary import BenchSummary, finite_numbers

SECONDS_PER_UNIT: Final = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}
EXPORT_HINT: Final = "pass AIPerf's profile_export.jsonl as written"
SUMMARY_HINT: Final = "pass the profile_export.jsonl of the same artifacts folder"


def read_aiperf(path: Path) -> RawTrace:
    """Turn AIPerf's per-request records into canonical requests, failed ones included."""
    if _summary_document(path) is not None:
        raise TraceSchemaError(
            f"{path}: AIPerf's run summary (aggregates, no per-request records): `trace analyze` "
            f"shows what it holds; this command needs the requests, {SUMMARY_HINT}"
        )
    records, lines = read_json_lines(path)
    # A file of warmup records only is read as it is.
    kept = [i for i, r in enumerate(records) if _phase(r) != "warmup"] or range(len(records))
    warmup = len(records) - len(kept)
    records, lines = [records[i] for i in kept], [lines[i] for i in kept]
    starts_ns = [_start_ns(r, path, line) for r, line in zip(records, lines, strict=True)]
    origin_ns = min(starts_ns)
    rows = [_request(r, path, line, (start - origin_ns) * 1e-9)
            for r, line, start in zip(records, lines, starts_ns, strict=True)]
    out = pd.DataFrame.from_records(rows)
    notes = _notes(out)
    if warmup:
        notes.insert(0, f"{warmup} warmup request(s) are left out, as AIPerf leaves them "
                        "out of its statistics (benchmark_phase 'warmup')")
    return RawTrace(requests=out, format_name="aiperf", row_label="line", notes=tuple(notes))


def _phase(record: dict[str, Any]) -> object:
    meta = record.get("metadata")
    return meta.get("benchmark_phase") if isinstance(meta, dict) else None


def _request(record: dict[str, Any], path: Path, line: int, arrival_s: float) -> dict[str, Any]:
    """One canonical row; lengths are left raw so validation names a bad value."""
    meta, metrics = record["metadata"], _metrics(record, path, line)
    error = record.get("error")
    row: dict[str, Any] = {
        "request_id": str(meta.get("x_request_id") or meta.get("session_num")),
        "arrival_s": arrival_s,
        SOURCE_ROW: line,
    }
    if meta.get("x_correlation_id"):
        row["session_id"] = str(meta["x_correlation_id"])
    if error or meta.get("was_cancelled"):
        row["prompt_len"] = _value(metrics, "error_isl", "input_sequence_length")
        row["output_len"] = 0
        row["status"] = "aborted" if meta.get("was_cancelled") else "error"
        if isinstance(error, dict):
            row["error"] = _error_text(error)
        return row
    # The server's counts when it sent `usage`: what the engine prefilled and decoded.
    row["prompt_len"] = _value(metrics, "usage_prompt_tokens", "input_sequence_length")
    row["output_len"] = _value(metrics, "usage_completion_tokens", "output_sequence_length",
                               "output_token_count")
    row["status"] = "ok"
    ttft_s = _seconds(metrics, "time_to_first_token", path, line)
    if ttft_s is not None:
        row["first_token_s"] = arrival_s + ttft_s
        gaps_s = _gaps(metrics, path, line)
        row["token_times_s"] = (row["first_token_s"] +
                                np.concatenate(([0.0], np.cumsum(gaps_s)))).tolist()
    latency_s = _seconds(metrics, "request_latency", path, line)
    if latency_s is not None:
        row["finish_s"] = arrival_s + latency_s
    elif isinstance(meta.get("request_end_ns"), int) and meta["request_end_ns"] is not True:
        row["finish_s"] = arrival_s + (meta["request_end_ns"] - meta["request_start_ns"]) * 1e-9
    return row


def _start_ns(record: dict[str, Any], path: Path, line: int) -> int:
    meta = record.get("metadata")
    start = meta.get("request_start_ns") if isinstance(meta, dict) else None
    if isinstance(start, bool) or not isinstance(start, int):
        raise TraceSchemaError(
            f"{path}: line {line}, field 'metadata.request_start_ns': "
            f"{str(start)[:40]!r} is not a whole number of ns; {EXPORT_HINT}"
        )
    return start


def _metrics(record: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    metrics = record.get("metrics")
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TraceSchemaError(
            f"{path}: line {line}, field 'metrics': expected an object of "
            f"{{\"value\", \"unit\"}} per metric, got {type(metrics).__name__}; {EXPORT_HINT}"
        )
    return metrics


def _value(metrics: dict[str, Any], *tags: str) -> Any:
    """The raw value of the first tag present (None when none is), for validation to judge."""
    for tag in tags:
        entry = metrics.get(tag)
        if isinstance(entry, dict) and "value" in entry:
            return entry["value"]
    return None


def _seconds(metrics: dict[str, Any], tag: str, path: Path, line: int) -> float | None:
    """A time metric in s, or None when the record has none."""
    entry = metrics.get(tag)
    if entry is None:
        return None
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceSchemaError(
            f"{path}: line {line}, metric '{tag}': {str(value)[:40]!r} is not a number; "
            f"{EXPORT_HINT}"
        )
    return float(value) * _unit_seconds(entry, tag, path, line)


def _gaps(metrics: dict[str, Any], path: Path, line: int) -> np.ndarray:
    entry = metrics.get("inter_chunk_latency")
    if entry is None:
        return np.zeros(0)

    gaps = finite_numbers(entry.get("value") if isinstance(entry, dict) else None)
    if gaps is None:
        raise TraceSchemaError(
            f"{path}: line {line}, metric 'inter_chunk_latency': expected a list of times "
            f"between streamed chunks, got {str(entry)[:40]!r}; {EXPORT_HINT}"
        )
    scale = _unit_seconds(entry, "inter_chunk_latency", path, line)
    return gaps * scale


def _unit_seconds(entry: dict[str, Any], tag: str, path: Path, line: int) -> float:
    unit = entry.get("unit")
    if not isinstance(unit, str) or unit not in SECONDS_PER_UNIT:
        raise TraceSchemaError(
            f"{path}: line {line}, metric '{tag}': unit {str(unit)[:20]!r} is not a time unit "
            f"({', '.join(SECONDS_PER_UNIT)}); {EXPORT_HINT}"
        )
    return SECONDS_PER_UNIT[unit]


def _error_text(error: dict[str, Any]) -> str:
    kind = error.get("type") or "error"
    code = f" ({error['code']})" if error.get("code") is not None else ""
    return f"{kind}{code}: {error.get('message', '')}".rstrip(": ")


def _notes(out: pd.DataFrame) -> list[str]:
    notes = ["arrival_s is seconds since the first request was sent (AIPerf wall clock)"]
    failed = out["status"] != "ok"
    if failed.any():
        aborted = int((out["status"] == "aborted").sum())
        notes.append(
            f"{int(failed.sum())} of {len(out)} requests failed ({aborted} cancelled by AIPerf); "
            "they are kept as rows with their status and error, with no timings"
        )
    if "token_times_s" in out.columns:
        chunked = sum(
            1 for times, n in zip(out["token_times_s"], out["output_len"], strict=True)
            if isinstance(times, list) and isinstance(n, int) and len(times) != n
        )
        if chunked:
            notes.append(
                f"{chunked} request(s) streamed a chunk count other than output_len: their "
                "token_times_s hold one time per chunk, so their inter-token gaps are AIPerf's "
                "inter-chunk latencies"
            )
    return notes


# The run summary's metrics shown first, tag -> (short name, long name); the others follow.
SUMMARY_DISTRIBUTIONS: Final = {
    "time_to_first_token": ("TTFT", "time to first token"),
    "time_to_second_token": ("TTST", "time to second token"),
    "inter_token_latency": ("ITL", "inter-token latency, (latency - TTFT) / (tokens - 1)"),
    "inter_chunk_latency": ("ICL", "inter-chunk latency"),
    "request_latency": ("E2EL", "end-to-end request latency"),
    "input_sequence_length": ("ISL", "input sequence length"),
    "output_sequence_length": ("OSL", "output sequence length"),
    "usage_prompt_tokens": ("server ISL", "prompt tokens the server reported"),
    "usage_completion_tokens": ("server OSL", "completion tokens the server reported"),
}


def read_aiperf_summary(path: Path) -> BenchSummary | None:
    """AIPerf's `profile_export_aiperf.json`: every scalar metric and the main distributions
    with the units AIPerf gives; None for any other file."""
    doc = _summary_document(path)
    if doc is None:
        return None
    metrics = {k: v for k, v in doc.items()
               if isinstance(v, dict) and isinstance(v.get("unit"), str)}
    scalars = {k: v for k, v in metrics.items() if set(v) <= {"unit", "avg"} and "avg" in v}
    totals = tuple(bs.BenchValue(key=k, label=k.replace("_", " "), value=float(v["avg"]),
                                 unit=v["unit"]) for k, v in scalars.items()
                   if bs.is_number(v["avg"]))
    spread = {k: v for k, v in metrics.items() if k not in scalars}
    dists = [bs.distribution(short, long, spread[k]["unit"], _renamed(spread[k]))
             for k, (short, long) in SUMMARY_DISTRIBUTIONS.items() if k in spread]
    others = [k for k in spread if k not in SUMMARY_DISTRIBUTIONS]
    run = bs.values(doc, {"aiperf_version": ("AIPerf version", ""),
                          "start_time": ("start", ""), "end_time": ("end", "")},
                    numbers_only=False)
    notes = (f"{len(others)} more metrics with statistics are in the file: "
             + ", ".join(others[:12]) + (", ..." if len(others) > 12 else ""),) if others else ()
    return bs.BenchSummary(tool="AIPerf", format_name=TraceFormat.AIPERF.value, run=run,
                           totals=totals, latencies=tuple(d for d in dists if d is not None),
                           fix=SUMMARY_HINT, notes=notes)


def _renamed(stats: dict[str, Any]) -> dict[str, Any]:
    """AIPerf's statistics under this tool's names: `avg` is the mean, `p50` the median;
    `count` and `sum` are not statistics of the values' spread."""
    names = {"avg": "mean"}
    return {names.get(k, k): v for k, v in stats.items() if k not in ("unit", "count", "sum")}


def _summary_document(path: Path) -> dict[str, Any] | None:
    """The run summary as one JSON object, or None when the file is not one."""
    if format_suffix(path) != ".json":
        return None
    try:
        doc = json.loads(read_text(path, "pass AIPerf's profile_export_aiperf.json as written"))
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and "aiperf_version" in doc else None


def _is_aiperf_summary(head: str) -> bool:
    return '"aiperf_version"' in head and '"schema_version"' in head


def _is_aiperf_record(keys: set[str]) -> bool:
    # Newer releases add `trace_data` and `spec_decode_acceptance` beside these.
    return {"metadata", "metrics"} <= keys and "arrival_s" not in keys


FORMAT = TraceFormatSpec(
    name=TraceFormat.AIPERF,
    description="AIPerf `profile_export.jsonl`: one record per request, with its metrics",
    reader=read_aiperf,
    row_label="line",
    json_keys=_is_aiperf_record,
    json_document=_is_aiperf_summary,
    summary=read_aiperf_summary,
)
