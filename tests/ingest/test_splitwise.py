"""splitwise-sim reader: the simulator's own `traces/test_trace.csv`, detected by header.

Source: Mutinifni/splitwise-sim `traces/test_trace.csv` at 8f99e7d (the whole file, 3 rows;
tests/fixtures/sim_traces/README.md); column meanings from that repository's README.
"""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES, schema_error

from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

DATA = FIXTURES / "sim_traces"
HEADER = ("request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,"
          "token_size\n")


def test_splitwise_trace_maps_ids_arrivals_tenant_and_lengths() -> None:
    trace = read_trace(DATA / "splitwise_test_trace.csv")
    req = trace.requests
    assert trace.format_name == "splitwise"
    assert req["request_id"].tolist() == ["0", "1", "2"]
    assert req["arrival_s"].tolist() == [1.0, 3.0, 4.0]
    assert req["prompt_len"].tolist() == [4096, 2048, 2048]
    assert req["output_len"].tolist() == [32, 8, 16]
    assert req["tenant"].tolist() == ["0", "0", "0"]


def test_splitwise_is_detected_from_the_header_without_map() -> None:
    assert detect_format(DATA / "splitwise_test_trace.csv") is TraceFormat.SPLITWISE


def test_splitwise_bad_token_size_is_a_one_line_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text(HEADER + "0,2,0,1,1,4096,32\n1,2,0,3,1,2048,-8\n")
    message = schema_error(path)
    assert "line 3" in message and "token_size" in message


def test_splitwise_duplicate_request_id_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text(HEADER + "0,2,0,1,1,4096,32\n0,2,0,3,1,2048,8\n")
    message = schema_error(path)
    assert "request_id" in message and "line 3" in message
