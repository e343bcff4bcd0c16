"""Reading what a command is given, the only input I/O: a trace (`read_trace`, its format
detected and its reader taken from the registry, `ingest.registry`), a step log (`read_steps`)
and an engine's metrics (`read_metrics`). Each refuses a file of the other kind with the option
that takes it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data import canonical, parquet_file
from yaotu_trace.data.compressed import (
    format_suffix,
    is_compressed,
)
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.schema import (
    CANONICAL_COLUMNS,
    Trace,
    normalize,
)
from yaotu_trace.data.steplog import STEP_COLUMNS, StepLog, open_parquet
from yaotu_trace.data.telemetry_fit import UNIX_CLOCK_S, trace_span
from yaotu_trace.errors import ConfigError, TraceReadError, TraceSchemaError
from yaotu_trace.ingest.detect import detect_format
from yaotu_trace.ingest.formats import Reader, TraceFormat
from yaotu_trace.ingest.parts import apply_options
from yaotu_trace.ingest.registry import spec_of
from yaotu_trace.ingest.telemetry import prom_text
from yaotu_trace.ingest.telemetry.metrics import engine_metrics, read_export
from yaotu_trace.ingest.telemetry.serverlog import (
    EXPECTED,
    is_server_log,
    read_server_log,
    server_log_steps,
)
from yaotu_trace.ingest.text_tokens import load_tokenizer
from yaotu_trace.ingest.traces import vcr_steps

if TYPE_CHECKING:
    import pandas as pd


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


def read_trace(
    path: str | Path,
    *,
    fmt: TraceFormat | None = None,
    column_map: Mapping[str, str] | None = None,
    source_block_size: int | None = None,
    steps_path: str | Path | None = None,
    lazy_content: bool = False,
    arrivals_optional: bool = False,
    tokenizer: str | Path | None = None,
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

    `tokenizer` (a `tokenizer.json`, `--tokenizer`) tokenizes a log that holds text (a gateway
    log) into prompt token ids (`ingest.text_tokens`); any other format is refused with it.
    """
    path = Path(path)
    if not path.exists():
        raise TraceReadError(f"{path}: no such file; check the path")
    fmt = fmt or detect_format(path, column_map)
    if tokenizer is not None:
        return _tokenized(path, fmt, Path(tokenizer), column_map, arrivals_optional, steps_path)
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
        trace = _with_steps(trace, Path(steps_path), raw.steps)
    elif raw.steps is not None and trace.has_arrivals:
        trace = replace(trace, steps=StepLog.from_frame(raw.steps, f"{path} (its steps)"),
                        notes=(*trace.notes, *((raw.steps_note,) if raw.steps_note else ())))
    return trace


def _tokenized(path: Path, fmt: TraceFormat, tokenizer: Path,
               column_map: Mapping[str, str] | None, arrivals_optional: bool,
               steps_path: str | Path | None) -> Trace:
    """A trace of text read with the tokenizer the user named."""
    reader = spec_of(fmt).text_reader
    if reader is None:
        raise ConfigError(f"--tokenizer {tokenizer}: {path} is a {fmt.value} trace, which "
                          "carries token ids or lengths rather than text; drop --tokenizer "
                          "(only a gateway log of request text is tokenized)")
    raw = apply_options(reader(path, load_tokenizer(tokenizer)), path, column_map, None)
    trace = normalize(raw, str(path), arrivals_optional=arrivals_optional)
    return trace if steps_path is None else _with_steps(trace, Path(steps_path))


def _load_lazy(path: Path, source_block_size: int | None,
               arrivals_optional: bool = False) -> Trace | None:
    """A canonical Parquet trace with its list columns left on disk, or None to load eagerly."""
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
    # The token columns, streamed later, are most of the run's memory: what reading and
    # checking the rest left behind goes back first.
    parquet_file.give_back_read_memory()
    return replace(trace, lazy=lazy)


