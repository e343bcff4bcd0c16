"""inference-perf (kubernetes-sigs/inference-perf): its per-request report, its OTel workload
traces, and its lifecycle summaries.

Three JSON documents, told apart by their shape:

- `per_request_lifecycle_metrics.json` (`report.request_lifecycle.per_request: true`), a list of
  `{start_time, end_time, request, response, info, error}` per request
  (`inference_perf/reportgen/base.py`; `info` is `InferenceInfo`, `inference_perf/apis/base.py`).
  Times are the client's `time.perf_counter()` in s. `arrival_s` = `start_time` less the
  earliest; `token_times_s` = `info.response_metrics.chunk_times` on that clock, one time per
  streamed chunk (else `output_token_times`: inference-perf 0.7 repeats a chunk's time once per
  client token there, gaps of 0 that were not measured); `first_token_s` its first entry;
  `finish_s` = `end_time`; `prompt_len` and `output_len` = the server's `usage`
  (`prompt_tokens`, `completion_tokens`) when it sent one, else inference-perf's own count
  (`info.request_metrics.text.input_tokens`, `info.response_metrics.output_tokens`), as
  inference-perf prefers for prompts; `cached_tokens` from the server's `usage`; `adapter` =
  `info.lora_adapter`. An `error` makes the row status "error" (`TimeoutError`: "timeout"),
  `error` = "error_type: error_msg", with no timings.
- An OTel workload trace (`examples/otel/test_traces/`, the input of `trace_session_replay`):
  `{"spans": [...]}` with ISO-8601 `start_time`/`end_time` and GenAI attributes. Each LLM span
  (one with `gen_ai.input.messages` or named `chat ...`) is a request: `arrival_s`/`finish_s`
  from its times, lengths from `gen_ai.usage.prompt_tokens`/`completion_tokens` (or
  `input_tokens`/`output_tokens`), `session_id` = `exgentic.session.id` or the trace id, `model`
  = `gen_ai.request.model`, status "error" when `status.code` is 2 (OTel's ERROR).
- `summary_lifecycle_metrics.json` and `stage_N_lifecycle_metrics.json`: aggregates only, read
  as a summary (`ingest.telemetry.bench_summary`) by `trace analyze`.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pandas as pd

from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.telemetry import bench_summary as bs
from yaotu_trace.ingest.telemetry.bench_summary import BenchSummary
from yaotu_trace.ingest.traces.json_document import read_json_document

PER_REQUEST_HINT: Final = ("enable report.request_lifecycle.per_request in the inference-perf "
                           "config and pass per_request_lifecycle_metrics.json")
PER_REQUEST_HEAD: Final = re.compile(
    r'\s*\[\s*\{\s*"start_time"\s*:\s*[-+\d.eE]+\s*,\s*"end_time"\s*:\s*[-+\d.eE]+\s*,'
    r'\s*"request"\s*:'
)
ISO_SPAN_HEAD: Final = re.compile(r'"spans"\s*:\s*\[.*?"start_time"\s*:\s*"\d{4}-\d\d-\d\dT',
                                  re.DOTALL)
STATUS_OF_ERROR: Final = {"TimeoutError": "timeout", "CancelledError": "aborted"}
OTEL_STATUS_ERROR: Final = 2


def read_inference_perf(path: Path) -> RawTrace:
    """A per-request report or a workload trace; a lifecycle summary is refused in one line."""
    doc = _load(path)
    if isinstance(doc, list):
        return _per_request(doc, path)
    if isinstance(doc, dict) and isinstance(doc.get("spans"), list):
        return _workload_trace(doc["spans"], path)
    if isinstance(doc, dict) and _is_summary(doc):
        raise TraceSchemaError(
            f"{path}: an inference-perf lifecycle summary (aggregates, no per-request rows): "
            f"`trace analyze` shows what it holds; this command needs the requests, "
            f"{PER_REQUEST_HINT}"
        )
    raise TraceSchemaError(
        f"{path}: not an inference-perf report this tool reads (a per-request list, a workload "
        f"trace with 'spans', or a lifecycle summary); {PER_REQUEST_HINT}"
    )


def _load(path: Path) -> Any:
    return read_json_document(path, "pass an inference-perf report saved as UTF-8 JSON")


# --- per_request_lifecycle_metrics.json -------------------------------------------------------


def _per_request(records: list[Any], path: Path) -> RawTrace:
    if not records:
        raise TraceSchemaError(f"{path}: the report lists no requests; {PER_REQUEST_HINT}")
    starts = [_seconds(r.get("start_time") if isinstance(r, dict) else None,
                       f"request {i}, field 'start_time'", path) for i, r in enumerate(records)]
    origin = min(starts)
    rows = [_lifecycle_row(r, i, path, start - origin, origin)
            for i, (r, start) in enumerate(zip(records, starts, strict=True))]
    out = pd.DataFrame.from_records(rows)
    return RawTrace(requests=out, format_name="inference-perf", row_label="request",
                    notes=tuple(_lifecycle_notes(out)))


def _lifecycle_row(record: dict[str, Any], i: int, path: Path, arrival_s: float,
                   origin: float) -> dict[str, Any]:
    info = _object(record.get("info"))
    response = _object(info.get("response_metrics"))
    text = _object(_object(info.get("request_metrics")).get("text"))
    usage = _object(response.get("server_usage"))
    row: dict[str, Any] = {
        "request_id": f"r{i}",
        "arrival_s": arrival_s,
        "prompt_len": usage["prompt_tokens"] if usage.get("prompt_tokens") is not None
        else text.get("input_tokens", info.get("input_tokens")),
        "output_len": usage["completion_tokens"] if usage.get("completion_tokens") is not None
        else response.get("output_tokens"),
        SOURCE_WHERE: f"request {i}",
    }
    if info.get("lora_adapter"):
        row["adapter"] = str(info["lora_adapter"])
    cached = _object(usage.get("prompt_tokens_details"))
    if cached.get("cached_tokens") is not None:
        row["cached_tokens"] = cached["cached_tokens"]
    error = record.get("error")
    if error:
        kind = str(_object(error).get("error_type") or "error")
        row["status"] = STATUS_OF_ERROR.get(kind, "error")
        row["error"] = f"{kind}: {_object(error).get('error_msg', '')}".rstrip(": ")
        if row["output_len"] is None:
            row["output_len"] = 0
        return row
    row["status"] = "ok"
    field = "chunk_times" if response.get("chunk_times") else "output_token_times"
    times = response.get(field)
    if isinstance(times, list) and times:
        chunk_s = [_seconds(t, f"request {i}, field '{field}'", path) - origin for t in times]
        row["token_times_s"] = chunk_s
        row["first_token_s"] = chunk_s[0]
    row["finish_s"] = _seconds(record.get("end_time"), f"request {i}, field 'end_time'",
                               path) - origin
    return row


def _lifecycle_notes(out: pd.DataFrame) -> list[str]:
    notes = ["arrival_s is seconds since the first request started (inference-perf's "
             "perf_counter clock)"]
    failed = out["status"] != "ok"
    if failed.any():
        notes.append(
            f"{int(failed.sum())} of {len(out)} requests failed; they are kept as rows with "
            f"their status and error, with no timings (first error: "
            f"{' '.join(str(out.loc[failed, 'error'].iloc[0]).split())[:80]})"
        )
    if "token_times_s" in out.columns:
        chunked = sum(
            1 for times, n in zip(out["token_times_s"], out["output_len"], strict=True)
            if isinstance(times, list) and isinstance(n, int) and len(times) != n
        )
        if chunked:
            notes.append(
                f"{chunked} request(s) streamed a chunk count other than output_len: their "
                "token_times_s hold one time per chunk (inference-perf's chunk_times), so "
                "their inter-token gaps are inter-chunk gaps"
            )
    return notes


# --- OTel workload traces --------------------------------------------------------------------


def _workload_trace(spans: list[Any], path: Path) -> RawTrace:
    calls = [(i, s) for i, s in enumerate(spans) if isinstance(s, dict) and _is_llm_span(s)]
    if not calls:
        raise TraceSchemaError(
            f"{path}: the workload trace has no LLM spans (none with gen_ai.input.messages or "
            "named 'chat ...'); pass a trace of LLM calls"
        )
    starts = [_iso_seconds(s.get("start_time"), i, "start_time", path) for i, s in calls]
    origin = min(starts)
    rows = [_span_row(s, i, path, start - origin, origin)
            for (i, s), start in zip(calls, starts, strict=True)]
    out = pd.DataFrame.from_records(rows)
    notes = ("an inference-perf OTel workload trace: each LLM span is one request, timed as the "
             "traced application made it (start and end of the span), not as a benchmark "
             "replayed it",)
    return RawTrace(requests=out, format_name="inference-perf", row_label="request",
                    notes=notes)


def _span_row(span: dict[str, Any], i: int, path: Path, arrival_s: float,
              origin: float) -> dict[str, Any]:
    attrs = _object(span.get("attributes"))
    name = f"span {i} ({str(span.get('span_id', '?'))[:40]})"
    prompt = _first(attrs, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")
    output = _first(attrs, "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")
    if prompt is None or output is None:
        raise TraceSchemaError(
            f"{path}: {name}, attribute 'gen_ai.usage.prompt_tokens': the span has no token "
            "counts, so the workload trace carries timing only; export the spans with "
            "gen_ai.usage.prompt_tokens and completion_tokens"
        )
    status = _object(span.get("status"))
    row: dict[str, Any] = {
        "request_id": str(span.get("span_id", f"span{i}")),
        "arrival_s": arrival_s,
        "finish_s": _iso_seconds(span.get("end_time"), i, "end_time", path) - origin,
        "prompt_len": prompt,
        "output_len": output,
        "session_id": str(attrs.get("exgentic.session.id") or span.get("trace_id") or ""),
        "status": "error" if status.get("code") == OTEL_STATUS_ERROR else "ok",
        SOURCE_WHERE: name,
    }
    if row["status"] == "error":
        row["error"] = str(status.get("message") or "OTel status ERROR")
        del row["finish_s"]
    model = attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model")
    if isinstance(model, str):
        row["model"] = model
    return row


def _is_llm_span(span: dict[str, Any]) -> bool:
    attrs = _object(span.get("attributes"))
    return "gen_ai.input.messages" in attrs or str(span.get("name", "")).startswith("chat ")


def _iso_seconds(value: object, i: int, field: str, path: Path) -> float:
    """An ISO-8601 time as epoch s (a time without a zone is read as UTC)."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise TraceSchemaError(
            f"{path}: span {i}, field '{field}': {str(value)[:40]!r} is not an ISO-8601 time; "
            "the workload trace looks damaged"
        ) from exc
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


