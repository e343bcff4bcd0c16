"""Which format a trace is: what a folder, a JSON or a CSV file holds, or else the file's
extension, asked of each registered format in registry order (`ingest.registry`).

The ways of looking at a trace are fixed here; each format says, in its descriptor, what it
accepts: the keys of a JSON record, a JSON document's head, a CSV header, a folder, or an
extension of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.data.canonical import read_csv_frame
from yaotu_trace.data.compressed import codec_of, format_suffix, open_compressed
from yaotu_trace.data.jsonl import JSON_ERRORS, first_record
from yaotu_trace.data.values import names_of
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.registry import formats
from yaotu_trace.ingest.telemetry import prom_text
from yaotu_trace.ingest.telemetry.serverlog import is_server_log

if TYPE_CHECKING:
    import pandas as pd

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_DOCUMENT_SUFFIX = ".json"
CSV_SUFFIXES = (".csv", ".tsv")
DOCUMENT_HEAD_BYTES = 65536  # of a .json document, enough for its top-level keys


def sniff_keys(keys: set[str]) -> TraceFormat | None:
    """Recognise a JSON record (one line of JSONL) by its keys."""
    return next((s.name for s in formats() if s.json_keys is not None and s.json_keys(keys)), None)


def sniff_header(columns: set[str]) -> TraceFormat | None:
    """Recognise a CSV by its header."""
    return next((s.name for s in formats() if s.csv_header is not None and s.csv_header(columns)),
                None)


def sniff_document(head: str) -> TraceFormat | None:
    """Recognise a whole-file JSON document by its first characters."""
    return next((s.name for s in formats()
                 if s.json_document is not None and s.json_document(head)), None)


def detect_format(path: Path, column_map: Mapping[str, str] | None = None) -> TraceFormat:
    """Choose a format from the extension (inside any compression extension: `x.jsonl.gz` is
    JSONL) and, for JSON and CSV, the fields of the first record (after the `--map` renames, so
    a mapped table is recognised as canonical). Engine telemetry given as a trace (a server
    log, a `/metrics` scrape, a Prometheus export) is refused with where it belongs."""
    try:
        return _detect(path, column_map)
    except TraceReadError as err:
        # NOTE: imported here: detection loads a format's module only when it gets that far.
        from yaotu_trace.ingest.traces.vcr_steps import is_step_stats

        if path.is_file() and is_step_stats(path):
            raise TraceReadError(
                f"{path}: is vllm-vcr's step-stats sidecar (the engine's statistics of every "
                "step, not its requests); give it beside the trace the same capture wrote: "
                f"--steps {path} (its steps) or --metrics {path} (vLLM's series)") from err
        what = _telemetry_kind(path)
        if what is None:
            raise
        raise TraceReadError(
            f"{path}: is {what}, engine telemetry rather than a request trace; give it as "
            f"--metrics {path} (with the trace, or alone: trace diagnose --metrics "
            f"{path})"
        ) from err


def _telemetry_kind(path: Path) -> str | None:
    """What kind of engine telemetry `path` is, when it is one `--metrics` reads."""
    if not path.is_file():
        return None
    if is_server_log(path):
        return "an engine server log"
    if prom_text.looks_like_text(path):
        return "a /metrics scrape"
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return None
    if '"resultType"' in head:
        return "a Prometheus query export"
    first = head.lstrip("\ufeff").split("\n", 1)[0].replace(" ", "").lower()
    if first.startswith("timestamp,metric,") or first == "timestamp,metric,labels,value":
        return "a Prometheus export"
    return None


def _detect(path: Path, column_map: Mapping[str, str] | None) -> TraceFormat:
    renamed = dict(column_map or {})
    if path.is_dir():
        return _detect_folder(path)
    codec_of(path)  # a file named .gz that is not gzip is refused before its format is guessed
    suffix = format_suffix(path)
    if suffix in JSON_LINES_SUFFIXES:
        return _detect_json_lines(path, renamed)
    if suffix == JSON_DOCUMENT_SUFFIX:
        return _detect_json_document(path)
    if suffix in CSV_SUFFIXES:
        return _detect_csv(path, renamed)
    named = _by_extension(path, suffix)
    if named is not None:
        return named
    found = _json_by_content(path) or _text_by_content(path)
    if found is not None:
        return found
    raise TraceReadError(
        f"{path}: unknown trace format '{suffix or '(no extension)'}'; "
        f"pass --input-format, one of: {_names()}"
    )


def _json_by_content(path: Path) -> TraceFormat | None:
    """A JSON document under another extension (`.txt`, `.log`, none), known by its keys: the
    OpenTelemetry SDK's ConsoleSpanExporter output is usually saved so."""
    try:
        with open_compressed(path) as fh:
            head = fh.read(DOCUMENT_HEAD_BYTES).decode("utf-8", errors="replace")
    except (OSError, TraceReadError):
        return None
    if not head.lstrip("\ufeff \t\r\n").startswith(("{", "[")):
        return None
    return sniff_document(head)


