"""OpenTelemetry spans the SDK and the openai-v2 instrumentation wrote, read with the numbers
they were fed (tests/fixtures/telemetry/otel; README.md names the code, expected.json the numbers).

The SDK files hold 40 GenAI spans with current semantic-convention names (cache_read input
tokens, time_to_first_chunk), one failed without output tokens; the openai-v2 files hold 12
real client calls against a local server, 2 failed with no usage at all. Failed spans are
requests that failed: kept, counted in the success rate, never dropped.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES

from yaotu_trace.ingest import read_trace

DATA = FIXTURES / "telemetry" / "otel"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
SDK, V2 = EXPECTED["sdk_genai_spans"], EXPECTED["openai_v2_spans"]


@pytest.mark.parametrize("name", ["sdk_genai_spans.json", "sdk_genai_spans.jsonl",
                                  "sdk_genai_spans_protojson.json", "console_exporter.txt"])
def test_sdk_spans_every_encoding(name: str) -> None:
    """OTLP JSON (file exporter, one document or one per line), protobuf JSON, and the
    ConsoleSpanExporter's pretty-printed objects saved as .txt: the same 40 requests."""
    req = read_trace(DATA / name).requests
    assert len(req) == SDK["requests"]
    status = req["status"].astype(str)
    assert (status == "ok").sum() == SDK["ok"] and (status == "error").sum() == SDK["failed"]
    failed = req[status == "error"].iloc[0]
    assert failed["error"] == SDK["failed_status_message"]
    assert failed["output_len"] == 0  # no output-token count: nothing reached the client
    assert int(req["prompt_len"].sum()) == SDK["input_tokens_total"]
    assert int(req["output_len"].sum()) == SDK["output_tokens_total"]
    assert int(req["cached_tokens"].notna().sum()) == SDK["spans_with_cache_read"]
    assert int(req["cached_tokens"].sum()) == SDK["cache_read_input_tokens_total"]
    ok = req[status == "ok"]
    ttft = (ok["first_token_s"] - ok["arrival_s"]).to_numpy(dtype=np.float64)
    assert ttft.mean() == pytest.approx(SDK["ttft_s_mean"], abs=1e-6)
    assert req["arrival_s"].max() == pytest.approx(SDK["start_span_s"])


@pytest.mark.parametrize("name", ["openai_v2_spans.json", "openai_v2_latest_spans.json",
                                  "openai_v2_console.txt"])
def test_openai_v2_failed_calls_are_kept(name: str) -> None:
    """The instrumentation's failed calls carry error.type and no usage: 2 of 12 failed, not
    12 of 12 succeeded."""
    trace = read_trace(DATA / name)
    req = trace.requests
    assert len(req) == V2["requests"]
    status = req["status"].astype(str)
    assert (status == "ok").sum() == V2["ok"] and (status == "error").sum() == V2["failed"]
    ok = req[status == "ok"]
    assert int(ok["prompt_len"].sum()) == V2["prompt_tokens_total_ok"]
    assert int(ok["output_len"].sum()) == V2["completion_tokens_total_ok"]
    assert any("2 carry no output-token count and 2 no input-token count" in n
               for n in trace.notes)
