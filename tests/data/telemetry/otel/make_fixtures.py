"""Make the OpenTelemetry fixtures of this folder with the OpenTelemetry SDK's own code.

Nothing here is hand-written JSON: every span is made by the OpenTelemetry Python SDK (or by
the `openai-v2` instrumentation driving a real `openai` client) and written by the SDK's own
exporters and encoders.

Made in a separate virtualenv, not the project's:

    python3.11 -m venv /tmp/venv-otel
    /tmp/venv-otel/bin/pip install "opentelemetry-sdk==1.45.2" \
        "opentelemetry-exporter-otlp-proto-common==1.45.2" \
        "opentelemetry-exporter-otlp-json-common==0.66b1" \
        "opentelemetry-exporter-otlp-json-file==0.66b1" \
        "opentelemetry-semantic-conventions==0.66b2" \
        "opentelemetry-instrumentation-openai-v2==2.4b0" \
        "opentelemetry-util-genai==0.4b0" "openai==2.54.0"
    /tmp/venv-otel/bin/python tests/data/telemetry/otel/make_fixtures.py

which resolved to opentelemetry-api/sdk 1.45.2, opentelemetry-proto 1.45.2,
opentelemetry-proto-json 0.66b1, opentelemetry-instrumentation 0.66b2, protobuf 7.36.2,
httpx 0.29.0, CPython 3.11.7. Two pins are needed for openai-v2 2.4b0 to import at all:

- `opentelemetry-util-genai==0.4b0`: pip's newest (1.3b0) no longer has the module
  `opentelemetry.util.genai.instruments` that openai-v2 2.4b0 imports (ModuleNotFoundError),
  and from 1.0b0 on its `is_experimental_mode()` is always True, so the instrumentation's
  documented default (GenAI semantic conventions v1.30.0 unless
  OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental) needs 0.4b0;
- `openai==2.54.0` (the last 2.x): openai 3.x depends on `httpx2` instead of `httpx`, and
  openai-v2 2.4b0 does `from httpx import URL` (ModuleNotFoundError: No module named 'httpx';
  with httpx installed beside openai 3.60.0 the spans lose `server.address`/`server.port`).

Files written (next to this script unless a folder is given as the only argument):

- `sdk_genai_spans.json`: 40 GenAI `chat` client spans made with the SDK tracer, exported in
  one batch by the official OTLP JSON file exporter (`FileSpanExporter`, the OTLP/JSON
  encoding of `opentelemetry-exporter-otlp-json-common`): one compact `{"resourceSpans": ...}`
  document on one line, the shape the collector's file exporter writes.
- `sdk_genai_spans.jsonl`: the same 40 spans, `FileSpanExporter` behind a
  `SimpleSpanProcessor`: one OTLP document per span, one per line.
- `sdk_genai_spans_protojson.json`: the same 40 spans through the protobuf encoder
  (`opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans`) and
  `google.protobuf.json_format.MessageToJson` (its default protobuf JSON mapping: base64
  trace/span ids, enum names such as `SPAN_KIND_CLIENT` and `STATUS_CODE_ERROR`).
- `console_exporter.txt`: the same 40 spans written by the SDK's `ConsoleSpanExporter`.
- `openai_v2_spans.json`: 12 `chat` spans written by `opentelemetry-instrumentation-openai-v2`
  around a real `openai` client talking to the mock OpenAI-compatible server below
  (127.0.0.1, an ephemeral port); 2 of the calls fail (HTTP 500 and HTTP 400). Same encoder as
  `sdk_genai_spans.json`.
- `openai_v2_console.txt`: the same 12 spans written by `ConsoleSpanExporter`.
- `openai_v2_latest_spans.json`, `openai_v2_latest_console.txt`: the same 12 calls again in a
  fresh process with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (the
  instrumentation then makes its spans through opentelemetry-util-genai's TelemetryHandler).
- `expected.json`: the numbers fed (and, for the openai-v2 spans, the times they got), for
  tests.

The SDK spans' ids come from a sequential `IdGenerator` and their times are given, so those
four files are the same on every run; the openai-v2 spans carry the wall-clock times of the
run that made them.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes import error_attributes, service_attributes
from opentelemetry.trace import SpanKind, Status, StatusCode

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------------------------------------
# Part 1: SDK spans with GenAI attributes
# ---------------------------------------------------------------------------------------------

SDK_REQUESTS = 40
SDK_FAILED_INDEX = 23  # the one span that ends with status ERROR
SDK_ORIGIN_NS = 1_760_000_000_000_000_000  # 2025-10-09T08:53:20Z, the first span's start
SDK_SPACING_NS = 500_000_000  # one request every 0.5 s
SDK_MODELS = ("qwen2.5-7b-instruct", "llama-3.1-8b-instruct")
SDK_ERROR_TYPE = "TimeoutError"
SDK_ERROR_MESSAGE = "upstream request timed out after 2.0 s"
SDK_FAILED_DURATION_NS = 2_000_000_000
# The older cached-token name, written on a few spans if the installed semantic conventions
# still define it (0.66b2 does not: it has only `gen_ai.usage.cache_read.input_tokens`).
OLD_CACHE_READ = next(
    (v for v in vars(genai).values() if v == "gen_ai.usage.cache_read_input_tokens"), None
)
OLD_CACHE_READ_EVERY = 9  # spans 0, 9, 18, ... would carry the older name instead


class SequentialIds(IdGenerator):
    """Trace and span ids 1, 2, 3, ... (offset so they look like ids), for files that are the
    same on every run."""

    def __init__(self, trace_base: int, span_base: int) -> None:
        self._trace = trace_base
        self._span = span_base

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span

    def generate_trace_id(self) -> int:
        self._trace += 1
        return self._trace

    def is_trace_id_random(self) -> bool:
        return False


def sdk_request(i: int) -> dict[str, Any]:
    """The numbers fed to SDK span `i` (0-based)."""
    ok = i != SDK_FAILED_INDEX
    output = 16 + 4 * i
    ttft_s = round(0.040 + 0.005 * i, 3)
    return {
        "index": i,
        "model": SDK_MODELS[i % 2],
        "start_ns": SDK_ORIGIN_NS + i * SDK_SPACING_NS,
        "duration_ns": (
            round((ttft_s + 0.010 * output) * 1e9) if ok else SDK_FAILED_DURATION_NS
        ),
        "input_tokens": 200 + 25 * i,
        "output_tokens": output if ok else None,
        "cache_read_input_tokens": 128 if i % 3 == 0 else None,
        "ttft_s": ttft_s if ok else None,
        "response_id": f"chatcmpl-sdk-{i:03d}" if ok else None,
        "ok": ok,
    }


def make_sdk_spans(provider: TracerProvider) -> list[dict[str, Any]]:
    """Make the 40 spans on `provider`; return the numbers fed."""
    tracer = provider.get_tracer("yaotu_trace.fixtures.sdk_genai", "1.0.0")
    fed = []
    for i in range(SDK_REQUESTS):
        req = sdk_request(i)
        fed.append(req)
        span = tracer.start_span(
            f"{genai.GenAiOperationNameValues.CHAT.value} {req['model']}",
            kind=SpanKind.CLIENT,
            start_time=req["start_ns"],
            attributes={
                genai.GEN_AI_OPERATION_NAME: genai.GenAiOperationNameValues.CHAT.value,
                genai.GEN_AI_PROVIDER_NAME: genai.GenAiProviderNameValues.OPENAI.value,
                genai.GEN_AI_REQUEST_MODEL: req["model"],
            },
        )
        span.set_attribute(genai.GEN_AI_USAGE_INPUT_TOKENS, req["input_tokens"])
        if req["cache_read_input_tokens"] is not None:
            old = OLD_CACHE_READ is not None and i % OLD_CACHE_READ_EVERY == 0
            key = OLD_CACHE_READ if old else genai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
            span.set_attribute(key, req["cache_read_input_tokens"])
        if req["ok"]:
            span.set_attribute(genai.GEN_AI_RESPONSE_ID, req["response_id"])
            span.set_attribute(genai.GEN_AI_RESPONSE_FINISH_REASONS, ["stop"])
            span.set_attribute(genai.GEN_AI_USAGE_OUTPUT_TOKENS, req["output_tokens"])
            span.set_attribute(genai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, req["ttft_s"])
        else:
            span.set_attribute(error_attributes.ERROR_TYPE, SDK_ERROR_TYPE)
            span.set_status(Status(StatusCode.ERROR, SDK_ERROR_MESSAGE))
        span.end(end_time=req["start_ns"] + req["duration_ns"])
    return fed


def sdk_provider(*processors_of: Any) -> TracerProvider:
    resource = Resource.create(
        {
            service_attributes.SERVICE_NAME: "yaotu-fixture-genai-client",
            "service.instance.id": "client-0",
        }
    )
    provider = TracerProvider(
        resource=resource,
        id_generator=SequentialIds(0x5B8EFFF798038103D269B63381300000, 0xEEE19B7EC3C10000),
    )
    for processor in processors_of:
        provider.add_span_processor(processor)
    return provider


def write_sdk_files(out: Path) -> dict[str, Any]:
    # One run per file, every run from the same ids and times, so the four files hold the same
    # spans; each file is written by the exporter that writes it.
    memory = InMemorySpanExporter()
    fed = make_sdk_spans(sdk_provider(SimpleSpanProcessor(memory)))
    spans = memory.get_finished_spans()

    # The official OTLP JSON file exporter, given all 40 spans in one export call (as a
    # BatchSpanProcessor would): one document, one line.
    path = out / "sdk_genai_spans.json"
    path.unlink(missing_ok=True)
    exporter = FileSpanExporter(path)
    exporter.export(spans)
    exporter.shutdown()

    # The same exporter behind a SimpleSpanProcessor: a document per span, a line each.
    path = out / "sdk_genai_spans.jsonl"
    path.unlink(missing_ok=True)
    jsonl = FileSpanExporter(path)
    provider = sdk_provider(SimpleSpanProcessor(jsonl))
    make_sdk_spans(provider)
    provider.shutdown()

    # The protobuf encoder and protobuf's own JSON mapping.
    (out / "sdk_genai_spans_protojson.json").write_text(
        MessageToJson(encode_proto(spans), indent=None) + "\n", encoding="utf-8"
    )

    # The SDK's ConsoleSpanExporter, its output sent to a file.
    with (out / "console_exporter.txt").open("w", encoding="utf-8") as console_out:
        provider = sdk_provider(SimpleSpanProcessor(ConsoleSpanExporter(out=console_out)))
        make_sdk_spans(provider)
        provider.shutdown()

    # Sanity: the JSON encoder's document equals what the file exporter wrote.
    assert json.loads((out / "sdk_genai_spans.json").read_text()) == encode_json(spans).to_dict()
    return summarize_sdk(fed)


def summarize_sdk(fed: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in fed if r["ok"]]
    cached = [r["cache_read_input_tokens"] for r in fed if r["cache_read_input_tokens"]]
    ttfts = [r["ttft_s"] for r in ok]
    return {
        "requests": len(fed),
        "ok": len(ok),
        "failed": len(fed) - len(ok),
        "failed_index": SDK_FAILED_INDEX,
        "failed_error_type": SDK_ERROR_TYPE,
        "failed_status_message": SDK_ERROR_MESSAGE,
        "input_tokens_total": sum(r["input_tokens"] for r in fed),
        "input_tokens_total_ok": sum(r["input_tokens"] for r in ok),
        "output_tokens_total": sum(r["output_tokens"] for r in ok),
        "spans_with_cache_read": len(cached),
        "older_cache_read_name": OLD_CACHE_READ,
        "cache_read_input_tokens_total": sum(cached),
        "ttft_s_mean": round(sum(ttfts) / len(ttfts), 6),
        "ttft_s_min": min(ttfts),
        "ttft_s_max": max(ttfts),
        "first_start_ns": fed[0]["start_ns"],
        "last_start_ns": fed[-1]["start_ns"],
        "start_span_s": (fed[-1]["start_ns"] - fed[0]["start_ns"]) / 1e9,
        "models": sorted({r["model"] for r in fed}),
        "per_request": fed,
    }


# ---------------------------------------------------------------------------------------------
# Part 2: openai-v2 instrumentation around a real openai client and a mock server
# ---------------------------------------------------------------------------------------------

OPENAI_CALLS = 12
OPENAI_MODEL = "gpt-4o-mini"
OPENAI_RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
STREAMING_CALLS = {3, 4, 8, 9, 10}
FAILING_CALLS = {5: 500, 10: 400}  # call number -> HTTP status the mock server answers
FIRST_CHUNK_DELAY_S = 0.05
CHUNK_GAP_S = 0.005
WORDS = ("Traces", " are", " the", " ground", " truth", ".")


def mock_usage(n: int) -> dict[str, Any]:
    """The usage the mock server reports for call `n` (1-based)."""
    prompt = 40 + 8 * n
    completion = 10 + n
    cached = 32 if n % 3 == 0 else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


class MockOpenAI(BaseHTTPRequestHandler):
    """`POST /v1/chat/completions`, streaming and not: the call number is the last user
    message's "call N"; FAILING_CALLS get their error answer."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(body["messages"][-1]["content"].split()[-1])
        if n in FAILING_CALLS:
            self._error(FAILING_CALLS[n])
            return
        cid = f"chatcmpl-mock-{n:03d}"
        created = int(time.time())
        if body.get("stream"):
            self._stream(body, n, cid, created)
            return
        time.sleep(FIRST_CHUNK_DELAY_S)
        self._json(200, {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": OPENAI_RESPONSE_MODEL,
            "system_fingerprint": "fp_mock",
            "service_tier": "default",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS), "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }],
            "usage": mock_usage(n),
        })

    def _stream(self, body: dict[str, Any], n: int, cid: str, created: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> None:
            data = {
                "id": cid, "object": "chat.completion.chunk", "created": created,
                "model": OPENAI_RESPONSE_MODEL, "system_fingerprint": "fp_mock",
                "service_tier": "default", "choices": choices, "usage": usage,
            }
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        time.sleep(FIRST_CHUNK_DELAY_S)
        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                "finish_reason": None}])
        for word in WORDS:
            time.sleep(CHUNK_GAP_S)
            chunk([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
        chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk([], mock_usage(n))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _error(self, status: int) -> None:
        if status == 400:
            err = {"message": "This model's maximum context length is 128000 tokens.",
                   "type": "invalid_request_error", "param": "messages",
                   "code": "context_length_exceeded"}
        else:
            err = {"message": "The server had an error while processing your request.",
                   "type": "server_error", "param": None, "code": None}
        self._json(status, {"error": err})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def mock_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), MockOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def write_openai_files(out: Path, stem: str) -> dict[str, Any]:
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    memory = InMemorySpanExporter()
    console_buf = io.StringIO()
    provider = TracerProvider(
        resource=Resource.create(
            {
                service_attributes.SERVICE_NAME: "yaotu-fixture-openai-client",
                "service.instance.id": "client-1",
            }
        ),
        id_generator=SequentialIds(0x0AF7651916CD43DD8448EB211C800000, 0xB7AD6B7169200000),
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=console_buf)))
    OpenAIInstrumentor().instrument(tracer_provider=provider)

    calls = []
    with mock_server() as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="sk-fixture", max_retries=0)
        for n in range(1, OPENAI_CALLS + 1):
            stream = n in STREAMING_CALLS
            kwargs: dict[str, Any] = {
                "model": OPENAI_MODEL,
                "messages": [{"role": "system", "content": "Answer briefly."},
                             {"role": "user", "content": f"call {n}"}],
                "max_tokens": 64,
                "temperature": 0.0,
            }
            if stream:
                kwargs["stream"] = True
                kwargs["stream_options"] = {"include_usage": True}
            record: dict[str, Any] = {"call": n, "stream": stream}
            try:
                result = client.chat.completions.create(**kwargs)
                if stream:
                    for _ in result:
                        pass
                record["ok"] = True
                record["usage"] = mock_usage(n)
            except openai.APIStatusError as exc:
                record["ok"] = False
                record["http_status"] = exc.status_code
                record["exception"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
            calls.append(record)
    OpenAIInstrumentor().uninstrument()

    spans = memory.get_finished_spans()
    path = out / f"{stem}_spans.json"
    path.unlink(missing_ok=True)
    exporter = FileSpanExporter(path)
    exporter.export(spans)
    exporter.shutdown()
    (out / f"{stem}_console.txt").write_text(console_buf.getvalue(), encoding="utf-8")
    provider.shutdown()
    return summarize_openai(calls, spans)


def summarize_openai(calls: list[dict[str, Any]], spans: Any) -> dict[str, Any]:
    ok = [c for c in calls if c["ok"]]
    starts = [s.start_time for s in spans]
    return {
        "requests": len(calls),
        "ok": len(ok),
        "failed": len(calls) - len(ok),
        "streaming_ok": sum(c["stream"] for c in ok),
        "failing_calls": {str(n): status for n, status in FAILING_CALLS.items()},
        "prompt_tokens_total_ok": sum(c["usage"]["prompt_tokens"] for c in ok),
        "completion_tokens_total_ok": sum(c["usage"]["completion_tokens"] for c in ok),
        "cached_tokens_total_ok": sum(
            c["usage"]["prompt_tokens_details"]["cached_tokens"] for c in ok
        ),
        "server_first_chunk_delay_s": FIRST_CHUNK_DELAY_S,
        "spans": len(spans),
        "first_start_ns": min(starts),
        "last_start_ns": max(starts),
        "start_span_s": (max(starts) - min(starts)) / 1e9,
        "durations_s": [round((s.end_time - s.start_time) / 1e9, 6) for s in spans],
        "calls": calls,
    }


def openai_latest_in_subprocess(out: Path) -> dict[str, Any]:
    """The openai-v2 run again with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental.
    The opt-in is read once per process (at the first instrumentation), so a fresh one."""
    env = {**os.environ, "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
    done = subprocess.run(
        [sys.executable, __file__, "--openai-latest", str(out)],
        env=env, check=True, capture_output=True, text=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--openai-latest"]:
        summary = write_openai_files(Path(args[1]), "openai_v2_latest")
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    out = Path(args[0]) if args else HERE
    out.mkdir(parents=True, exist_ok=True)
    expected = {
        "sdk_genai_spans": write_sdk_files(out),
        "openai_v2_spans": write_openai_files(out, "openai_v2"),
        "openai_v2_latest_spans": openai_latest_in_subprocess(out),
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    for name in sorted(os.listdir(out)):
        sys.stdout.write(f"{name}\t{(out / name).stat().st_size} bytes\n")
    s, o = expected["sdk_genai_spans"], expected["openai_v2_spans"]
    sys.stdout.write(
        f"sdk: {s['requests']} requests, {s['ok']} ok, input {s['input_tokens_total']}, "
        f"output {s['output_tokens_total']}, cached {s['cache_read_input_tokens_total']}, "
        f"mean ttft {s['ttft_s_mean']}\n"
        f"openai-v2: {o['requests']} calls, {o['ok']} ok, {o['failed']} failed, prompt "
        f"{o['prompt_tokens_total_ok']}, completion {o['completion_tokens_total_ok']}, cached "
        f"{o['cached_tokens_total_ok']}\n"
    )


if __name__ == "__main__":
    main()
