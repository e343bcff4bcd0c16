"""Reading traces: `load_trace`, the only input I/O, with its format detected and its reader
taken from the registry (`ingest.registry`)."""

from __future__ import annotations

from collections.abc import Mapping
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
from yaotu_trace.ingest.detect import detect_format, sniff_header, sniff_keys
from yaotu_trace.ingest.formats import Reader, TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.parts import apply_options
from yaotu_trace.ingest.registry import all_formats, spec_of

# The names `yaotu_trace.ingest` offers, defined here or re-exported from their modules.
__all__ = [
    "CANONICAL_COLUMNS",
    "JSON_ERRORS",
    "STEP_COLUMNS",
    "ConfigError",
    "RawTrace",
    "Reader",
    "StepLog",
    "Trace",
    "TraceFormat",
    "TraceFormatSpec",
    "TraceReadError",
    "all_formats",
    "apply_options",
    "codec_of",
    "detect_format",
    "find_file",
    "first_record",
    "format_suffix",
    "get_reader",
    "is_compressed",
    "load_full",
    "load_trace",
    "names_of",
    "normalize",
    "open_parquet",
    "open_trace",
    "parse_column_map",
    "read_steps",
    "sniff_header",
    "sniff_keys",
    "spec_of",
]


def get_reader(fmt: TraceFormat) -> Reader:
    """The reader function for a format."""
    return spec_of(fmt).reader


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
    arrivals_optional: bool = False,
) -> Trace:
    """Read, map and validate a trace into the canonical `Trace` (never modifies the file).

    The file may be compressed (`yaotu_trace.data.compressed`); every problem with it is a
    `TraceReadError` or `TraceSchemaError` (exit 3) naming the file.

    `lazy_content=True` leaves the token, block-id and token-time columns of a canonical
    Parquet file on disk (`Trace.lazy`) when its rows are in arrival order: the replay and the
    inter-token gaps (`yaotu_trace.data.token_times`) then stream them row group by row group
    instead of holding every token in memory. Other inputs load as usual.

    `arrivals_optional=True` reads a table with lengths but no timestamp column as lengths-only
    (`Trace.has_arrivals` False); only the length profile may use such a trace.
    """
    path = Path(path)
    if not path.exists():
        raise TraceReadError(f"{path}: no such file; check the path")
    fmt = fmt or detect_format(path, column_map)
    if path.is_dir() and spec_of(fmt).folder is None:
        raise TraceReadError(f"{path}: is a folder, and a {fmt.value} trace is one file; pass "
                             "the file (only RAGPulse and WEKA traces are folders)")
    if lazy_content and fmt is TraceFormat.CANONICAL_PARQUET and not column_map:
        lazy = _load_lazy(path, source_block_size, arrivals_optional)
        if lazy is not None:
            return lazy if steps_path is None else _with_steps(lazy, Path(steps_path))
    raw = apply_options(get_reader(fmt)(path), path, column_map, source_block_size)
    trace = normalize(raw, str(path), arrivals_optional=arrivals_optional)
    if steps_path is not None:
        trace = _with_steps(trace, Path(steps_path))
    return trace


def _load_lazy(path: Path, source_block_size: int | None,
               arrivals_optional: bool = False) -> Trace | None:
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
    trace = normalize(raw, str(path), arrivals_optional=arrivals_optional)
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
