"""Fuzzing every trace reader: whatever the bytes, loading succeeds or fails with exit code 3.

Random bytes, truncated files, byte-level mutations of valid files in every format (plain and
compressed), and structured mutations (a JSON, CSV or Parquet value replaced by any other) go
through `read_trace`, the entry the CLI calls, with format detection and with each
`--input-format`. The outcome must be a trace, or a `YaotuError` of exit code 3 whose message
is one line naming the file: never another exception, never a hang. When the trace keeps its
token columns on disk they are streamed too, as the replay and the gap summaries do.

Examples are derandomized so CI is deterministic; `YAOTU_FUZZ_EXAMPLES` raises their number
for a longer local run (e.g. `YAOTU_FUZZ_EXAMPLES=2000`), and `YAOTU_FUZZ_RANDOM=1` draws new
examples on every run.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CHILD_TIMEOUT_S, FIXTURES
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.token_times import gap_summary
from yaotu_trace.errors import ExitCode, YaotuError
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.convert import convert_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.prefix.kernels.stream import ParquetPrompts

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("YAOTU_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=not os.environ.get("YAOTU_FUZZ_RANDOM"),
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FORMATS = (None, *TraceFormat)
_counter = itertools.count()


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


COMPRESS = {".gz": gzip.compress, ".zst": _zstd, ".bz2": bz2.compress, ".xz": lzma.compress}


def _canonical_table() -> pd.DataFrame:
    return pd.DataFrame({
        "request_id": ["a", "b", "c", "d"],
        "arrival_s": [0.0, 0.5, 0.5, 2.0],
        "tenant": ["t1", None, "t2", "t1"],
        "prompt_len": [3, 2, 0, 4],
        "output_len": [2, 1, 3, 1],
        "prompt_tokens": [[1, 2, 3], [1, 2], [], [1, 2, 3, 4]],
        "first_token_s": [0.1, 0.7, 0.6, 2.5],
        "token_times_s": [[0.1, 0.2], [0.7], [0.6, 0.65, 0.9], [2.5]],
        "cached_tokens": [0, 2, 0, 3],
    })


class Seeds(dict[str, bytes]):
    """The seed files by name; shown by their names only when an example fails."""

    def __repr__(self) -> str:
        return f"Seeds({', '.join(self)})"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Valid traces of every format, by file suffix, as bytes (plain and compressed)."""
    folder = tmp_path_factory.mktemp("seeds")
    table = _canonical_table()
    out = Seeds()
    for suffix in (".jsonl", ".csv", ".parquet"):
        write_trace(table, folder / f"t{suffix}")
        out[suffix] = (folder / f"t{suffix}").read_bytes()
    mooncake = [{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
                {"timestamp": 250, "input_length": 512, "output_length": 1, "hash_ids": [1]}]
    out["mooncake.jsonl"] = "".join(json.dumps(r) + "\n" for r in mooncake).encode()
    for name in ("bailian_small.jsonl", "azure_small.csv", "burstgpt_v3_small.csv",
                 "otel_small.json", "otel_small.jsonl", "vllm_bench_small.json"):
        out[name] = (FIXTURES / name).read_bytes()
    out["weka.json"] = (FIXTURES / "weka_mini" / "trace_0022.json").read_bytes()
    out["ragpulse.jsonl"] = (FIXTURES / "ragpulse_mini" / "0_trace.jsonl").read_bytes()
    out["aiperf.jsonl"] = (FIXTURES / "aiperf" / "profile_export.jsonl").read_bytes()
    out["tracelab.jsonl"] = (FIXTURES / "tracelab" / "claude_rounds.jsonl").read_bytes()
    out["vcr.jsonl"] = (FIXTURES / "captures" / "vcr" / "cases.jsonl").read_bytes()
    out["vcr_steps.jsonl"] = (FIXTURES / "captures" / "vcr" / "steps.jsonl").read_bytes()
    out["guidellm.json"] = (FIXTURES / "guidellm" / "benchmarks_mock_server.json").read_bytes()
    for name in ("per_request_lifecycle_metrics.json", "prefix_sharing_example.json"):
        out[f"inference_perf_{name}"] = (FIXTURES / "inference_perf" / name).read_bytes()
    for ext, compress in COMPRESS.items():
        out[f".jsonl{ext}"] = compress(out[".jsonl"])
        out[f".csv{ext}"] = compress(out[".csv"])
    out[".parquet.zst"] = _zstd(out[".parquet"])
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _suffix_of(name: str) -> str:
    """The file name to give a mutated seed: its own suffix (x.jsonl.gz keeps .jsonl.gz)."""
    return name if name.startswith(".") else "_" + name


def _check_loads(path: Path, fmt: TraceFormat | None) -> None:
    """Load (and stream what stays on disk); only success or an exit-3 error is allowed."""
    try:
        trace = read_trace(path, fmt=fmt, lazy_content=True)
        if trace.lazy is not None:
            lazy = trace.lazy
            for column in ("prompt_tokens", "prompt_block_ids"):
                if column in lazy.columns:
                    prompts = ParquetPrompts(
                        path=lazy.path, column=column,
                        prompt_len=trace.requests["prompt_len"].to_numpy(np.int64),
                        source_block_size=(trace.source_block_size
                                           if column == "prompt_block_ids" else None),
                        num_values=lazy.values_in(column))
                    for _ in prompts.batches():
                        pass
            if "token_times_s" in lazy.columns:
                gap_summary(trace.requests, lazy)
    except YaotuError as exc:
        message = str(exc)
        assert exc.exit_code == ExitCode.INPUT, message
        assert message and "\n" not in message, message
        assert message.startswith(str(path)), message


def _write(workdir: Path, suffix: str, data: bytes) -> Path:
    path = workdir / f"case{next(_counter)}{suffix}"
    path.write_bytes(data)
    return path


# --- byte-level fuzzing --------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=3000),
       suffix=st.sampled_from([".jsonl", ".csv", ".parquet", ".json", ".jsonl.gz", ".csv.zst",
                               ".parquet.bz2", ".json.xz", ".tsv", ".ndjson"]),
       fmt=st.sampled_from(FORMATS))
