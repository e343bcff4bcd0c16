"""Every trace format the tool reads, in detection order: the one place a format is registered.

The order matters where two formats' records look alike: Bailian rows also carry Mooncake's
keys, and RAGPulse rows too, so Bailian is asked before Mooncake, and Mooncake (which wants no
`session_id`) before RAGPulse; the documents with keys of their own (OTel, vLLM bench, WEKA)
are asked before canonical JSON Lines saved as `.json`. Adding a format is one module
with a `FORMAT` descriptor and one line here (see docs/formats.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from yaotu_trace.ingest import (
    azure,
    bailian,
    burstgpt,
    canonical_formats,
    mooncake,
    otel,
    ragpulse,
    vllm_bench,
    weka,
)
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

FORMATS: tuple[TraceFormatSpec, ...] = (
    canonical_formats.PARQUET,
    bailian.FORMAT,
    otel.FORMAT,
    mooncake.FORMAT,
    ragpulse.FORMAT,
    vllm_bench.FORMAT,
    weka.FORMAT,
    canonical_formats.JSONL,
    azure.FORMAT,
    burstgpt.FORMAT,
    canonical_formats.CSV,
)

BY_NAME: Mapping[TraceFormat, TraceFormatSpec] = {spec.name: spec for spec in FORMATS}


def spec_of(fmt: TraceFormat) -> TraceFormatSpec:
    """The descriptor of a format."""
    return BY_NAME[fmt]


def formats_table() -> str:
    """The Markdown table of docs/formats.md: every format in detection order."""
    rows = [
        "| `--input-format` | format | detected by | read in parts |",
        "|---|---|---|---|",
    ]
    rows += [f"| `{spec.name.value}` | {spec.description} | {_detected_by(spec)} | "
             f"{'yes' if spec.parts_reader is not None else 'no'} |" for spec in FORMATS]
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
    return ", ".join(ways)
