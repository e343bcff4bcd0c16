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
    from yaotu_trace.ingest import read_trace

    lazy = read_trace(out, lazy_content=True)
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
    assert code == ExitCode.INPUT and "is the input TRACE" in err
    assert source.read_bytes() == (SAMPLES / "bursty.jsonl").read_bytes()
    code, _, err = run_cli(["convert", str(source), "--out", str(tmp_path / "x.txt")], capsys)
    assert code == ExitCode.USAGE and "end the name with .parquet" in err
    assert not (tmp_path / "x.txt").exists()


def _mooncake(path: Path, n: int = 40) -> Path:
    """A small Mooncake trace: 512 tokens per hash id, a shared first block, some repeats."""
    rows = [{"timestamp": 100 * i, "input_length": 512 * (2 + i % 3) - 7, "output_length": 9,
             "hash_ids": [0, *(range(1 + 10 * (i % 4), 3 + 10 * (i % 4) + i % 3))][:2 + i % 3]}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_block_id_trace_carries_its_block_size_in_every_output_format(
        suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a Mooncake trace (block ids of 512 tokens)
    source = _mooncake(tmp_path / "m.jsonl")
    out = tmp_path / f"canonical{suffix}"
    # WHEN it is converted
    assert run_cli(["convert", str(source), "--out", str(out)], capsys)[0] == ExitCode.OK
    # THEN the output reads back without --source-block-size, with the same numbers
    from yaotu_trace.ingest import read_trace

    assert read_trace(out).source_block_size == 512
    args = ["--preset", "mooncake"]
    assert _json(["replay", str(out), *args], capsys) == \
        _json(["replay", str(source), *args], capsys)


def test_block_size_column_of_a_csv_is_read_and_checked(tmp_path: Path) -> None:
    from yaotu_trace.errors import TraceSchemaError
    from yaotu_trace.ingest import read_trace

    head = "request_id,arrival_s,prompt_len,output_len,prompt_block_ids,source_block_size\n"
    good = tmp_path / "good.csv"
    good.write_text(head + 'a,0,20,1,"[1, 2]",16\nb,1,20,1,"[1, 3]",16\n')
    assert read_trace(good).source_block_size == 16
    bad = tmp_path / "bad.csv"
    bad.write_text(head + 'a,0,20,1,"[1, 2]",16\nb,1,20,1,"[1, 3]",64\n')
    with pytest.raises(TraceSchemaError, match=r"bad\.csv: line 3, column 'source_block_size': "
                                               r"64 differs from 16 on line 2"):
        read_trace(bad)


def test_block_size_column_survives_a_csv_read_in_parts(tmp_path: Path) -> None:
    from yaotu_trace.ingest import read_trace
    from yaotu_trace.ingest.convert import convert_trace

    csv = tmp_path / "m.csv"
    convert_trace(_mooncake(tmp_path / "m.jsonl", n=400), csv)
    parts = convert_trace(csv, tmp_path / "parts.parquet", part_bytes=2_000)
    assert parts.parts > 5
    assert read_trace(tmp_path / "parts.parquet").source_block_size == 512


def _tables_equal(a: Path, b: Path) -> None:
    import pyarrow.parquet as pq

    left, right = pq.read_table(a), pq.read_table(b)
    assert left.schema == right.schema and left.schema.metadata == right.schema.metadata
    assert left.equals(right)


@pytest.mark.parametrize(("source", "part_bytes"), [
    ("bursty.jsonl", 20_000), ("multitenant.csv", 30_000), ("bursty.jsonl", 1)])
def test_read_in_parts_gives_the_table_read_whole(
        source: str, part_bytes: int, tmp_path: Path) -> None:
    from yaotu_trace.ingest.convert import convert_trace

    # GIVEN a sample trace converted whole (one part) and in parts of a few lines each
    whole = convert_trace(SAMPLES / source, tmp_path / "whole.parquet", part_bytes=1 << 30)
    parts = convert_trace(SAMPLES / source, tmp_path / "parts.parquet", part_bytes=part_bytes)
    # THEN the parts were really separate, and the files hold the same table
    assert whole.parts == 1 and parts.parts > 5
    assert parts.requests == whole.requests == 60
    _tables_equal(tmp_path / "whole.parquet", tmp_path / "parts.parquet")


def test_mooncake_in_parts_numbers_generated_ids_across_parts(tmp_path: Path) -> None:
    from yaotu_trace.ingest.convert import convert_trace

    source = shared_trace("mooncake/conversation_trace.jsonl")
    parts = convert_trace(source, tmp_path / "parts.parquet", part_bytes=200_000)
    whole = convert_trace(source, tmp_path / "whole.parquet", part_bytes=1 << 40)
    assert parts.parts > 10 and whole.parts == 1
    _tables_equal(tmp_path / "whole.parquet", tmp_path / "parts.parquet")


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(i: int, arrival_s: float, request_id: str | None = None) -> dict[str, object]:
    row: dict[str, object] = {"arrival_s": arrival_s, "prompt_len": 3, "output_len": 1,
                              "prompt_tokens": [i, i + 1, i + 2]}
    if request_id is not None:
        row["request_id"] = request_id
    return row


def test_duplicates_across_parts_name_both_lines(tmp_path: Path) -> None:
    from yaotu_trace.errors import TraceSchemaError
    from yaotu_trace.ingest.convert import convert_trace

    rows = [_row(i, float(i), f"id-{i}") for i in range(40)]
    rows[33]["request_id"] = "id-2"
    source = _jsonl(tmp_path / "dup.jsonl", rows)
    with pytest.raises(TraceSchemaError) as info:
        convert_trace(source, tmp_path / "out.parquet", part_bytes=300)
    assert str(info.value) == (f"{source}: line 34, column 'request_id': duplicate id 'id-2' "
                               "(also at line 3); request ids must be unique")
    assert not (tmp_path / "out.parquet").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["dup.jsonl"]  # no parts left behind


def test_a_bad_value_late_in_the_file_names_its_own_line(tmp_path: Path) -> None:
    from yaotu_trace.errors import TraceSchemaError
    from yaotu_trace.ingest.convert import convert_trace

    rows = [_row(i, float(i)) for i in range(40)]
    rows[36]["output_len"] = -4
    source = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TraceSchemaError, match=r"bad.jsonl: line 37, column 'output_len': -4 is "
                       "negative"):
        convert_trace(source, tmp_path / "out.parquet", part_bytes=300)


def test_arrivals_back_in_time_across_parts_are_sorted_by_reading_whole(tmp_path: Path) -> None:
    from yaotu_trace.ingest.convert import convert_trace

    rows = [_row(i, float(i)) for i in range(40)]
    rows[35]["arrival_s"] = 0.5  # earlier than an earlier part
    source = _jsonl(tmp_path / "late.jsonl", rows)
    done = convert_trace(source, tmp_path / "out.parquet", part_bytes=300)
    assert done.parts == 1 and "read whole to sort them" in done.notes[0]
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("arrival_s").to_pylist()[:3] == [0.0, 0.5, 1.0]
    assert table.column("request_id").to_pylist()[:3] == ["r0", "r35", "r1"]


def test_a_mapped_table_is_recognised_and_converted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a CSV whose header no format has, and --map naming the canonical columns
    source = tmp_path / "custom.csv"
    source.write_text("ts,in,out\n0.5,10,2\n0.1,20,3\n1.0,5,1\n")
    mapping = ["--map", "arrival_s=ts", "--map", "prompt_len=in", "--map", "output_len=out"]
    # WHEN it is converted (the format is detected from the mapped header)
    out = tmp_path / "custom.parquet"
    code, _, err = run_cli(["convert", str(source), "-o", str(out), *mapping], capsys)
    assert code == ExitCode.OK, err
    # THEN the table is canonical and sorted, and the note says where arrivals went back
    import pyarrow.parquet as pq

    assert pq.read_table(out).to_pydict() == {
        "request_id": ["r1", "r0", "r2"], "arrival_s": [0.1, 0.5, 1.0],
        "prompt_len": [20, 10, 5], "output_len": [3, 2, 1]}
    assert "note: lines 2–4: arrivals were out of order at 1 place(s)" in err
    # and the same options work for any command reading the CSV directly
    assert run_cli(["analyze", str(source), *mapping], capsys)[0] == ExitCode.OK