def test_random_bytes(workdir: Path, data: bytes, suffix: str, fmt: TraceFormat | None) -> None:
    _check_loads(_write(workdir, suffix, data), fmt)


@FUZZ
@given(seed=st.sampled_from([
    ".jsonl", ".csv", ".parquet", "mooncake.jsonl", "bailian_small.jsonl", "azure_small.csv",
    "burstgpt_v3_small.csv", "otel_small.json", "otel_small.jsonl", "vllm_bench_small.json",
    "weka.json", "ragpulse.jsonl", "aiperf.jsonl", "guidellm.json", ".jsonl.gz", ".csv.zst",
    ".jsonl.bz2", ".csv.xz", ".parquet.zst"]),
    cut=st.floats(0.0, 1.0), fmt=st.sampled_from(FORMATS))
def test_truncated_valid_files(workdir: Path, seeds: dict[str, bytes], seed: str, cut: float,
                               fmt: TraceFormat | None) -> None:
    data = seeds[seed]
    _check_loads(_write(workdir, _suffix_of(seed), data[: int(len(data) * cut)]), fmt)


MUTATION = st.tuples(st.floats(0.0, 1.0, exclude_max=True),
                     st.sampled_from(["replace", "insert", "delete", "flip"]),
                     st.binary(min_size=1, max_size=6))


def _mutate(data: bytes, edits: list[tuple[float, str, bytes]]) -> bytes:
    out = bytearray(data)
    for where, how, chunk in edits:
        at = int(where * len(out)) if out else 0
        if how == "replace":
            out[at:at + len(chunk)] = chunk
        elif how == "insert":
            out[at:at] = chunk
        elif how == "delete":
            del out[at:at + len(chunk)]
        elif out:
            out[at] ^= chunk[0] or 1
    return bytes(out)


@FUZZ
@given(seed=st.sampled_from([
    ".jsonl", ".csv", ".parquet", "mooncake.jsonl", "bailian_small.jsonl", "azure_small.csv",
    "burstgpt_v3_small.csv", "otel_small.json", "otel_small.jsonl", "vllm_bench_small.json",
    "weka.json", "ragpulse.jsonl", "aiperf.jsonl", "guidellm.json", ".jsonl.gz", ".csv.bz2",
    ".jsonl.xz", ".csv.zst", ".parquet.zst"]),
    edits=st.lists(MUTATION, min_size=1, max_size=4), fmt=st.sampled_from(FORMATS))