def _with_steps(trace: Trace, path: Path, derived: pd.DataFrame | None = None) -> Trace:
    """Attach a per-step engine log read from Parquet, JSONL or CSV, or vllm-vcr's step-stats
    sidecar (the steps the trace derived from the same capture, `derived`, give it their
    decode tokens)."""
    if path.is_file() and vcr_steps.is_step_stats(path):
        arrivals = (trace.requests["arrival_s"].to_numpy(dtype=np.float64)
                    if trace.has_arrivals else None)
        frame, notes = vcr_steps.read_step_stats(path, arrivals, derived)
        return replace(trace, steps=StepLog.from_frame(frame, str(path)),
                       notes=(*trace.notes, *notes))
    if path.is_file() and path.suffix.lower() not in _STEP_SUFFIXES and is_server_log(path):
        # vLLM's iteration lines, their year-less times dated by a Unix-clock trace
        lo = trace_span(trace).lo if trace.has_arrivals else None
        year = (datetime.fromtimestamp(lo, tz=UTC).year
                if lo is not None and lo >= UNIX_CLOCK_S else None)
        steps, said = _server_log_steps(path, year)
        return replace(trace, steps=steps, notes=(*trace.notes, *said))
    return replace(trace, steps=read_steps(path, "--steps"))


# Step logs are tables under these suffixes; any other file may be an engine's server log.
_STEP_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


def _server_log_steps(path: Path, year: int | None) -> tuple[StepLog, list[str]]:
    """The steps of the server log at `path` (`serverlog.server_log_steps`), and its notes."""
    import pandas as pd

    columns, notes = server_log_steps(path, year=year)
    return StepLog.from_frame(pd.DataFrame(columns), str(path)), notes


def read_steps(path: Path, option: str) -> StepLog:
    """A validated per-step engine log from Parquet, JSONL or CSV; `option` names the flag.

    A Parquet log whose rows are in start order (start_s non-decreasing) stays on disk and is
    read in record batches by each consumer (`yaotu_trace.data.steplog`); any other log is read
    whole and sorted by start_s: write it as Parquet sorted by start_s to stream it.
    """
    if not path.exists():
        raise TraceReadError(f"{path}: no such step log; check the {option} path")
    if path.is_file() and vcr_steps.is_step_stats(path):
        return StepLog.from_frame(vcr_steps.read_step_stats(path)[0], str(path))
    suffix = format_suffix(path)
    if path.is_file() and suffix not in _STEP_SUFFIXES and is_server_log(path):
        return _server_log_steps(path, None)[0]

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
        if "start_s" not in frame.columns and "end_s" not in frame.columns:
            raise _as_trace(path, option) or TraceSchemaError(
                f"{path}: step log is missing column(s) 'start_s', 'end_s'; a step log has "
                f"{', '.join(STEP_COLUMNS)}")
    elif suffix == ".csv":
        frame = canonical.read_csv_frame(path)
    else:
        raise TraceReadError(f"{path}: step logs are .parquet, .jsonl or .csv; got '{suffix}'")
    return StepLog.from_frame(frame, str(path))


def read_step_logs(paths: Iterable[str | None], option: str) -> dict[str, StepLog]:
    """The step logs named in `paths` (None: none), each read once, by path: what
    `--calibrate` hands the simulator."""
    return {p: read_steps(Path(p), option) for p in dict.fromkeys(paths) if p is not None}


