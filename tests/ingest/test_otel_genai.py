"""OpenTelemetry spans with the current GenAI names and in the layouts other tools write: flat
`{"spans": [...]}` lists, bare span arrays, JSON Lines of either; error-status spans."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

OTEL = FIXTURES / "otel"
SEMCONV = OTEL / "semconv_tool_calls.json"
SGLANG = OTEL / "sglang_flat_spans.json"


def _semconv_spans() -> list[dict[str, object]]:
    doc = json.loads(SEMCONV.read_text())
    return list(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])


def _check_semconv(path: Path) -> None:
    """The tool-call example of the GenAI semantic conventions (examples-llm-calls.md): span 1
    has 47 input / 17 output tokens, span 2 has 97 / 52; the tool span has no usage."""
    trace = read_trace(path)
    req = trace.requests
    assert req["request_id"].tolist() == [
        "chatcmpl-9J3uIL87gldCFtiIbyaOvTeYBRA3l",
        "chatcmpl-call_VSPygqKTWdrhaFErNvMV18Yl",
    ]
    assert req["prompt_len"].tolist() == [47, 97]
    assert req["output_len"].tolist() == [17, 52]
    assert req["model"].tolist() == ["gpt-4-0613", "gpt-4-0613"]
    assert req["arrival_s"].tolist() == [0.0, 1.25]
    assert req["finish_s"].tolist() == [1.0, 3.0]  # span ends; no gen_ai.latency.e2e
    assert "1 span(s) without 'gen_ai.usage.input_tokens' were skipped (not requests)" in (
        trace.notes
    )


def test_semconv_otlp_document_reads_input_and_output_tokens() -> None:
    assert detect_format(SEMCONV) is TraceFormat.OTEL
    _check_semconv(SEMCONV)
    notes = read_trace(SEMCONV).notes
    assert notes[0] == (
        "arrival_s is seconds since 2018-12-13T14:51:00+00:00 (the earliest span start)"
    )


def test_bare_json_array_of_spans_is_detected_and_read(tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(_semconv_spans(), indent=1))
    assert detect_format(path) is TraceFormat.OTEL
    _check_semconv(path)


def test_json_lines_of_single_spans_are_detected_and_read(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(span) + "\n" for span in _semconv_spans()))
    assert detect_format(path) is TraceFormat.OTEL
    _check_semconv(path)


def test_sglang_flat_span_list_maps_root_spans_to_requests() -> None:
    """Hand-checked against the table in tests/fixtures/otel/README.md (SGLang's span tree from
    python/sglang/srt/observability/trace.py): 3 request root spans among 10 spans."""
    assert detect_format(SGLANG) is TraceFormat.OTEL
    trace = read_trace(SGLANG)
    req = trace.requests
    assert req["request_id"].tolist() == ["7d1e9c2b5a", "2f8a4c6e3b", "5b3d7f1a9c"]
    assert req["arrival_s"].tolist() == [0.0, 0.5, 0.75]
    assert req["prompt_len"].tolist() == [1024, 256, 64]
    assert req["output_len"].tolist() == [128, 32, 0]
    assert req["scheduled_s"].tolist()[:2] == pytest.approx([0.05, 0.52])
    assert req["first_token_s"].tolist()[:2] == pytest.approx([0.3, 0.625])
    assert math.isnan(req["scheduled_s"].iloc[2]) and math.isnan(req["first_token_s"].iloc[2])
    assert req["finish_s"].tolist() == pytest.approx([2.0, 1.5, 1.0])
    assert req["cached_tokens"].iloc[:2].tolist() == [512, 0]
    assert req["cached_tokens"].isna().tolist() == [False, False, True]
    assert req["model"].unique().tolist() == ["Qwen/Qwen3-8B"]


def test_error_status_spans_are_failed_requests_with_their_message() -> None:
    """SGLang closes an aborted request's spans with status ERROR (code 2) and the message
    "have unclosed span, auto closed": that request stays, with status error and the message;
    the notes count it."""
    trace = read_trace(SGLANG)
    notes = trace.notes
    assert "7 span(s) without 'gen_ai.usage.prompt_tokens' were skipped (not requests)" in notes
    assert (
        "1 of 3 request span(s) ended with status ERROR; they are kept with status 'error': "
        "counted in the success rate, left out of latency figures"
    ) in notes
    req = trace.requests
    assert req["status"].tolist() == ["ok", "ok", "error"]
    assert req["error"].isna().tolist() == [True, True, False]
    assert req["error"].iloc[2] == "have unclosed span, auto closed"


@pytest.mark.parametrize("code", [2, "2", "STATUS_CODE_ERROR"])
def test_every_json_spelling_of_the_error_status_counts(tmp_path: Path, code: object) -> None:
    spans = _semconv_spans()
    spans[0]["status"] = {"code": code}
    spans[2]["status"] = {"code": 1}  # OK
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"spans": spans}))
    trace = read_trace(path)
    assert any(note.startswith("1 of 2 request span(s) ended with status ERROR")
               for note in trace.notes)
    assert trace.requests["status"].tolist() == ["error", "ok"]
    assert "error" not in trace.requests.columns  # no status.message, so no error text


def test_json_lines_of_flat_span_lists(tmp_path: Path) -> None:
    spans = json.loads(SGLANG.read_text())["spans"]
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps({"spans": spans[:4]}) + "\n" + json.dumps({"spans": spans[4:]}))
    assert detect_format(path) is TraceFormat.OTEL
    assert read_trace(path).requests["prompt_len"].tolist() == [1024, 256, 64]


def test_older_and_newer_names_mix_in_one_file(tmp_path: Path) -> None:
    """vLLM's span (older prompt/completion names, gen_ai.request.id) next to a semconv span."""
    vllm_span = {
        "spanId": "01",
        "startTimeUnixNano": "1544712662000000000",
        "attributes": [
            {"key": "gen_ai.request.id", "value": {"stringValue": "cmpl-1"}},
            {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "10"}},
            {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "5"}},
            {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 0.5}},
        ],
    }
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([*_semconv_spans(), vllm_span]))
    req = read_trace(path).requests
    assert req["request_id"].tolist()[-1] == "cmpl-1"
    assert req["prompt_len"].tolist() == [47, 97, 10]
    assert req["output_len"].tolist() == [17, 52, 5]
    assert req["finish_s"].tolist()[-1] == pytest.approx(2.5)


def test_no_request_span_error_counts_the_spans_it_saw(tmp_path: Path) -> None:
    doc = json.loads(SGLANG.read_text())
    for span in doc["spans"]:
        span["attributes"] = [a for a in span["attributes"] if "usage" not in a["key"]]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceSchemaError) as info:
        read_trace(path)
    message = str(info.value)
    assert "\n" not in message
    assert "none of the 10 span(s) carries 'gen_ai.usage.input_tokens' or " in message
    assert "'gen_ai.usage.prompt_tokens'" in message


def test_flat_spans_that_are_not_objects_name_the_place(tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"spans": [{"spanId": "1", "startTimeUnixNano": "1"}, 3]}))
    with pytest.raises(TraceReadError, match="'spans' must be a list of objects"):
        read_trace(path, fmt=TraceFormat.OTEL)


def test_bad_start_time_in_a_flat_list_names_the_span(tmp_path: Path) -> None:
    doc = json.loads(SGLANG.read_text())
    doc["spans"][4]["startTimeUnixNano"] = "soon"
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceSchemaError, match=r"spans\[4\], field 'startTimeUnixNano'"):
        read_trace(path)
