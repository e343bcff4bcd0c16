"""The trace formats the tool reads, and the descriptor each format module gives of itself.

Light on purpose: `--input-format` and `trace --help` import this module, so it holds names
and plain data only (no pandas, pyarrow or numba). Each format module defines one
`TraceFormatSpec` as `FORMAT`; `ingest.registry` lists them in detection order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.ingest.telemetry.bench_summary import BenchSummary
    from yaotu_trace.ingest.text_tokens import TextTokenizer


class TraceFormat(StrEnum):
    """Input formats; `--input-format` takes these names."""

    CANONICAL_PARQUET = "parquet"
    CANONICAL_JSONL = "jsonl"
    CANONICAL_CSV = "csv"
    MOONCAKE = "mooncake"
    BAILIAN = "bailian"
    AZURE = "azure"
    BURSTGPT = "burstgpt"
    RAGPULSE = "ragpulse"
    WEKA = "weka"
    VLLM_BENCH = "vllm-bench"
    OTEL = "otel"
    VIDUR = "vidur"
    SPLITWISE = "splitwise"
    AIPERF = "aiperf"
    GUIDELLM = "guidellm"
    INFERENCE_PERF = "inference-perf"
    VLLM_LOG = "vllm-log"
    SGLANG_LOG = "sglang-log"
    SGLANG_METRICS = "sglang-metrics"
    DYNAMO = "dynamo"
    LITELLM = "litellm"
    BASETEN = "baseten"
    LMCACHE = "lmcache"
    GATEWAY = "gateway"
    TRACELAB = "tracelab"
    VLLM_VCR = "vllm-vcr"


Reader = Callable[[Path], "RawTrace"]
# (path, text per part in bytes) → the raw tables of consecutive parts of the file.
PartsReader = Callable[[Path, int], Iterator["RawTrace"]]
# path → the run-level summary of a benchmark result without per-request data, else None.
SummaryReader = Callable[[Path], "BenchSummary | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceFormatSpec:
    """One format, as its module describes it: name, detection and readers.

    Detection looks at a file only in the ways the tool knows (`ingest.detect`): the keys of a
    JSON record (the first line of a `.jsonl`/`.ndjson` file, or of a `.json` file no document
    test claimed), the first 64 KiB of a `.json` document, a CSV header, a folder, or, for any
    other extension, the extension itself (`extensions`: a file so named is this format,
    unseen; with `parquet_footer` too, a Parquet file whose raw footer the test accepts), then
    the first 256 KiB of the file's text (`text_head`: a log saved as `.log`, `.txt` or without
    an extension). The first format in registry order whose test accepts wins, so a test may
    assume the earlier formats said no.
    """

    name: TraceFormat
    description: str  # one line, for docs/formats.md
    reader: Reader
    row_label: str  # what an error calls one source record: "line", "row", "request", "span"
    # Set when the format's records stand alone, so `trace convert` can read a file in parts.
    parts_reader: PartsReader | None = None
    extensions: tuple[str, ...] = ()
    json_keys: Callable[[set[str]], bool] | None = None
    json_document: Callable[[str], bool] | None = None
    csv_header: Callable[[set[str]], bool] | None = None
    folder: Callable[[Path], bool] | None = None
    # The raw footer of a Parquet file (its column names appear in it as text), for a format
    # of its own columns that shares the `.parquet` extension with the canonical table.
    parquet_footer: Callable[[bytes], bool] | None = None
    text_head: Callable[[str], bool] | None = None
    # A log that holds text rather than token ids, read with the tokenizer `--tokenizer`
    # names (`ingest.text_tokens`).
    text_reader: Callable[[Path, TextTokenizer], RawTrace] | None = None
    # Set by benchmark formats whose files may hold aggregates only
    # (`ingest.telemetry.bench_summary`).
    summary: SummaryReader | None = None