def test_mutated_valid_files(workdir: Path, seeds: dict[str, bytes], seed: str,
                             edits: list[tuple[float, str, bytes]],
                             fmt: TraceFormat | None) -> None:
    _check_loads(_write(workdir, _suffix_of(seed), _mutate(seeds[seed], edits)), fmt)


@FUZZ
@given(seed=st.sampled_from([".jsonl", ".csv", "mooncake.jsonl", ".jsonl.gz", ".csv.zst",
                             ".jsonl.xz"]),
       edits=st.lists(MUTATION, max_size=3), part_bytes=st.integers(16, 400))
def test_mutated_files_convert_in_parts(workdir: Path, seeds: dict[str, bytes], seed: str,
                                        edits: list[tuple[float, str, bytes]],
                                        part_bytes: int) -> None:
    # `trace convert` reads these formats in parts (decompressing as it goes): same contract.
    source = _write(workdir, _suffix_of(seed), _mutate(seeds[seed], edits))
    try:
        convert_trace(source, workdir / f"out{next(_counter)}.parquet", part_bytes=part_bytes)
    except YaotuError as exc:
        assert exc.exit_code == ExitCode.INPUT and "\n" not in str(exc), str(exc)
        assert str(exc).startswith(str(source)), str(exc)


# --- structured fuzzing: any value where a value is expected -------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)
KEYS = ("request_id", "arrival_s", "tenant", "prompt_len", "output_len", "prompt_tokens",
        "first_token_s", "token_times_s", "cached_tokens", "timestamp", "input_length",
        "output_length", "hash_ids", "prompt_block_ids", "source_block_size", "output_tokens")


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(KEYS), JSON_VALUES),
                      min_size=1, max_size=4),
       mooncake=st.booleans(), fmt=st.sampled_from(FORMATS))
def test_mutated_json_values(workdir: Path, seeds: dict[str, bytes],
                             edits: list[tuple[int, str, object]], mooncake: bool,
                             fmt: TraceFormat | None) -> None:
    seed = seeds["mooncake.jsonl" if mooncake else ".jsonl"]
    records = [json.loads(line) for line in seed.splitlines()]
    for row, key, value in edits:
        records[row % len(records)][key] = value
    text = "".join(json.dumps(r) + "\n" for r in records)
    _check_loads(_write(workdir, ".jsonl", text.encode()), fmt)


def _replace_somewhere(doc: object, data: st.DataObject) -> object:
    """`doc` with one value somewhere in its tree (chosen by `data`) replaced by any value."""
    if isinstance(doc, dict) and doc and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(doc)))
        return {**doc, key: _replace_somewhere(doc[key], data)}
    if isinstance(doc, list) and doc and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(doc) - 1))
        return [*doc[:at], _replace_somewhere(doc[at], data), *doc[at + 1:]]
    return data.draw(JSON_VALUES)


@FUZZ
@given(seed=st.sampled_from(["bailian_small.jsonl", "otel_small.json", "otel_small.jsonl",
                             "vllm_bench_small.json", "weka.json", "ragpulse.jsonl",
                             "mooncake.jsonl", "aiperf.jsonl", "guidellm.json",
                             "inference_perf_per_request_lifecycle_metrics.json",
                             "inference_perf_prefix_sharing_example.json"]),
       edits=st.integers(1, 3), data=st.data())
def test_mutated_json_documents(workdir: Path, seeds: dict[str, bytes], seed: str, edits: int,
                                data: st.DataObject) -> None:
    # GIVEN a JSON document (or each line of a JSONL file) with values replaced deep inside
    text = seeds[seed].decode()
    lines = seed.endswith(".jsonl")
    docs = [json.loads(line) for line in text.splitlines() if line.strip()] if lines else [
        json.loads(text)]
    for _ in range(edits):
        at = data.draw(st.integers(0, len(docs) - 1))
        docs[at] = _replace_somewhere(docs[at], data)
    body = "".join(json.dumps(d) + "\n" for d in docs)
    _check_loads(_write(workdir, _suffix_of(seed), body.encode()), None)


