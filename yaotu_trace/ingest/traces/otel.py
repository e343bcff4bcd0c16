"""OpenTelemetry request spans (vLLM, SGLang, any GenAI-instrumented server) as a trace.

Accepted layouts: an OTLP `ExportTraceServiceRequest` document (`resourceSpans` →
`scopeSpans` → `spans`), a flat `{"spans": [...]}` list (what SGLang's tooling and many
exporters write), a bare JSON array of spans or of OTLP documents, and JSON Lines of any of
these (the collector's file exporter writes one OTLP document per line), and the SDK's
ConsoleSpanExporter output (indented span objects one after another, ISO start and end times,
ids under `context`), whatever the file's extension. Both the proto3-JSON camelCase keys and
snake_case keys are read. Attribute values are OTLP `AnyValue`s (`intValue`
as a string or number, `doubleValue`, `stringValue`) or plain values.

Every span with an input-token count is one request, and so is a failed GenAI call span
(status ERROR, an operation or model named) without one: the openai-v2 instrumentation records
no usage on a failed call. The others (tool calls, scheduler slices) are skipped and counted
in the notes. The current GenAI semantic-convention names are
read first and the older ones (vLLM's and SGLang's spans) after them. Mapping:

- `startTimeUnixNano` → `arrival_s`, seconds since the earliest request span start (a note
  gives it in UTC); subtracting in integer ns keeps sub-microsecond precision;
- `gen_ai.request.id` (vLLM), else `gen_ai.response.id` (semconv), else the `spanId` →
  `request_id`;
- `gen_ai.usage.input_tokens` or `gen_ai.usage.prompt_tokens` → `prompt_len`;
  `gen_ai.usage.output_tokens` or `gen_ai.usage.completion_tokens` → `output_len`;
- `gen_ai.usage.cache_read.input_tokens` (semconv; older `gen_ai.usage.cache_read_input_tokens`),
  else SGLang's `gen_ai.usage.cached_tokens` → `cached_tokens` (vLLM's span has none);
- `arrival_s + gen_ai.latency.time_to_first_token`, else `+ gen_ai.response.time_to_first_chunk`
  (the client's first chunk) → `first_token_s`;
- `arrival_s + gen_ai.latency.e2e` → `finish_s` (the span's end time when e2e is absent);
- `arrival_s + gen_ai.latency.time_in_queue` → `scheduled_s`. vLLM measures the queue from the
  engine-core enqueue, a little after the frontend arrival, so this slightly underestimates;
- `gen_ai.response.model` (or `gen_ai.request.model`) → `model`; the resource attribute
  `service.instance.id` → `instance`.

SGLang uses the same `gen_ai.latency.*` names as vLLM. A span whose `status.code` is ERROR
(2, or `STATUS_CODE_ERROR`) stays a request with `status` `error` and its `status.message`
(else its `error.type`) as `error` (SGLang closes an aborted request's spans that way); a token
count it lacks is 0 (nothing counted reached the client), which the notes say. The others get
`ok` when the file has an error span and no status column otherwise. The notes count the error
spans.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from yaotu_trace.data.compressed import read_text
from yaotu_trace.data.jsonl import read_json_lines
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

# Current semantic-convention name first, then the older one vLLM and SGLang still emit.
PROMPT_TOKENS: Final = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
COMPLETION_TOKENS: Final = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
# Cached input tokens: the current semantic-convention name, its older spelling, SGLang's.
CACHED_TOKENS: Final = ("gen_ai.usage.cache_read.input_tokens",
                        "gen_ai.usage.cache_read_input_tokens", "gen_ai.usage.cached_tokens")
REQUEST_IDS: Final = ("gen_ai.request.id", "gen_ai.response.id")
# Time to the first token (vLLM, SGLang), else to the first chunk the client saw (semconv).
TTFTS: Final = ("gen_ai.latency.time_to_first_token", "gen_ai.response.time_to_first_chunk")
E2E: Final = "gen_ai.latency.e2e"
_QUEUE: Final = "gen_ai.latency.time_in_queue"
MODELS: Final = ("gen_ai.response.model", "gen_ai.request.model")
INSTANCE: Final = "service.instance.id"
# (camelCase, snake_case) spellings of the OTLP JSON keys.
RESOURCE_SPANS: Final = ("resourceSpans", "resource_spans")
SCOPE_SPANS: Final = (
    "scopeSpans",
    "scope_spans",
    "instrumentationLibrarySpans",
    "instrumentation_library_spans",
)
START_NS: Final = ("startTimeUnixNano", "start_time_unix_nano")
END_NS: Final = ("endTimeUnixNano", "end_time_unix_nano")
# The SDK's ConsoleSpanExporter writes ISO times and the ids under `context`.
START_ISO: Final = "start_time"
END_ISO: Final = "end_time"
SPAN_ID: Final = ("spanId", "span_id")
# A GenAI call span (operation or model named): a request even when it failed before any
# token count was recorded (the openai-v2 instrumentation's failed calls).
GENAI_CALL: Final = ("gen_ai.operation.name", "gen_ai.request.model")
ERROR_TYPE: Final = "error.type"
FLAT_SPANS: Final = ("spans",)
# OTLP StatusCode ERROR: 2 in proto3 JSON, its enum name in some exporters' JSON.
ERROR_STATUS: Final = (2, "2", "STATUS_CODE_ERROR", "ERROR", "StatusCode.ERROR")
VALUE_KEYS: Final = (
    "intValue",
    "int_value",
    "doubleValue",
    "double_value",
    "stringValue",
    "string_value",
    "boolValue",
    "bool_value",
)


def read_otel(path: Path) -> RawTrace:
    """Collect one request per gen_ai request span from an OTLP JSON export."""
    found = _request_spans(path)
    if not found.rows:
        raise TraceSchemaError(
            f"{path}: none of the {found.skipped} span(s) carries '{PROMPT_TOKENS[0]}' or "
            f"'{PROMPT_TOKENS[1]}'; export the engine's request spans (vLLM: serve with "
            "--otlp-traces-endpoint; SGLang: --enable-trace)"
        )
    out = _requests_frame(found)
    return RawTrace(
        requests=out.dropna(axis=1, how="all"),
        format_name="otel",
        row_label="span",
        notes=_notes(found),
    )


@dataclass(frozen=True, slots=True)
class _RequestSpans:
    """The request spans of a file as rows (latencies still relative to arrival), their start
    and end times, and what the notes count."""

    rows: list[dict[str, Any]]
    starts_ns: list[int]
    ends_ns: list[int | None]
    # The prompt-token key of each request span: the notes speak the file's convention.
    prompt_keys: list[str]
    skipped: int
    failed: int
    # Failed spans without an input / output token count (kept with 0).
    uncounted_prompt: int = 0
    uncounted_output: int = 0


def _request_spans(path: Path) -> _RequestSpans:
    """One row per span with an input-token count; the other spans are only counted."""
    rows: list[dict[str, Any]] = []
    starts_ns: list[int] = []
    ends_ns: list[int | None] = []
    skipped = failed = uncounted_prompt = uncounted_output = 0
    prompt_keys: list[str] = []
    for where, span, resource in _spans(path):
        attrs = _attributes(span.get("attributes"), where, path)
        prompt_key = next((k for k in PROMPT_TOKENS if k in attrs), None)
        error = _error_message(span, attrs)
        if prompt_key is None and not (error is not None
                                       and any(k in attrs for k in GENAI_CALL)):
            skipped += 1
            continue
        prompt_keys.append(prompt_key or PROMPT_TOKENS[0])
        starts_ns.append(_start_ns(span, where, path))
        ends_ns.append(_end_ns(span, where, path))
        failed += error is not None
        request_id = next((attrs[k] for k in REQUEST_IDS if k in attrs), _span_id(span))
        output = next((attrs[k] for k in COMPLETION_TOKENS if k in attrs), None)
        row: dict[str, Any] = {
            "request_id": request_id,
            "prompt_len": attrs[prompt_key] if prompt_key is not None else None,
            "output_len": output,
            SOURCE_WHERE: where,
        }
        if error is not None:
            row["status"], row["error"] = "error", error or None
            # A failed call delivered no token the span counted; what it sent is unknown
            # when the span carries no usage (the notes count both).
            uncounted_output += output is None
            uncounted_prompt += prompt_key is None
            if output is None:
                row["output_len"] = 0
            if prompt_key is None:
                row["prompt_len"] = 0
        cached = next((k for k in CACHED_TOKENS if k in attrs), None)
        if cached is not None:
            row["cached_tokens"] = attrs[cached]
        model = next((attrs[k] for k in MODELS if k in attrs), None)
        if model is not None:
            row["model"] = model
        if INSTANCE in resource:
            row["instance"] = resource[INSTANCE]
        ttft = next((k for k in TTFTS if k in attrs), None)
        for column, key in (("first_token_s", ttft), ("finish_s", E2E), ("scheduled_s", _QUEUE)):
            if key is not None and key in attrs:
                row[column] = _seconds(attrs[key], key, where, path)
        rows.append(row)
    return _RequestSpans(rows, starts_ns, ends_ns, prompt_keys, skipped, failed,
                         uncounted_prompt, uncounted_output)


def _requests_frame(found: _RequestSpans) -> pd.DataFrame:
    """The rows on one clock: `arrival_s` from the earliest span start, latencies made
    absolute, the span's end where e2e is absent, and `ok` for spans without an error when
    the file has one."""
    origin_ns = min(found.starts_ns)
    arrival_s = (np.asarray(found.starts_ns, dtype=np.int64) - origin_ns) / 1e9
    out = pd.DataFrame.from_records(found.rows)
    out.insert(1, "arrival_s", arrival_s)
    # Latency attributes are durations from arrival; make them absolute on the arrival clock.
    for column in ("first_token_s", "finish_s", "scheduled_s"):
        if column in out.columns:
            out[column] = out[column] + out["arrival_s"]
    end_s = pd.Series(
        [np.nan if e is None else (e - origin_ns) / 1e9 for e in found.ends_ns], dtype="float64"
    )
    out["finish_s"] = out["finish_s"].fillna(end_s) if "finish_s" in out.columns else end_s
    if found.failed:
        out["status"] = out["status"].fillna("ok")
    return out


def _notes(found: _RequestSpans) -> tuple[str, ...]:
    """The clock's origin in UTC, and the spans skipped and ended in error."""
    origin_ns = min(found.starts_ns)
    notes = [
        f"arrival_s is seconds since {pd.Timestamp(origin_ns, unit='ns', tz='UTC').isoformat()} "
        "(the earliest span start)"
    ]
    if found.skipped:
        # Named by the key this file's request spans use, so the note speaks its convention.
        notes.append(
            f"{found.skipped} span(s) without '{found.prompt_keys[0]}' were skipped (not requests)"
        )
    if found.failed:
        notes.append(
            f"{found.failed} of {len(found.rows)} request span(s) ended with status ERROR; they "
            "are kept with status 'error': counted in the success rate, left out of latency "
            "figures"
        )
    if found.uncounted_output or found.uncounted_prompt:
        notes.append(
            f"of the failed spans, {found.uncounted_output} carry no output-token count and "
            f"{found.uncounted_prompt} no input-token count: kept with 0 for each count they "
            "lack (nothing counted reached the client; what they sent is unknown)"
        )
    return tuple(notes)