def _other_columns(path: Path, keep: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of a Parquet file not in `keep` (none when it cannot be opened)."""
    try:
        names = parquet_file.open_file(path).schema_arrow.names
    except TraceReadError:
        return ()  # the reader reports why
    return tuple(c for c in names if c not in keep)


def read_metrics(path: str | Path, *, year: int | None = None,
                 zone: tzinfo | None = None) -> EngineMetrics:
    """Read a Prometheus range-query export (JSON or CSV), /metrics text (`prom_text`), an
    engine server log (`serverlog`, found by its content; `year` dates its year-less times,
    `zone` is the zone of its zone-less ones, UTC when None: `serverlog.log_zone`) or a
    vllm-vcr step-stats sidecar (`vcr_steps.metric_rows`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    notes: tuple[str, ...] = ()
    log_year = None
    requests: tuple[tuple[str, int], ...] = ()
    kind = "export"  # a range or instant query's export; else "log" or "text"
    if path.is_dir() and prom_text.is_scrape_folder(path):
        rows, notes = prom_text.read_prom_folder(path)
        kind = "text"
    elif path.is_file() and vcr_steps.is_step_stats(path):
        rows, notes = vcr_steps.metric_rows(path)  # what vLLM's own logger records of it
    elif path.is_file() and (suffix == ".log" or (
            suffix not in (".json", ".csv", ".tsv") and is_server_log(path))):
        rows, log_notes, log_year, requests = read_server_log(path, year=year, zone=zone)
        notes = tuple(log_notes)
        kind = "log"
    elif path.is_file() and suffix in prom_text.SUFFIXES and prom_text.looks_like_text(path):
        rows, notes = prom_text.read_prom_text(path)
        kind = "text"
    elif path.is_file() and suffix in prom_text.SUFFIXES and suffix:
        raise TraceReadError(
            f"{path}: is neither /metrics text (no '# HELP', '# TYPE' or 'name{{labels}} "
            f"value' line at its start) nor an engine server log ({EXPECTED}); save the "
            "engine's /metrics response as it is (curl -s http://HOST:PORT/metrics > m.prom)"
        )
    elif path.is_dir():
        raise TraceReadError(f"{path}: is a folder, not a metrics file; give the export's "
                             "file (.json or .csv) or a folder of /metrics text snapshots")
    elif not path.is_file():
        raise TraceReadError(f"{path}: no such metrics file; check the --metrics path")
    else:
        try:
            rows = read_export(path, suffix)
        except (TraceReadError, TraceSchemaError) as err:
            raise _as_trace(path) or err from None
    metrics = engine_metrics(rows, path, kind=kind, notes=notes, log_year=log_year, zone=zone)
    return replace(metrics, request_tokens=requests) if requests else metrics


def dated_by_trace(trace: Trace, metrics: EngineMetrics) -> EngineMetrics:
    """A server log whose times lack a year, read again with the year of a Unix-clock trace
    (any other metrics as they are), before `data.telemetry_fit` matches the two clocks; a
    vllm-vcr sidecar refused when it is not of the trace's capture (`same_capture`)."""
    same_capture(trace, metrics)
    lo = trace_span(trace).lo
    if metrics.log_year is None or not lo >= UNIX_CLOCK_S:
        return metrics
    return read_metrics(metrics.path, year=datetime.fromtimestamp(lo, tz=UTC).year,
                        zone=metrics.log_zone)


def same_capture(trace: Trace, metrics: EngineMetrics) -> None:
    """Refuse a vllm-vcr step-stats sidecar given as --metrics with a vllm-vcr trace of another
    capture: the trace's outputs reached the tap at instants (its token times) the sidecar has
    no line for. Any other pair is left to `data.telemetry_fit`."""
    path = Path(metrics.path)
    if (trace.format_name != "vllm-vcr" or not path.is_file()
            or not vcr_steps.is_step_stats(path)):
        return
    present = trace.requests.columns
    column = "token_times_s" if "token_times_s" in present else "first_token_s"
    if column not in present:
        return
    values = trace.requests[column].dropna()
    times = (np.concatenate([np.asarray(v, dtype=np.float64) for v in values])
             if column == "token_times_s" and len(values) else
             values.to_numpy(dtype=np.float64))
    # Every line of the sidecar holds the running gauge, at its own time.
    lines = metrics.gauge("num_running")
    line_s = (np.empty(0) if lines is None else lines["time_s"].to_numpy(dtype=np.float64))
    vcr_steps.check_same_capture(path, line_s, np.unique(times))


def _as_trace(path: Path, option: str = "--metrics") -> TraceReadError | None:
    """The error for a request trace (or a benchmark summary) given as `option` (--metrics,
    --steps): where it belongs, rather than which field it lacks."""
    try:
        fmt = detect_format(path)
    except TraceReadError as err:
        return err if "summary table" in str(err) else None
    other = ("the engine's log or /metrics export as --metrics" if option == "--metrics" else
             "the engine's step log as --steps")
    return TraceReadError(
        f"{path}: is a request trace ({fmt.value}), not engine telemetry; give it as the "
        f"trace (trace diagnose {path}), and {other}")
