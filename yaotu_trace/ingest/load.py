"""Reading traces: format detection, the reader registry and `load_trace`, the only input I/O."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path

from yaotu_trace.data.compressed import (
    codec_of,
    find_file,
    format_suffix,
    is_compressed,
    open_trace,
)
from yaotu_trace.data.jsonl import JSON_ERRORS, first_record
from yaotu_trace.data.schema import (
    CANONICAL_COLUMNS,
    RawTrace,
    Trace,
    normalize,
)
from yaotu_trace.data.steplog import STEP_COLUMNS, StepLog, open_parquet
from yaotu_trace.data.values import names_of
from yaotu_trace.errors import ConfigError, TraceReadError
from yaotu_trace.ingest.formats import TraceFormat, sniff_header, sniff_keys
from yaotu_trace.ingest.parts import apply_options

Reader = Callable[[Path], RawTrace]
RAGPULSE_TRACE = "0_trace.jsonl"

# Format → "package.module:function". Imported lazily so a run pays only for the reader it uses.
READERS: Mapping[TraceFormat, str] = {
    TraceFormat.CANONICAL_PARQUET: "yaotu_trace.data.canonical:read_parquet",
    TraceFormat.CANONICAL_JSONL: "yaotu_trace.data.canonical:read_jsonl",
    TraceFormat.CANONICAL_CSV: "yaotu_trace.data.canonical:read_csv",
    TraceFormat.MOONCAKE: "yaotu_trace.ingest.mooncake:read_mooncake",
    TraceFormat.BAILIAN: "yaotu_trace.ingest.bailian:read_bailian",
    TraceFormat.AZURE: "yaotu_trace.ingest.azure:read_azure",
    TraceFormat.BURSTGPT: "yaotu_trace.ingest.burstgpt:read_burstgpt",
    TraceFormat.RAGPULSE: "yaotu_trace.ingest.ragpulse:read_ragpulse",
    TraceFormat.WEKA: "yaotu_trace.ingest.weka:read_weka",
    TraceFormat.VLLM_BENCH: "yaotu_trace.ingest.vllm_bench:read_vllm_bench",
    TraceFormat.OTEL: "yaotu_trace.ingest.otel:read_otel",
}


def get_reader(fmt: TraceFormat) -> Reader:
    """The reader function for a format."""
    module_name, func = READERS[fmt].split(":")
    module = importlib.import_module(module_name)
    reader: Reader = getattr(module, func)
    return reader


def detect_format(path: Path, column_map: Mapping[str, str] | None = None) -> TraceFormat:
    """Choose a format from the extension (inside any compression extension: `x.jsonl.gz` is
    JSONL) and, for JSON and CSV, the fields of the first record (after the `--map` renames, so
    a mapped table is recognised as canonical)."""
    renamed = dict(column_map or {})
    if path.is_dir():
        if find_file(path, RAGPULSE_TRACE) is not None:
            return TraceFormat.RAGPULSE
        from yaotu_trace.ingest.weka import conversation_files

        if conversation_files(path):
            return TraceFormat.WEKA
        raise TraceReadError(
            f"{path}: a folder is read as a WEKA/Claude-Code trace (one JSON per conversation), "
            "but it holds no .json files; pass a trace file"
        )
    codec_of(path)  # a file named .gz that is not gzip is refused before its format is guessed
    suffix = format_suffix(path)
    if suffix == ".parquet":
        return TraceFormat.CANONICAL_PARQUET
    if suffix in (".jsonl", ".ndjson"):
        record = first_record(path)
        if record is None:
            raise TraceReadError(f"{path}: no JSON records found; check the file is not empty")
        found = sniff_keys({renamed.get(k, k) for k in record})
        if found is None:
            raise TraceReadError(
                f"{path}: cannot tell the trace format from the keys of line 1 "
                f"({names_of(sorted(record))}); pass --input-format "
                f"({', '.join(f.value for f in TraceFormat)}) or --map arrival_s=<key> ..."
            )
        return found
    if suffix == ".json":
        return _sniff_json_document(path)
    if suffix in (".csv", ".tsv"):
        from yaotu_trace.data.canonical import read_csv_frame

        header = read_csv_frame(path, nrows=0).columns
        found = sniff_header({renamed.get(str(c).strip(), str(c).strip()) for c in header})
        if found is None:
            raise TraceReadError(
                f"{path}: cannot tell the trace format from the CSV header "
                f"({names_of(header)}); "
                "pass --input-format or --map arrival_s=<column> ..."
            )
        return found
    raise TraceReadError(
        f"{path}: unknown trace format '{suffix or '(no extension)'}'; "
        f"pass --input-format, one of: {', '.join(f.value for f in TraceFormat)}"
    )


def _sniff_json_document(path: Path) -> TraceFormat:
    """A whole-file JSON document: vLLM bench results, an OTel export, or one WEKA conversation."""
    with open_trace(path) as fh:
        head = fh.read(65536).decode("utf-8", errors="replace")
    if '"resourceSpans"' in head or '"resource_spans"' in head:
        return TraceFormat.OTEL
    # A result saved without --save-detailed keeps only run-level keys such as request_throughput.
    if any(f'"{key}"' in head for key in ("ttfts", "itls", "input_lens", "request_throughput")):
        return TraceFormat.VLLM_BENCH
    if '"requests"' in head and ('"hash_ids"' in head or '"input_tokens"' in head):
        return TraceFormat.WEKA
    if head.lstrip().startswith("{") and "\n{" in head and '"arrival_s"' in head:
        return TraceFormat.CANONICAL_JSONL
    found = sniff_keys(set(_keys_of_first_line(head)))
    if found is not None:
        return found
    if head.lstrip("\ufeff \t\r\n").startswith("["):
        raise TraceReadError(
            f"{path}: a JSON array of records; write one request object per line as JSON Lines "
            "(e.g. jq -c '.[]' in.json > out.jsonl), or pass --input-format"
        )
    raise TraceReadError(
        f"{path}: cannot tell the trace format of this JSON document; pass --input-format, one of: "
        f"{', '.join(f.value for f in TraceFormat)}"
    )


def _keys_of_first_line(head: str) -> list[str]:
    import json

    lines = head.lstrip("\ufeff").splitlines()
    line = lines[0] if lines else ""
    try:
        record = json.loads(line)
    except JSON_ERRORS:
        return []
    return list(record) if isinstance(record, dict) else []


def parse_column_map(pairs: list[str]) -> dict[str, str]:
    """Parse `--map canonical=source` options into {source: canonical}."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        canonical, sep, source = pair.partition("=")
        canonical, source = canonical.strip(), source.strip()
        if not sep or not canonical or not source:
            raise ConfigError(f"--map {pair!r}: write it as canonical=source, e.g. arrival_s=ts")
        if canonical not in CANONICAL_COLUMNS:
            raise ConfigError(
                f"--map {pair!r}: '{canonical}' is not a canonical column; "
                f"one of: {', '.join(CANONICAL_COLUMNS)}"
            )
        mapping[source] = canonical
    return mapping


