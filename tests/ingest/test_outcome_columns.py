"""`status` and `error` from the readers that know them, through the canonical writers and back,
and the one definition of a successful request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.outcome import failed_count, has_status, successful_mask
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.convert import convert_trace

EXTENSIONS = ("parquet", "jsonl", "csv")


def test_successful_means_status_missing_or_ok() -> None:
    requests = pd.DataFrame({"status": pd.Series(
        ["ok", None, "error", "aborted", "timeout", "rejected"], dtype="string")})
    assert successful_mask(requests).tolist() == [True, True, False, False, False, False]
    assert failed_count(requests) == 4 and has_status(requests)
    # No column: the source said nothing, so every request counts as successful.
    bare = pd.DataFrame({"arrival_s": [0.0, 1.0]})
    assert successful_mask(bare).tolist() == [True, True]
    assert failed_count(bare) == 0 and not has_status(bare)


def _written_table(path: Path) -> Path:
    table = pd.DataFrame({
        "request_id": ["a", "b", "c", "d"],
        "arrival_s": [0.0, 0.5, 1.0, 1.5],
        "prompt_len": [10, 20, 30, 40],
        "output_len": [5, 0, 7, 0],
        "status": ["ok", "timeout", None, "REJECTED"],
        "error": [None, "deadline 30 s exceeded", None, "queue full"],
    })
    write_trace(table, path)
    return path


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_status_and_error_round_trip_through_every_canonical_format(tmp_path: Path,
                                                                     ext: str) -> None:
    trace = read_trace(_written_table(tmp_path / f"t.{ext}"))
    req = trace.requests
    # Validation lower-cases the status; a missing one stays missing (read as ok).
    assert req["status"].tolist()[:2] == ["ok", "timeout"]
    assert req["status"].isna().tolist() == [False, False, True, False]
    assert req["status"].iloc[3] == "rejected"
    assert req["error"].tolist()[1] == "deadline 30 s exceeded"
    assert req["error"].iloc[3] == "queue full"
    assert successful_mask(req).tolist() == [True, False, True, False]


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_burstgpt_failures_survive_conversion(tmp_path: Path, ext: str) -> None:
    # burstgpt_small.csv: 5 rows, the one at t=45 s failed (Response tokens 0).
    out = tmp_path / f"b.{ext}"
    convert_trace(FIXTURES / "burstgpt_small.csv", out)
    req = read_trace(out).requests
    assert req["status"].tolist() == ["ok", "error", "ok", "ok", "ok"]
    assert req["error"].notna().tolist() == [False, True, False, False, False]


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_otel_error_span_survives_conversion(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"o.{ext}"
    convert_trace(FIXTURES / "otel" / "sglang_flat_spans.json", out)
    req = read_trace(out).requests
    assert req["status"].tolist() == ["ok", "ok", "error"]
    assert req["error"].iloc[2] == "have unclosed span, auto closed"


def test_an_empty_status_means_the_source_did_not_say(tmp_path: Path) -> None:
    # JSONL keeps "" as a string (CSV reads an empty cell as missing already); both are unstated.
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_len": 1, "output_len": 1, "status": " "}\n'
                    '{"arrival_s": 1, "prompt_len": 1, "output_len": 1, "status": "OK"}\n')
    req = read_trace(path).requests
    assert req["status"].isna().tolist() == [True, False]
    assert successful_mask(req).tolist() == [True, True]