def _by_extension(path: Path, suffix: str) -> TraceFormat | None:
    """The first format that claims the extension; a Parquet file's footer is read once and
    asked of the formats told by their columns, and a file none of them accepts goes to the
    first format that claims the extension (the canonical table, which names what it lacks)."""
    footer: bytes | None = None
    first: TraceFormat | None = None
    for spec in formats():
        if suffix not in spec.extensions:
            continue
        if spec.parquet_footer is None:
            return spec.name
        first = first or spec.name
        if footer is None:
            footer = parquet_footer(path)
        if spec.parquet_footer(footer):
            return spec.name
    return first


def parquet_footer(path: Path) -> bytes:
    """The raw footer of a plain Parquet file (b"" when it has none): its column names are
    stored there as text, so a format can be told by them without pyarrow."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            if size < 12:
                return b""
            fh.seek(size - 8)
            tail = fh.read(8)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or length > size - 8:
                return b""
            fh.seek(size - 8 - length)
            return fh.read(length)
    except OSError:
        return b""


TEXT_HEAD_BYTES = 256 * 1024  # of a log, enough for its first requests


def _text_by_content(path: Path) -> TraceFormat | None:
    """A request log under any other extension (`.log`, `.txt`, none), known by its lines."""
    try:
        with open_compressed(path) as fh:
            head = fh.read(TEXT_HEAD_BYTES).decode("utf-8", errors="replace")
    except (OSError, TraceReadError):
        return None
    return next((s.name for s in formats() if s.text_head is not None and s.text_head(head)),
                None)


def _names() -> str:
    return ", ".join(f.value for f in TraceFormat)


def _detect_folder(path: Path) -> TraceFormat:
    found = next((s.name for s in formats() if s.folder is not None and s.folder(path)), None)
    if found is None:
        hidden = sum(1 for p in path.iterdir() if p.is_file() and p.name.startswith("."))
        skipped = f" (besides {hidden} hidden file(s), which are skipped)" if hidden else ""
        raise TraceReadError(
            f"{path}: a folder is read as a WEKA/Claude-Code trace (one JSON per conversation), "
            f"but it holds no .json files{skipped}; pass a trace file"
        )
    return found


def _detect_json_lines(path: Path, renamed: Mapping[str, str]) -> TraceFormat:
    record = first_record(path)
    if record is None:
        raise TraceReadError(f"{path}: no JSON records found; check the file is not empty")
    found = sniff_keys({renamed.get(k, k) for k in record})
    if found is None:
        raise TraceReadError(
            f"{path}: cannot tell the trace format from the keys of line 1 "
            f"({names_of(sorted(record))}); pass --input-format "
            f"({_names()}) or --map arrival_s=<key> ..."
        )
    return found


def _detect_json_document(path: Path) -> TraceFormat:
    """A whole-file JSON document: vLLM bench results, an OTel export, or one WEKA conversation."""
    with open_compressed(path) as fh:
        head = fh.read(DOCUMENT_HEAD_BYTES).decode("utf-8", errors="replace")
    found = sniff_document(head) or sniff_keys(set(_keys_of_first_line(head)))
    if found is not None:
        return found
    if head.lstrip("\ufeff \t\r\n").startswith("["):
        raise TraceReadError(
            f"{path}: a JSON array of records; write one request object per line as JSON Lines "
            "(e.g. jq -c '.[]' in.json > out.jsonl), or pass --input-format"
        )
    raise TraceReadError(
        f"{path}: cannot tell the trace format of this JSON document; pass --input-format, one of: "
        f"{_names()}"
    )


def _summary_csv(header: pd.Index) -> str | None:
    """What a benchmark tool's summary CSV is and which of its files holds the requests: the
    summary has statistics, not requests, so no column mapping can make it a trace."""
    names = [str(c).strip() for c in header]
    if names[:4] == ["Metric", "avg", "min", "max"]:
        return ("AIPerf's summary table (profile_export_aiperf.csv: one row per metric, not per "
                "request); give the per-request profile_export.jsonl of the same artifacts "
                "folder, or profile_export_aiperf.json for the summary (trace analyze)")
    if names[:2] == ["Run Info", "Run Info.1"] or names[:1] == ["Run Info"]:
        return ("guidellm's summary table (benchmarks.csv: one row per benchmark, not per "
                "request); give the benchmarks.json of the same run, which holds every request "
                "(guidellm benchmark --output-path benchmarks.json)")
    return None


def _keys_of_first_line(head: str) -> list[str]:
    lines = head.lstrip("\ufeff").splitlines()
    line = lines[0] if lines else ""
    try:
        record = json.loads(line)
    except JSON_ERRORS:
        return []
    return list(record) if isinstance(record, dict) else []


def _detect_csv(path: Path, renamed: Mapping[str, str]) -> TraceFormat:
    header = read_csv_frame(path, nrows=0, names_once=False).columns
    found = sniff_header({renamed.get(str(c).strip(), str(c).strip()) for c in header})
    if found is None and (summary := _summary_csv(header)) is not None:
        raise TraceReadError(f"{path}: is {summary}")
    if found is None:
        raise TraceReadError(
            f"{path}: cannot tell the trace format from the CSV header "
            f"({names_of(header)}); "
            "pass --input-format or --map arrival_s=<column> ..."
        )
    return found