def load_trace(
    path: str | Path,
    *,
    fmt: TraceFormat | None = None,
    column_map: Mapping[str, str] | None = None,
    source_block_size: int | None = None,
    steps_path: str | Path | None = None,
    lazy_content: bool = False,
) -> Trace:
    """Read, map and validate a trace into the canonical `Trace` (never modifies the file).

    The file may be compressed (`yaotu_trace.data.compressed`); every problem with it is a
    `TraceReadError` or `TraceSchemaError` (exit 3) naming the file.

    `lazy_content=True` leaves the token, block-id and token-time columns of a canonical
    Parquet file on disk (`Trace.lazy`) when its rows are in arrival order: the replay and the
    inter-token gaps (`yaotu_trace.data.token_times`) then stream them row group by row group
    instead of holding every token in memory. Other inputs load as usual.
    """
    path = Path(path)
    if not path.exists():
        raise TraceReadError(f"{path}: no such file; check the path")
    fmt = fmt or detect_format(path, column_map)
    if path.is_dir() and fmt not in (TraceFormat.RAGPULSE, TraceFormat.WEKA):
        raise TraceReadError(f"{path}: is a folder, and a {fmt.value} trace is one file; pass "
                             "the file (only RAGPulse and WEKA traces are folders)")
    if lazy_content and fmt is TraceFormat.CANONICAL_PARQUET and not column_map:
        lazy = _load_lazy(path, source_block_size)
        if lazy is not None:
            return lazy if steps_path is None else _with_steps(lazy, Path(steps_path))
    raw = apply_options(get_reader(fmt)(path), path, column_map, source_block_size)
    trace = normalize(raw, str(path))
    if steps_path is not None:
        trace = _with_steps(trace, Path(steps_path))
    return trace


