"""OpenTelemetry span reader: gen_ai request spans from OTLP JSON documents and JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, schema_error

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat


def test_otel_fixture_maps_request_spans_to_absolute_times() -> None:
    trace = read_trace(FIXTURES / "otel_small.json")
    req = trace.requests
    assert trace.format_name == "otel"
    assert req["request_id"].tolist() == ["cmpl-a", "cmpl-b"]
    assert req["arrival_s"].tolist() == [0.0, 0.5]
    assert req["prompt_len"].tolist() == [512, 100]
    assert req["output_len"].tolist() == [64, 10]
    assert req["scheduled_s"].tolist() == pytest.approx([0.01, 0.5625])
    assert req["first_token_s"].tolist() == pytest.approx([0.25, 0.625])
    assert req["finish_s"].tolist() == pytest.approx([1.5, 1.25])
    assert req["cached_tokens"].isna().tolist() == [True, False]
    assert int(req["cached_tokens"].iloc[1]) == 64
    assert req["model"].tolist() == ["qwen2.5-7b", "qwen2.5-7b"]
    assert req["instance"].tolist() == ["gpu-0", "gpu-0"]


def test_otel_notes_give_the_utc_origin_and_skipped_spans() -> None:
    notes = read_trace(FIXTURES / "otel_small.json").notes
    assert notes[0] == (
        "arrival_s is seconds since 2023-11-14T22:13:20.123456789+00:00 (the earliest span start)"
    )
    assert "1 span(s) without 'gen_ai.usage.prompt_tokens' were skipped (not requests)" in notes


def test_otel_json_lines_export_is_detected_and_read() -> None:
    path = FIXTURES / "otel_small.jsonl"
    assert detect_format(path) is TraceFormat.OTEL
    req = read_trace(path).requests
    assert req["request_id"].tolist() == ["req-2", "req-1"]  # sorted by span start
    assert req["arrival_s"].tolist() == [0.0, 0.5]
    # req-1 has no e2e attribute: the span's end time closes it.
    assert req["finish_s"].tolist() == pytest.approx([0.5, 2.5])
    assert req["first_token_s"].tolist() == pytest.approx([0.25, 1.0])


def test_otel_document_is_detected() -> None:
    assert detect_format(FIXTURES / "otel_small.json") is TraceFormat.OTEL


def test_otel_snake_case_keys_are_read(tmp_path: Path) -> None:
    doc = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "span_id": "ab",
                                "start_time_unix_nano": 1_700_000_000_000_000_000,
                                "attributes": [
                                    {"key": "gen_ai.usage.prompt_tokens",
                                     "value": {"int_value": "7"}},
                                    {"key": "gen_ai.usage.completion_tokens",
                                     "value": {"int_value": 3}},
                                    {"key": "gen_ai.latency.e2e",
                                     "value": {"double_value": 0.5}},
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    req = read_trace(path).requests
    assert req["request_id"].tolist() == ["ab"]  # no gen_ai.request.id: the span id
    assert req["prompt_len"].tolist() == [7]
    assert req["finish_s"].tolist() == [0.5]


def test_otel_bad_start_time_is_a_one_line_error_naming_the_span() -> None:
    path = FIXTURES / "otel_bad_start.json"
    message = schema_error(path)
    assert "resourceSpans[0].scopeSpans[0].spans[1]" in message
    assert "startTimeUnixNano" in message


def test_otel_bad_token_count_names_the_span_and_line(tmp_path: Path) -> None:
    lines = (FIXTURES / "otel_small.jsonl").read_text().splitlines()
    path = tmp_path / "spans.jsonl"
    path.write_text(lines[0] + "\n" + lines[1].replace('"intValue":"40"', '"intValue":"forty"'))
    with pytest.raises(TraceSchemaError) as info:
        read_trace(path)
    message = str(info.value)
    assert "line 2, resourceSpans[0].scopeSpans[0].spans[0], column 'prompt_len'" in message
    assert "'forty'" in message


def test_otel_without_request_spans_is_an_error(tmp_path: Path) -> None:
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"spanId": "01", "startTimeUnixNano": "1", "attributes": []}
    ]}]}]}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceSchemaError, match="none of the 1 span"):
        read_trace(path)


def test_otel_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    path.write_text((FIXTURES / "otel_small.json").read_text()[:300])
    with pytest.raises(TraceReadError, match=r"spans.json: line \d+, column \d+: invalid JSON"):
        read_trace(path)


def test_otel_invalid_json_line_in_an_export_stream_names_the_line(tmp_path: Path) -> None:
    first = (FIXTURES / "otel_small.jsonl").read_text().splitlines()[0]
    path = tmp_path / "spans.json"
    path.write_text(first + "\n" + '{"resourceSpans": [\n')
    with pytest.raises(TraceReadError, match=r"spans.json: line 2: invalid JSON"):
        read_trace(path)
