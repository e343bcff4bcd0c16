"""Every trace format the tool reads, in detection order: the one place a format is registered.

An entry names a format and where its descriptor is (`module:NAME` under
`yaotu_trace.ingest.traces`); the module is imported when detection reaches it or its format is
read, so a canonical Parquet trace, asked first, loads no other format's module.

The order matters where two formats' records look alike: Bailian rows also carry Mooncake's
keys, and RAGPulse rows too, so Bailian is asked before Mooncake, and Mooncake (which wants no
`session_id`) before RAGPulse; the documents with keys of their own (OTel, vLLM bench, WEKA)
are asked before canonical JSON Lines saved as `.json`. A Parquet file is the canonical table when
its footer names the canonical columns, else Baseten's when it names Baseten's, else the
canonical table again (which names what it lacks); the captures a deployment writes come next,
each told by keys or lines of its own. Adding a format is one module with a
`FORMAT` descriptor and one line here (see docs/formats.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

ENTRIES: tuple[tuple[TraceFormat, str], ...] = (
    (TraceFormat.CANONICAL_PARQUET, "canonical_formats:PARQUET"),
    (TraceFormat.BASETEN, "baseten:FORMAT"),
    (TraceFormat.VLLM_LOG, "vllm_log:FORMAT"),
    (TraceFormat.SGLANG_LOG, "sglang_log:FORMAT"),
    (TraceFormat.SGLANG_METRICS, "sglang_metrics:FORMAT"),
    (TraceFormat.DYNAMO, "dynamo:FORMAT"),
    (TraceFormat.LITELLM, "litellm:FORMAT"),
    (TraceFormat.LMCACHE, "lmcache:FORMAT"),
    (TraceFormat.GATEWAY, "gateway:FORMAT"),
    (TraceFormat.BAILIAN, "bailian:FORMAT"),
    (TraceFormat.GUIDELLM, "guidellm:FORMAT"),
    (TraceFormat.INFERENCE_PERF, "inference_perf:FORMAT"),
    (TraceFormat.OTEL, "otel:FORMAT"),
    (TraceFormat.AIPERF, "aiperf:FORMAT"),
    (TraceFormat.MOONCAKE, "mooncake:FORMAT"),
    (TraceFormat.RAGPULSE, "ragpulse:FORMAT"),
    (TraceFormat.VLLM_BENCH, "vllm_bench:FORMAT"),
    (TraceFormat.WEKA, "weka:FORMAT"),
    (TraceFormat.TRACELAB, "tracelab:FORMAT"),
    (TraceFormat.VLLM_VCR, "vcr:FORMAT"),
    (TraceFormat.CANONICAL_JSONL, "canonical_formats:JSONL"),
    (TraceFormat.AZURE, "azure:FORMAT"),
    (TraceFormat.BURSTGPT, "burstgpt:FORMAT"),
    (TraceFormat.VIDUR, "vidur:FORMAT"),
    (TraceFormat.SPLITWISE, "splitwise:FORMAT"),
    (TraceFormat.CANONICAL_CSV, "canonical_formats:CSV"),
)
_WHERE = dict(ENTRIES)


def spec_of(fmt: TraceFormat) -> TraceFormatSpec:
    """The descriptor of a format (its module imported on first use)."""
    module, _, name = _WHERE[fmt].partition(":")
    spec = getattr(importlib.import_module(f"yaotu_trace.ingest.traces.{module}"), name)
    if not isinstance(spec, TraceFormatSpec) or spec.name is not fmt:
        raise TypeError(f"registry entry {fmt.value!r}: {_WHERE[fmt]} is not its descriptor")
    return spec


def formats() -> Iterator[TraceFormatSpec]:
    """Every format in detection order, each module imported when the iteration reaches it."""
    for fmt, _ in ENTRIES:
        yield spec_of(fmt)


def all_formats() -> tuple[TraceFormatSpec, ...]:
    """Every format in detection order (all modules imported)."""
    return tuple(formats())


def formats_table() -> str:
    """The Markdown table of docs/formats.md: every format in detection order."""
    rows = [
        "| `--input-format` | format | detected by | read in parts |",
        "|---|---|---|---|",
    ]
    rows += [f"| `{spec.name.value}` | {spec.description} | {_detected_by(spec)} | "
             f"{'yes' if spec.parts_reader is not None else 'no'} |" for spec in formats()]
    return "\n".join(rows) + "\n"


def _detected_by(spec: TraceFormatSpec) -> str:
    ways = [f"extension `{e}`" for e in spec.extensions]
    if spec.json_keys is not None:
        ways.append("JSON record keys")
    if spec.json_document is not None:
        ways.append("`.json` document")
    if spec.csv_header is not None:
        ways.append("CSV header")
    if spec.folder is not None:
        ways.append("folder")
    if spec.parquet_footer is not None:
        ways[:] = ["Parquet columns" if w == "extension `.parquet`" else w for w in ways]
        if spec.name is TraceFormat.CANONICAL_PARQUET:
            ways.append("extension `.parquet` (any Parquet file no other format claims)")
    if spec.text_head is not None:
        ways.append("log lines")
    return ", ".join(ways)