def _spans(path: Path) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Yield (location, span, resource attributes) for every span in the file, whatever its
    layout: OTLP documents, flat span lists, or bare spans."""
    for prefix, doc in _documents(path):
        if not isinstance(doc, dict):
            raise TraceReadError(
                f"{path}: {prefix.rstrip(', ') or 'the document'} is {type(doc).__name__}, "
                "expected an OTLP object with resourceSpans, a {\"spans\": [...]} list or a span"
            )
        if _first(doc, RESOURCE_SPANS) is not None:
            yield from _otlp_spans(doc, prefix, path)
        elif _first(doc, FLAT_SPANS) is not None:
            for k, span in enumerate(_list(doc, FLAT_SPANS, prefix.rstrip(", "), path)):
                yield f"{prefix}spans[{k}]", span, {}
        else:
            resource = doc.get("resource")
            attrs = resource.get("attributes") if isinstance(resource, dict) else None
            yield (prefix.rstrip(", ") or "the span", doc,
                   _attributes(attrs, prefix.rstrip(", ") or "the span", path))


def _otlp_spans(
    doc: dict[str, Any], prefix: str, path: Path
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for i, resource_spans in enumerate(_list(doc, RESOURCE_SPANS, prefix, path)):
        here = f"{prefix}resourceSpans[{i}]"
        resource = resource_spans.get("resource")
        resource_attrs = _attributes(
            resource.get("attributes") if isinstance(resource, dict) else None, here, path
        )
        for j, scope_spans in enumerate(_list(resource_spans, SCOPE_SPANS, here, path)):
            scope_where = f"{here}.scopeSpans[{j}]"
            for k, span in enumerate(_list(scope_spans, ("spans",), scope_where, path)):
                yield f"{scope_where}.spans[{k}]", span, resource_attrs


def _error_message(span: dict[str, Any], attrs: dict[str, Any]) -> str | None:
    """The span's status message when its status is ERROR (`status.code` in any of its JSON
    spellings, or the console exporter's `status_code`), with its `error.type` when the
    message is empty; None when the span did not fail."""
    status = span.get("status")
    if not isinstance(status, dict):
        return None
    code = status.get("code", status.get("status_code"))
    if code not in ERROR_STATUS:
        return None
    message = status.get("message", status.get("description"))
    text = message.strip() if isinstance(message, str) else ""
    kind = attrs.get(ERROR_TYPE)
    return text or (str(kind) if kind is not None else "")


def _span_id(span: dict[str, Any]) -> Any:
    context = span.get("context")
    inner = _first(context, SPAN_ID) if isinstance(context, dict) else None
    return _first(span, SPAN_ID) if inner is None else inner


def _start_ns(span: dict[str, Any], where: str, path: Path) -> int:
    if START_ISO in span and not any(k in span for k in START_NS):
        return _iso_ns(span[START_ISO], START_ISO, where, path)
    return _nanos(span, START_NS, where, path, required=True) or 0


def _end_ns(span: dict[str, Any], where: str, path: Path) -> int | None:
    if span.get(END_ISO) is not None and not any(k in span for k in END_NS):
        return _iso_ns(span[END_ISO], END_ISO, where, path)
    return _nanos(span, END_NS, where, path, required=False)


def _iso_ns(value: object, key: str, where: str, path: Path) -> int:
    """An ISO 8601 time ("2025-10-09T08:53:31.500000Z") as Unix nanoseconds."""
    try:
        stamp = pd.Timestamp(str(value))
    except (ValueError, TypeError):
        stamp = None
    if stamp is None or stamp is pd.NaT:
        raise TraceSchemaError(f"{path}: {where}, field '{key}' is {str(value)[:40]!r}, not an "
                               "ISO 8601 time; give e.g. 2025-10-09T08:53:31.500000Z")
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return int(stamp.value)


def _documents(path: Path) -> list[tuple[str, Any]]:
    """One export document, a list of them, or JSON Lines; each with a location prefix."""
    text = read_text(path, "pass an OTLP JSON export saved as UTF-8")
    try:
        doc = json.loads(text)
    except RecursionError as exc:
        raise TraceReadError(f"{path}: JSON nested too deeply; pass an OTLP JSON export") from exc
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise TraceReadError(f"{path}: invalid JSON ({str(exc)[:120]}); check the export "
                                 "is complete") from exc
        if exc.msg != "Extra data":
            raise TraceReadError(
                f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}); "
                "check the export is complete"
            ) from exc
        try:
            records, lines = read_json_lines(path)
        except TraceReadError as lines_error:
            try:  # not one value per line: values one after another (the console exporter)
                return _concatenated(text, path)
            except TraceReadError:
                raise lines_error from None
        return [(f"line {line}, ", record) for record, line in zip(records, lines, strict=True)]
    if isinstance(doc, list):
        return [(f"[{n}], ", d) for n, d in enumerate(doc)]
    return [("", doc)]


def _concatenated(text: str, path: Path) -> list[tuple[str, Any]]:
    """JSON values one after another, each over several lines (the SDK's ConsoleSpanExporter
    prints every span as an indented object), each located by the line it starts on."""
    decoder = json.JSONDecoder()
    out: list[tuple[str, Any]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n\ufeff":
            pos += 1
        if pos >= len(text):
            return out
        line = text.count("\n", 0, pos) + 1
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceReadError(f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON "
                                 f"({exc.msg}); check the export is complete") from exc
        out.append((f"line {line}, ", value))


def _list(obj: dict[str, Any], keys: tuple[str, ...], where: str, path: Path) -> list[Any]:
    value = _first(obj, keys)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TraceReadError(
            f"{path}: {where or 'top level'}: '{keys[0]}' must be a list of objects; "
            "check this is an OTLP JSON export"
        )
    return value


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((obj[k] for k in keys if k in obj), None)


def _attributes(raw: object, where: str, path: Path) -> dict[str, Any]:
    """OTLP key/value attributes (or a plain mapping) as {key: Python value}."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): _any_value(v) if isinstance(v, dict) else v for k, v in raw.items()}
    if not isinstance(raw, list):
        raise TraceReadError(f"{path}: {where}: 'attributes' must be a list of key/value objects")
    attrs: dict[str, Any] = {}
    for item in raw:
        if not isinstance(item, dict) or "key" not in item:
            raise TraceReadError(
                f"{path}: {where}: attribute {str(item)[:60]!r} has no 'key'; "
                'write attributes as {"key": ..., "value": {"intValue": ...}}'
            )
        value = item.get("value")
        attrs[str(item["key"])] = _any_value(value) if isinstance(value, dict) else value
    return attrs


