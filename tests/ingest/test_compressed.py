"""Compressed traces (.gz, .zst, .bz2, .xz) read like the plain files they hold, in every
format; damaged ones are one-line errors naming the file and the codec."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from conftest import FIXTURES

from tests.conftest import run_cli, shared_trace
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.convert import convert_trace
from yaotu_trace.ingest.formats import TraceFormat

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


COMPRESS = {
    ".gz": gzip.compress,
    ".zst": _zstd,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
}
CODEC_NAMES = {".gz": "gzip", ".zst": "zstd", ".bz2": "bzip2", ".xz": "xz"}


def _compressed(plain: Path, folder: Path, ext: str, name: str | None = None) -> Path:
    path = folder / ((name or plain.name) + ext)
    path.write_bytes(COMPRESS[ext](plain.read_bytes()))
    return path


def _canonical(folder: Path, suffix: str) -> Path:
    table = pd.DataFrame({
        "request_id": ["a", "b", "c"],
        "arrival_s": [0.0, 0.5, 1.25],
        "prompt_len": [3, 2, 0],
        "output_len": [2, 1, 4],
        "prompt_tokens": [[1, 2, 3], [1, 2], []],
    })
    path = folder / f"plain{suffix}"
    write_trace(table, path)
    return path


# Plain fixtures of every file format, with the format they are detected as.
FILES = {
    "mooncake": (lambda d: _mooncake(d), TraceFormat.MOONCAKE),
    "bailian": (lambda d: FIXTURES / "bailian_small.jsonl", TraceFormat.BAILIAN),
    "azure": (lambda d: FIXTURES / "azure_small.csv", TraceFormat.AZURE),
    "burstgpt": (lambda d: FIXTURES / "burstgpt_small.csv", TraceFormat.BURSTGPT),
    "vllm-bench": (lambda d: FIXTURES / "vllm_bench_small.json", TraceFormat.VLLM_BENCH),
    "otel": (lambda d: FIXTURES / "otel_small.json", TraceFormat.OTEL),
    "otel-jsonl": (lambda d: FIXTURES / "otel_small.jsonl", TraceFormat.OTEL),
    "weka-file": (lambda d: FIXTURES / "weka_mini" / "trace_0001.json", TraceFormat.WEKA),
    "jsonl": (lambda d: _canonical(d, ".jsonl"), TraceFormat.CANONICAL_JSONL),
    "csv": (lambda d: _canonical(d, ".csv"), TraceFormat.CANONICAL_CSV),
    "parquet": (lambda d: _canonical(d, ".parquet"), TraceFormat.CANONICAL_PARQUET),
    "parquet-sample": (lambda d: SAMPLES / "chat.parquet", TraceFormat.CANONICAL_PARQUET),
}


def _mooncake(folder: Path) -> Path:
    path = folder / "mooncake.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 250, "input_length": 512, "output_length": 1, "hash_ids": [1]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("ext", COMPRESS)
@pytest.mark.parametrize("name", FILES)
def test_compressed_file_reads_like_the_plain_file(tmp_path: Path, name: str, ext: str) -> None:
    # GIVEN a trace of one format and the same bytes compressed, named x.<format>.<codec>
    make, fmt = FILES[name]
    plain = make(tmp_path)
    packed = _compressed(plain, tmp_path, ext)
    # THEN the format is told from the inner extension and the tables are the same
    assert detect_format(packed) is fmt
    expected = read_trace(plain)
    got = read_trace(packed)
    pd.testing.assert_frame_equal(got.requests, expected.requests)
    assert got.notes == expected.notes
    assert got.source_block_size == expected.source_block_size
    # AND --input-format names the format of a compressed file as of a plain one
    pd.testing.assert_frame_equal(read_trace(packed, fmt=fmt).requests, expected.requests)


@pytest.mark.parametrize("ext", COMPRESS)
def test_compressed_content_is_found_when_the_name_does_not_say(tmp_path: Path,
                                                                 ext: str) -> None:
    # A gzip file named plain .jsonl (an extension that lies) is still decompressed.
    plain = _canonical(tmp_path, ".jsonl")
    liar = tmp_path / "liar.jsonl"
    liar.write_bytes(COMPRESS[ext](plain.read_bytes()))
    pd.testing.assert_frame_equal(read_trace(liar).requests, read_trace(plain).requests)


def test_compressed_name_without_compressed_content_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    shutil.copy(_canonical(tmp_path, ".jsonl"), path)
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    assert str(exc.value) == (
        f"{path}: named .gz but not gzip data (its first bytes are not gzip's); the file is "
        "damaged or misnamed: copy it again, or rename it without .gz"
    )


def test_compressed_folders_weka_and_ragpulse(tmp_path: Path) -> None:
    # GIVEN the WEKA and RAGPulse folders with every file compressed (mixed codecs)
    weka = tmp_path / "weka"
    weka.mkdir()
    for k, file in enumerate(sorted((FIXTURES / "weka_mini").glob("*.json"))):
        _compressed(file, weka, [".gz", ".zst"][k % 2])
    rag = tmp_path / "rag"
    rag.mkdir()
    for k, file in enumerate(sorted((FIXTURES / "ragpulse_mini").glob("*.jsonl"))):
        _compressed(file, rag, list(COMPRESS)[k % 4])
    # THEN they are detected and read as the plain folders are
    assert detect_format(weka) is TraceFormat.WEKA
    assert detect_format(rag) is TraceFormat.RAGPULSE
    for packed, plain in ((weka, FIXTURES / "weka_mini"), (rag, FIXTURES / "ragpulse_mini")):
        expected = read_trace(plain)
        got = read_trace(packed)
        pd.testing.assert_frame_equal(got.requests, expected.requests)
        assert got.notes == expected.notes


@pytest.mark.parametrize("ext", COMPRESS)
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_compressed_file_names_the_file_and_codec(tmp_path: Path, ext: str,
                                                          damage: str) -> None:
    # GIVEN a compressed JSONL trace of about 200 kB cut in half, or with bytes overwritten
    rows = [{"arrival_s": i * 0.1, "prompt_len": 3, "output_len": 1, "prompt_tokens": [i, 2, 3]}
            for i in range(5000)]
    plain = tmp_path / "big.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = bytearray(COMPRESS[ext](plain.read_bytes()))
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(64)
    path = tmp_path / f"big.jsonl{ext}"
    path.write_bytes(bytes(data))
    # THEN loading fails with one line naming the file and the codec
    with pytest.raises(TraceReadError) as exc:
        read_trace(path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: damaged {CODEC_NAMES[ext]} file (")
    assert message.endswith("it is truncated or corrupt: copy it again or re-export the trace")


@pytest.mark.parametrize("ext", COMPRESS)
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_convert_reads_compressed_text_in_parts(tmp_path: Path, ext: str, suffix: str) -> None:
    # GIVEN a compressed canonical JSONL or CSV of 300 requests
    table = pd.DataFrame({"arrival_s": [i * 0.25 for i in range(300)],
                          "prompt_len": [2] * 300, "output_len": [1] * 300,
                          "prompt_tokens": [[i % 7, 1] for i in range(300)]})
    plain = tmp_path / f"t{suffix}"
    write_trace(table, plain)
    packed = _compressed(plain, tmp_path, ext)
    # WHEN it is converted in parts of about 2 kB of text
    whole = tmp_path / "whole.parquet"
    parts = tmp_path / "parts.parquet"
    convert_trace(plain, whole)
    done = convert_trace(packed, parts, part_bytes=2048)
    # THEN it was read in several parts and gives the table of the plain file
    assert done.parts > 1
    pd.testing.assert_frame_equal(read_trace(parts).requests, read_trace(whole).requests)


def test_cli_analyzes_a_gzipped_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    packed = _compressed(SAMPLES / "bursty.jsonl", tmp_path, ".gz")
    code, out, err = run_cli(["analyze", str(packed), "--format", "json"], capsys)
    assert code == 0, err
    plain_code, plain_out, _ = run_cli(["analyze", str(SAMPLES / "bursty.jsonl"), "--format",
                                        "json"], capsys)
    assert plain_code == 0
    doc, plain = json.loads(out), json.loads(plain_out)
    doc["input"].pop("path"), plain["input"].pop("path")
    assert doc == plain


# --- the public traces, compressed the way they are kept --------------------------------------


@pytest.mark.parametrize(("relative", "ext"), [
    ("mooncake/conversation_trace.jsonl", ".zst"),
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", ".gz"),
    ("weka_claude_code/trace_0022.json", ".xz"),
])
def test_public_trace_compressed_reads_the_same(tmp_path: Path, relative: str, ext: str) -> None:
    plain = shared_trace(relative)
    packed = _compressed(plain, tmp_path, ext)
    expected = read_trace(plain)
    got = read_trace(packed)
    pd.testing.assert_frame_equal(got.requests, expected.requests)
    assert got.notes == expected.notes