def _load_lazy(path: Path, source_block_size: int | None) -> Trace | None:
    """A canonical Parquet trace with its list columns left on disk, or None to load eagerly."""
    from dataclasses import replace

    from yaotu_trace.data import canonical

    lazy = canonical.lazy_content(path)
    if lazy is None:
        return None
    raw = canonical.read_parquet(path, skip=lazy.columns)
    if source_block_size is not None:
        raw = replace(raw, source_block_size=source_block_size)
    if "prompt_block_ids" in lazy.columns and raw.source_block_size is None:
        return None  # the eager path explains what is missing
    trace = normalize(raw, str(path))
    if any(note.startswith("arrivals were out of order") for note in trace.notes):
        return None  # file row i must be request i for streaming
    return replace(trace, lazy=lazy)


def load_full(trace: Trace) -> Trace:
    """The same trace with its lazy list columns read into memory (validated as usual)."""
    if trace.lazy is None:
        return trace
    from dataclasses import replace

    full = load_trace(trace.path, fmt=TraceFormat.CANONICAL_PARQUET,
                      source_block_size=trace.source_block_size)
    return replace(full, steps=trace.steps)


def _with_steps(trace: Trace, path: Path) -> Trace:
    """Attach a per-step engine log read from Parquet, JSONL or CSV."""
    from dataclasses import replace

    return replace(trace, steps=read_steps(path, "--steps"))


def read_steps(path: Path, option: str) -> StepLog:
    """A validated per-step engine log from Parquet, JSONL or CSV; `option` names the flag.

    A Parquet log whose rows are in start order (start_s non-decreasing) stays on disk and is
    read in record batches by each consumer (`yaotu_trace.data.steplog`); any other log is read
    whole and sorted by start_s: write it as Parquet sorted by start_s to stream it.
    """
    if not path.exists():
        raise TraceReadError(f"{path}: no such step log; check the {option} path")
    suffix = format_suffix(path)
    from yaotu_trace.data import canonical, parquet_file

    if suffix == ".parquet":
        if not is_compressed(path):
            with parquet_file.reading(path):
                streamed = open_parquet(path)
            if streamed is not None:
                return streamed
        # Only the step columns are read: the others would be dropped by the validation.
        frame = canonical.read_parquet(path, skip=_other_columns(path, STEP_COLUMNS)).requests
    elif suffix in (".jsonl", ".ndjson"):
        frame = canonical.read_jsonl(path).requests
    elif suffix == ".csv":
        frame = canonical.read_csv_frame(path)
    else:
        raise TraceReadError(f"{path}: step logs are .parquet, .jsonl or .csv; got '{suffix}'")
    return StepLog.from_frame(frame, str(path))


def _other_columns(path: Path, keep: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of a Parquet file not in `keep` (none when it cannot be opened)."""
    from yaotu_trace.data import parquet_file

    try:
        names = parquet_file.open_file(path).schema_arrow.names
    except TraceReadError:
        return ()  # the reader reports why
    return tuple(c for c in names if c not in keep)