# --- lifecycle summaries ---------------------------------------------------------------------

_LATENCY_NAMES: Final = {
    "time_to_first_token": ("TTFT", "time to first token"),
    "time_per_output_token": ("TPOT", "time per output token"),
    "normalized_time_per_output_token": ("NTPOT", "request latency per output token"),
    "inter_token_latency": ("ITL", "inter-token latency, between streamed chunks"),
    "request_latency": ("E2EL", "end-to-end request latency"),
}


def read_inference_perf_summary(path: Path) -> BenchSummary | None:
    """The aggregates of a lifecycle summary or stage report, else None."""
    if not _is_summary_head(bs.document_head(path)):
        return None  # a per-request report or a workload trace, left unparsed here
    doc = _load(path)
    if not isinstance(doc, dict) or not _is_summary(doc):
        return None
    load = _object(doc.get("load_summary"))
    ok, failed = _object(doc.get("successes")), _object(doc.get("failures"))
    run = bs.values(load, {"requested_rate": ("requested rate", "req/s"),
                           "send_duration": ("send duration", "s")})
    totals = bs.values({"completed": ok.get("count"), "failed": failed.get("count"),
                        "sent": load.get("count"), "achieved_rate": load.get("achieved_rate")},
                       {"sent": ("requests sent", "requests"),
                        "completed": ("successful", "requests"),
                        "failed": ("failed", "requests"),
                        "achieved_rate": ("achieved rate", "req/s")})
    totals += bs.values(_object(ok.get("throughput")), {
        "requests_per_sec": ("request throughput", "req/s"),
        "input_tokens_per_sec": ("input token throughput", "tokens/s"),
        "output_tokens_per_sec": ("output token throughput", "tokens/s"),
        "total_tokens_per_sec": ("total token throughput", "tokens/s"),
    })
    latency = _object(ok.get("latency"))
    dists = [bs.distribution(name, long, "s", latency.get(key))
             for key, (name, long) in _LATENCY_NAMES.items()]
    dists += [bs.distribution("prompt tokens", "prompt length", "tokens", ok.get("prompt_len")),
              bs.distribution("output tokens", "output length", "tokens", ok.get("output_len")),
              bs.distribution("schedule delay", "send time less scheduled time", "s",
                              load.get("schedule_delay")),
              bs.distribution("failed E2EL", "latency of failed requests", "s",
                              failed.get("request_latency"))]
    labels = _object(failed.get("by_label"))
    counts = "; ".join(f"{label}: {_object(v).get('count')}" for label, v in labels.items())
    notes = (f"failures by label: {counts}",) if labels else ()
    return bs.BenchSummary(
        tool="inference-perf", format_name=TraceFormat.INFERENCE_PERF.value, run=run,
        totals=totals, latencies=tuple(d for d in dists if d is not None),
        fix=PER_REQUEST_HINT, notes=notes,
    )


