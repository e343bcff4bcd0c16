"""`trace convert`: any readable trace becomes a canonical table that gives the same reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, shared_trace

from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, out, err = run_cli([*args, "--format", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    doc.pop("input")  # names the file and its format, which differ by design
    return doc


def test_mooncake_trace_converted_to_parquet_streams_and_replays_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the Mooncake conversation trace (JSONL of hash ids, read whole)
    source = shared_trace("mooncake/conversation_trace.jsonl")
    before = source.stat().st_mtime_ns
    out = tmp_path / "conversation.parquet"
    # WHEN it is converted to canonical Parquet
    code, _, err = run_cli(["convert", str(source), "--out", str(out)], capsys)
    assert code == ExitCode.OK
    assert "wrote 12,031 requests (mooncake → canonical parquet)" in err
    # THEN the Parquet file streams (its block ids stay on disk) ...
    from yaotu_trace.ingest import load_trace

    lazy = load_trace(out, lazy_content=True)
    assert lazy.lazy is not None and "prompt_block_ids" in lazy.lazy.columns
    assert lazy.source_block_size == 512
    # ... and replays exactly as the original, which is left untouched
    args = ["--preset", "mooncake", "--capacity", "100000"]
    assert _json(["replay", str(out), *args], capsys) == \
        _json(["replay", str(source), *args], capsys)
    assert source.stat().st_mtime_ns == before


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_sample_trace_round_trips_in_every_format(
        suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"bursty{suffix}"
    assert run_cli(["convert", str(SAMPLES / "bursty.jsonl"), "-o", str(out)], capsys)[0] == 0
    assert _json(["analyze", str(out)], capsys) == \
        _json(["analyze", str(SAMPLES / "bursty.jsonl")], capsys)


def test_refuses_to_overwrite_its_input_or_guess_a_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "trace.jsonl"
    source.write_bytes((SAMPLES / "bursty.jsonl").read_bytes())
    code, _, err = run_cli(["convert", str(source), "--out", str(source)], capsys)
    assert code == ExitCode.INPUT and "is the input trace" in err
    assert source.read_bytes() == (SAMPLES / "bursty.jsonl").read_bytes()
    code, _, err = run_cli(["convert", str(source), "--out", str(tmp_path / "x.txt")], capsys)
    assert code == ExitCode.INPUT and "end the name with .parquet" in err
    assert not (tmp_path / "x.txt").exists()
