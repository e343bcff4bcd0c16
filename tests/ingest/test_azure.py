"""Azure LLM 2023 reader: exact mapping on a fixture, errors, and the public traces' shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, schema_error, shared_trace

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"


def _interarrival_cv(arrival_s: np.ndarray) -> float:
    """Population std / mean of consecutive gaps after a stable sort (trace-formats.md)."""
    gaps = np.diff(np.sort(arrival_s, kind="stable"))
    return float(gaps.std() / gaps.mean())


def test_azure_fixture_maps_columns_to_seconds_and_lengths() -> None:
    trace = read_trace(FIXTURES / "azure_small.csv")
    req = trace.requests
    assert trace.format_name == "azure"
    assert req["arrival_s"].tolist() == pytest.approx(
        [0.0, 0.052, 0.0520001, 1.02004, 157.52004], abs=1e-9
    )
    assert req["prompt_len"].tolist() == [4808, 3180, 110, 1469, 7437]
    assert req["output_len"].tolist() == [10, 8, 27, 13, 251]
    assert "tenant" not in req.columns and "prompt_block_ids" not in req.columns
    assert trace.notes[0].startswith("arrival_s is seconds since 2023-11-16 18:17:03.9799600")


def test_azure_arrivals_keep_100ns_resolution() -> None:
    # GIVEN two rows 100 ns apart, 1.7e9 s after the Unix epoch
    arrival_s = read_trace(FIXTURES / "azure_small.csv").requests["arrival_s"].to_numpy()
    # THEN the gap survives: float seconds since 1970 would round it away
    assert arrival_s[2] - arrival_s[1] == pytest.approx(1e-7, abs=1e-12)


def test_azure_accepts_whole_second_timestamps() -> None:
    arrival_s = read_trace(FIXTURES / "azure_small.csv").requests["arrival_s"]
    # Row 4 is "2023-11-16 18:17:05" with no fractional part.
    assert arrival_s.iloc[3] == pytest.approx(5.0 - 3.97996, abs=1e-9)


def test_azure_is_detected_from_the_header() -> None:
    assert detect_format(FIXTURES / "azure_small.csv") is TraceFormat.AZURE


def test_azure_bad_timestamp_is_a_one_line_error_naming_the_line() -> None:
    path = FIXTURES / "azure_bad_timestamp.csv"
    message = schema_error(path)
    assert "line 4" in message and "TIMESTAMP" in message
    assert "2023-11-16 25:17:04.0000000" in message


def test_azure_missing_timestamp_is_named(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,1,2\n,3,4\n")
    with pytest.raises(TraceSchemaError, match=r"line 3, column 'TIMESTAMP': value is missing"):
        read_trace(path)


def test_azure_missing_column_lists_the_expected_header(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.1,1\n")
    with pytest.raises(TraceSchemaError, match="missing column 'GeneratedTokens'") as info:
        read_trace(path, fmt=TraceFormat.AZURE)
    assert "\n" not in str(info.value)


def test_azure_non_numeric_length_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.1000000,10,2\n2023-11-16 18:17:04.1000000,ten,2\n"
    )
    with pytest.raises(TraceSchemaError,
                       match=r"azure.csv: line 3, column 'ContextTokens' \(read as prompt_len\)"):
        read_trace(path)


def test_azure_code_trace_matches_the_documented_shape() -> None:
    trace = read_trace(shared_trace(CODE))
    req = trace.requests
    arrival_s = req["arrival_s"].to_numpy()
    gaps = np.diff(arrival_s)
    # trace-formats.md §0 and §2.3
    assert len(req) == 8_819
    assert not any("out of order" in note for note in trace.notes)
    assert (gaps > 0).all()  # sorted, no duplicate timestamps
    assert trace.notes[0].startswith("arrival_s is seconds since 2023-11-16 18:17:03.9799600")
    assert arrival_s[-1] == pytest.approx(3_435.948056, abs=1e-6)  # 18:17:03.98 → 19:14:19.93
    assert round(arrival_s[-1], 1) == 3_435.9
    cv = _interarrival_cv(arrival_s)
    assert cv == pytest.approx(13.151, abs=0.001)
    assert round(cv, 1) == 13.2  # the doc's figure
    assert float(np.median(gaps)) == pytest.approx(0.064, abs=0.0005)
    assert float(gaps.max()) == pytest.approx(217.168952, abs=1e-6)
    assert int((gaps > 10).sum()) == 45
    assert int(req["prompt_len"].median()) == 1_469
    assert int(req["output_len"].median()) == 13
    assert int(req["prompt_len"].max()) == 7_437
    assert int((req["prompt_len"] >= 7_430).sum()) == 355
    assert len(req) / arrival_s[-1] == pytest.approx(2.57, abs=0.005)


def test_azure_conv_trace_matches_the_documented_shape() -> None:
    trace = read_trace(shared_trace(CONV))
    req = trace.requests
    arrival_s = req["arrival_s"].to_numpy()
    gaps = np.diff(arrival_s)
    assert len(req) == 19_366
    assert (gaps > 0).all()
    assert trace.notes[0].startswith("arrival_s is seconds since 2023-11-16 18:15:46.6805900")
    assert arrival_s[-1] == pytest.approx(3_501.721937, abs=1e-6)
    cv = _interarrival_cv(arrival_s)
    assert cv == pytest.approx(1.0942, abs=0.0005)
    assert round(cv, 2) == 1.09  # near-Poisson, as the doc says
    assert float(np.median(gaps)) == pytest.approx(0.118, abs=0.0005)
    assert float(gaps.max()) == pytest.approx(4.314579, abs=1e-6)
    assert int(req["prompt_len"].median()) == 1_020
    assert int(req["output_len"].median()) == 129
    assert int(req["output_len"].max()) == 1_000
    assert int((req["output_len"] == 1_000).sum()) == 11
    assert int(req["prompt_len"].max()) == 14_050


def test_azure_code_is_an_order_of_magnitude_burstier_than_conv() -> None:
    code = _interarrival_cv(read_trace(shared_trace(CODE)).requests["arrival_s"].to_numpy())
    conv = _interarrival_cv(read_trace(shared_trace(CONV)).requests["arrival_s"].to_numpy())
    assert code / conv > 10