CELLS = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "nan", "inf", "-1", "1.5", str(2**70), "[1, 2.5]", "[1, [2]]", '"[1,2]"', "true",
     "1e400", "[]", "null", "[null]", "x,y", '"'])


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 8), CELLS), min_size=1,
                      max_size=4),
       fmt=st.sampled_from((None, TraceFormat.CANONICAL_CSV, TraceFormat.AZURE,
                            TraceFormat.BURSTGPT)))
def test_mutated_csv_cells(workdir: Path, edits: list[tuple[int, int, str]],
                           fmt: TraceFormat | None) -> None:
    frame = _canonical_table().astype(object)
    for row, column, cell in edits:
        frame.iat[row, column % frame.shape[1]] = cell
    path = workdir / f"case{next(_counter)}.csv"
    frame.to_csv(path, index=False)
    _check_loads(path, fmt)


ARROW_VALUES = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=4, max_size=4),
    st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4).map(
        lambda v: pa.array(v, pa.uint64())),
    st.lists(st.floats() | st.none(), min_size=4, max_size=4),
    st.lists(st.text(max_size=4) | st.none(), min_size=4, max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5) | st.none(), min_size=4,
             max_size=4),
    st.lists(st.lists(st.floats(), max_size=5) | st.none(), min_size=4, max_size=4),
    st.lists(st.lists(st.integers(0, 2**64 - 1), max_size=5), min_size=4, max_size=4).map(
        lambda v: pa.array(v, pa.list_(pa.uint64()))),
    st.lists(st.lists(st.text(max_size=3), max_size=3), min_size=4, max_size=4),
)


@FUZZ
@given(column=st.sampled_from(list(_canonical_table().columns)), values=ARROW_VALUES,
       lazy_sorted=st.booleans())
def test_mutated_parquet_columns(workdir: Path, column: str, values: object,
                                 lazy_sorted: bool) -> None:
    # GIVEN the canonical table with one column replaced by values of any Arrow type
    table = pa.Table.from_pandas(_canonical_table(), preserve_index=False)
    try:
        array = values if isinstance(values, pa.Array) else pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        assume(False)
        return
    table = table.set_column(table.schema.get_field_index(column), column, array)
    if not lazy_sorted:
        table = table.take([3, 2, 1, 0])
    path = workdir / f"case{next(_counter)}.parquet"
    pq.write_table(table, path, row_group_size=2)
    _check_loads(path, None)


# --- the CLI, end to end ---------------------------------------------------------------------


def _cli_cases(seeds: dict[str, bytes]) -> list[tuple[str, bytes]]:
    rng = random.Random(11)
    cases = [(".parquet", seeds[".parquet"][: len(seeds[".parquet"]) * 2 // 3]),
             (".jsonl.gz", seeds[".jsonl.gz"][:-9]),
             (".jsonl", seeds[".jsonl"].replace(b"[1,2,3]", b"[1,2.5,3]")),
             (".jsonl", seeds[".jsonl"].replace(b'"prompt_len":3', f'"prompt_len":{2**70}'
                                                .encode())),
             (".csv", bytes(rng.randrange(256) for _ in range(600)))]
    data = bytearray(seeds[".parquet"])
    for _ in range(12):
        data[rng.randrange(len(data) // 8, len(data) * 7 // 8)] ^= 0xFF
    cases.append((".parquet", bytes(data)))
    return cases


@pytest.mark.slow
def test_cli_on_damaged_files_exits_0_or_3_in_one_line(workdir: Path,
                                                       seeds: dict[str, bytes]) -> None:
    for suffix, data in _cli_cases(seeds):
        path = _write(workdir, suffix, data)
        done = subprocess.run(
            [sys.executable, "-m", "yaotu_trace", "analyze", str(path), "--format", "json"],
            capture_output=True, text=True, cwd=REPO, timeout=CHILD_TIMEOUT_S, check=False)
        assert done.returncode in (ExitCode.OK, ExitCode.INPUT), (path, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode == ExitCode.INPUT:
            assert done.stderr.count("\n") == 1 and str(path) in done.stderr, done.stderr