def _any_value(value: dict[str, Any]) -> Any:
    """Unwrap an OTLP AnyValue; int64s arrive as JSON strings and become ints."""
    for key in VALUE_KEYS:
        if key in value:
            raw = value[key]
            if key in ("intValue", "int_value") and isinstance(raw, str):
                try:
                    return int(raw)
                except ValueError:
                    return raw  # left for validation to report with its location
            return raw
    return None


def _nanos(
    span: dict[str, Any], keys: tuple[str, ...], where: str, path: Path, *, required: bool
) -> int | None:
    value = _first(span, keys)
    if value is None and not required:
        return None
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        nanos = int(value)
    except (TypeError, ValueError, OverflowError):
        what = "is missing" if value is None else f"is {str(value)[:30]!r}, not an integer"
        raise TraceSchemaError(
            f"{path}: {where}, field '{keys[0]}' {what}; give nanoseconds since the Unix epoch"
        ) from None
    if not 0 <= nanos < 1 << 63:
        raise TraceSchemaError(
            f"{path}: {where}, field '{keys[0]}' is {str(value)[:30]!r}, outside int64 "
            "nanoseconds; give nanoseconds since the Unix epoch"
        )
    return nanos


def _seconds(value: object, key: str, where: str, path: Path) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceSchemaError(
            f"{path}: {where}, attribute '{key}': {str(value)[:30]!r} is not a number of seconds"
        ) from None
    if not math.isfinite(seconds):
        raise TraceSchemaError(f"{path}: {where}, attribute '{key}': {seconds} is not finite")
    return seconds


def _is_otel_record(keys: set[str]) -> bool:
    """A JSON Lines record: an OTLP document, a flat span list, or one span."""
    if any(key in keys for key in RESOURCE_SPANS):
        return True
    is_span = any(k in keys for k in SPAN_ID) and any(k in keys for k in START_NS)
    console = {"context", START_ISO, "attributes"} <= keys
    return is_span or console or keys == {"spans"}


def _is_otel_document(head: str) -> bool:
    """A whole-file document: OTLP, or spans (flat or bare) that carry span ids and start
    times, which no other format's records have."""
    if any(f'"{key}"' in head for key in RESOURCE_SPANS):
        return True
    if all(f'"{k}"' in head for k in ("context", "span_id", START_ISO)):
        return True  # the SDK's ConsoleSpanExporter
    return any(f'"{k}"' in head for k in SPAN_ID) and any(f'"{k}"' in head for k in START_NS)


FORMAT = TraceFormatSpec(
    name=TraceFormat.OTEL,
    description=(
        "OpenTelemetry GenAI request spans (vLLM, SGLang): OTLP JSON, flat span lists, JSONL"
    ),
    reader=read_otel,
    row_label="span",
    json_keys=_is_otel_record,
    json_document=_is_otel_document,
)
