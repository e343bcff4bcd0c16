"""BurstGPT reader: columns by name, failed rows kept as errors, release-3 session and elapsed
time."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, schema_error

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_burstgpt_fixture_maps_model_tenant_and_lengths() -> None:
    trace = read_trace(FIXTURES / "burstgpt_small.csv")
    req = trace.requests
    assert trace.format_name == "burstgpt"
    assert req["arrival_s"].tolist() == [5.0, 45.0, 118.0, 118.0, 2010.0]
    assert req["model"].tolist() == ["ChatGPT", "ChatGPT", "GPT-4", "ChatGPT", "GPT-4"]
    assert req["tenant"].tolist() == [
        "Conversation log",
        "Conversation log",
        "API log",
        "API log",
        "Conversation log",
    ]
    assert req["prompt_len"].tolist() == [472, 1087, 417, 213, 1208]
    assert req["output_len"].tolist() == [18, 0, 276, 31, 389]
    assert "session_id" not in req.columns and "finish_s" not in req.columns


def test_burstgpt_failed_requests_are_kept_as_errors_and_counted() -> None:
    # Line 3 (t=45, 'Response tokens' 0) is BurstGPT's mark of a failed request: it stays,
    # with status 'error', so the success rate can count it (1 of 5 rows).
    trace = read_trace(FIXTURES / "burstgpt_small.csv")
    assert trace.rows_read == 5 and len(trace.requests) == 5
    assert trace.requests["status"].tolist() == ["ok", "error", "ok", "ok", "ok"]
    assert trace.requests["error"].isna().tolist() == [True, False, True, True, True]
    assert "'Response tokens' 0" in trace.requests["error"].iloc[1]
    assert any(
        note.startswith("1 failed request(s) ('Response tokens' == 0, 20.0% of rows) are kept "
                        "with status 'error'")
        for note in trace.notes
    )


def test_burstgpt_release_3_reads_columns_by_name() -> None:
    trace = read_trace(FIXTURES / "burstgpt_v3_small.csv")
    req = trace.requests
    assert req["arrival_s"].tolist() == [0.5, 3.75, 130.25, 131.0]
    assert req["session_id"].isna().tolist() == [True, False, False, True]
    assert req["session_id"].iloc[1:3].tolist() == ["a81f2c", "a81f2c"]
    # Elapsed time is submission → full response, so it ends the request.
    assert req["finish_s"].tolist() == [1.75, 16.25, 139.25, 131.0]
    assert req["model"].tolist() == ["ChatGPT", "GPT-4", "GPT-4", "ChatGPT"]
    assert req["prompt_len"].tolist() == [218, 520, 811, 300]
    assert req["status"].tolist() == ["ok", "ok", "ok", "error"]  # the last row failed
    assert "first_token_s" not in req.columns


def test_burstgpt_is_detected_from_the_header() -> None:
    assert detect_format(FIXTURES / "burstgpt_small.csv") is TraceFormat.BURSTGPT
    assert detect_format(FIXTURES / "burstgpt_v3_small.csv") is TraceFormat.BURSTGPT


def test_burstgpt_bad_token_count_is_a_one_line_error_naming_the_line() -> None:
    path = FIXTURES / "burstgpt_bad_tokens.csv"
    message = schema_error(path)
    assert "line 4" in message and "'many'" in message


def test_burstgpt_all_failed_is_read_as_all_errors(tmp_path: Path) -> None:
    # A file of failures is a run with a success rate of 0, which is worth reporting.
    path = tmp_path / "b.csv"
    path.write_text(HEADER + "1,ChatGPT,10,0,10,API log\n2,GPT-4,20,0,20,API log\n")
    trace = read_trace(path)
    assert trace.requests["status"].tolist() == ["error", "error"]


def test_burstgpt_total_mismatch_is_a_note(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(HEADER + "1,ChatGPT,10,5,15,API log\n2,GPT-4,20,5,99,API log\n")
    trace = read_trace(path)
    assert any(note.startswith("1 row(s) have 'Total tokens' !=") for note in trace.notes)


def test_burstgpt_missing_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Log Type\n1,ChatGPT,10,API log\n")
    with pytest.raises(TraceSchemaError, match="missing column 'Response tokens'"):
        read_trace(path, fmt=TraceFormat.BURSTGPT)
