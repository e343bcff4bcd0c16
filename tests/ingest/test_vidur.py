"""Vidur reader: the real `splitwise_code.csv` excerpt of microsoft/vidur, detected by header.

Source: microsoft/vidur `data/processed_traces/splitwise_code.csv` at 7d47513 (first 8 rows,
tests/fixtures/sim_traces/README.md); the numbers below are read off that file by hand.
"""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES, schema_error

from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

DATA = FIXTURES / "sim_traces"


def test_vidur_trace_maps_arrivals_and_lengths() -> None:
    trace = read_trace(DATA / "vidur_splitwise_code.csv")
    req = trace.requests
    assert trace.format_name == "vidur"
    assert trace.rows_read == 8
    assert req["arrival_s"].tolist() == [0.0, 0.052, 0.098189, 0.140684, 0.444994, 0.539187,
                                         0.698571, 1.016041]
    assert req["prompt_len"].tolist() == [4808, 3180, 110, 7433, 34, 374, 6985, 34]
    assert req["output_len"].tolist() == [10, 8, 27, 14, 12, 14, 9, 23]
    # Hand sum of the file's prefill column: 22958 prompt tokens over 8 requests.
    assert int(req["prompt_len"].sum()) == 22958
    assert int(req["output_len"].sum()) == 117


def test_vidur_is_detected_from_the_header_without_map() -> None:
    assert detect_format(DATA / "vidur_splitwise_code.csv") is TraceFormat.VIDUR
    assert detect_format(DATA / "vidur_arxiv_lengths.csv") is TraceFormat.VIDUR


def test_vidur_total_tokens_mismatch_is_a_note(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens\n"
                    "0.0,10,5,15\n1.5,20,5,99\n")
    trace = read_trace(path)
    assert any(n.startswith("1 row(s) have 'num_total_tokens' !=") for n in trace.notes)


def test_vidur_bad_length_is_a_one_line_error_naming_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    "0.0,10,5\n0.5,ten,5\n")
    message = schema_error(path)
    assert "line 3" in message and "num_prefill_tokens" in message and "'ten'" in message


def test_vidur_bad_arrival_names_the_source_column(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    "0.0,10,5\nsoon,12,5\n")
    message = schema_error(path)
    assert "line 3" in message and "arrived_at" in message