def _is_summary(doc: dict[str, Any]) -> bool:
    return "load_summary" in doc or ("successes" in doc and "failures" in doc)


# --- shared ----------------------------------------------------------------------------------


def _object(value: object) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (its fields are then missing)."""
    return value if isinstance(value, dict) else {}


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    return next((attrs[k] for k in keys if attrs.get(k) is not None), None)


def _seconds(value: object, where: str, path: Path) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise TraceSchemaError(
        f"{path}: {where}: {str(value)[:40]!r} is not a number of seconds; {PER_REQUEST_HINT}"
    )


def _is_summary_head(head: str) -> bool:
    head = head.lstrip("\ufeff")
    return bool(re.match(r'\s*\{\s*"load_summary"\s*:', head)) or (
        re.match(r'\s*\{\s*"successes"\s*:', head) is not None and '"failures"' in head
    )


def _is_inference_perf_document(head: str) -> bool:
    return bool(PER_REQUEST_HEAD.match(head) or ISO_SPAN_HEAD.search(head)
                or _is_summary_head(head))


FORMAT = TraceFormatSpec(
    name=TraceFormat.INFERENCE_PERF,
    description="inference-perf per-request report, OTel workload trace or lifecycle summary",
    reader=read_inference_perf,
    row_label="request",
    json_document=_is_inference_perf_document,
    summary=read_inference_perf_summary,
)
