"""SGLang's per-request metrics export: `--export-metrics-to-file --export-metrics-to-file-dir
DIR`, written by `FileRequestMetricsExporter` (`sglang/srt/observability/
request_metrics_exporter.py`): one JSON object per finished request, in hourly files
`sglang-request-metrics-YYYYMMDD_HH.log`.

Give the folder (every `sglang-request-metrics-*` file in it, plain or compressed, in name
order, read as one trace) or one file (or several concatenated). Each record is
`{"request_parameters": "<the request object as JSON text>", ...meta_info}`, mapped as the
request log's `Finish` line (`traces/sglang_log.py`): `input_ids` and `cache_salt` from the
request parameters, lengths, `cached_tokens`, latencies and `request_received_ts` (SGLang
writes it with `--enable-metrics`; without it the export has no arrival time and is refused)
from the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Final

from yaotu_trace.data.compressed import plain_stem
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import json_record, text_lines
from yaotu_trace.ingest.traces.sglang_log import Requests, row_of, table

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

FILE_PREFIX: Final = "sglang-request-metrics-"
FIX: Final = "pass the files SGLang wrote with --export-metrics-to-file"


def export_files(folder: Path) -> list[Path]:
    """The export's files in a folder, in name (hour) order."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.name.startswith(FILE_PREFIX))


def read_sglang_metrics(path: Path) -> RawTrace:
    """Every record of the export's files (see the module docstring)."""
    files = export_files(path) if path.is_dir() else [path]
    if not files:
        raise TraceReadError(f"{path}: no {FILE_PREFIX}*.log file in this folder; {FIX}")
    into = Requests()
    for file in files:
        for line, text in text_lines(file):
            if not text.strip():
                continue
            record = json_record(text, file, "line", line)
            params = record.pop("request_parameters", None)
            try:
                obj = json.loads(params) if isinstance(params, str) else (params or {})
            except ValueError as exc:
                raise TraceSchemaError(f"{file}: line {line}, field 'request_parameters': not "
                                       f"the JSON text SGLang writes; {FIX}") from exc
            row_of(obj if isinstance(obj, dict) else {}, record, (file, "line", line), None,
                   None, into)
    raw = table(into, path, "sglang-metrics")
    if len(files) > 1:
        raw = _with_files_note(raw, files)
    return raw


def _with_files_note(raw: RawTrace, files: list[Path]) -> RawTrace:
    from dataclasses import replace

    names = ", ".join(plain_stem(f).removeprefix(FILE_PREFIX) for f in files[:6])
    more = ", …" if len(files) > 6 else ""
    note = (f"{len(files)} export files read as one trace (hours {names}{more}); line numbers "
            "in errors name their file")
    return replace(raw, notes=(note, *raw.notes))


def _is_export_folder(path: Path) -> bool:
    return bool(export_files(path))


def _is_export_record(keys: set[str]) -> bool:
    return "request_parameters" in keys and "prompt_tokens" in keys


def _is_export_head(head: str) -> bool:
    return head.lstrip().startswith('{"request_parameters": ')


FORMAT = TraceFormatSpec(
    name=TraceFormat.SGLANG_METRICS,
    description="SGLang per-request metrics export (`--export-metrics-to-file`): a folder or "
                "file of one JSON per request",
    reader=read_sglang_metrics,
    row_label="line",
    json_keys=_is_export_record,
    json_document=_is_export_head,
    folder=_is_export_folder,
)
