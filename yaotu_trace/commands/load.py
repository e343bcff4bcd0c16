"""Reading the trace a command works on (and naming the run before a change): the one entry
shared by every command.

A command takes a trace already read (`Trace`), a path, or a `TraceInput` naming the path with
the options of its reader; it reads the trace itself, after checking its own options, so that a
bad option is refused before any work, whether it comes from the command line or from Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from yaotu_trace.data.compressed import format_suffix
from yaotu_trace.data.schema import Trace
from yaotu_trace.ingest.formats import TraceFormat

# `progress(stage, share_done)`: told as a command moves on (the CLI draws a bar from it).
Progress = Callable[[str, float], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceInput:
    """A trace file and how to read it (the command line's TRACE, -i, --map, ... and --steps)."""

    path: Path
    input_format: TraceFormat | None = None
    # `canonical=source` renames, as `--map` takes them: ("arrival_s=ts",).
    column_map: Sequence[str] = ()
    source_block_size: int | None = None
    steps: Path | None = None
    # The model's tokenizer.json, for a log that holds text (`--tokenizer`).
    tokenizer: Path | None = None


# What a command reads: a trace already read, or a file to read (by path or `TraceInput`).
TraceSource = Trace | TraceInput | str | Path


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBefore:
    """The run before a change, judged against the one a command reads on the same requests
    (`trace check` and `trace report` with `--before`, `--metrics-before`, `--matched-only`).

    `trace` is that run's trace (a `TraceInput` carries its step log, `--steps-before`),
    `metrics` its engine telemetry; `matched_only` judges every condition and axis on the
    requests both runs served only.
    """

    trace: TraceSource
    metrics: Path | None = None
    matched_only: bool = False


def load_trace(
    path: str | Path,
    *,
    input_format: TraceFormat | None = None,
    column_map: Sequence[str] = (),
    source_block_size: int | None = None,
    steps: str | Path | None = None,
    lazy_content: bool = False,
    arrivals_optional: bool = False,
    tokenizer: str | Path | None = None,
) -> Trace:
    """Read and validate a trace, as every command does (never modifies the file).

    `lazy_content=True` leaves a canonical Parquet trace's token columns on disk: the replays
    stream them record batch by record batch, out of core.
    """
    # NOTE: imported here, as `ingest.load` imports pandas: `open_trace(without_pandas=True)`
    # may never need it.
    from yaotu_trace.ingest import parse_column_map
    from yaotu_trace.ingest import read_trace as read

    return read(
        Path(path),
        fmt=input_format,
        column_map=parse_column_map(list(column_map)),
        source_block_size=source_block_size,
        steps_path=None if steps is None else Path(steps),
        lazy_content=lazy_content,
        arrivals_optional=arrivals_optional,
        tokenizer=tokenizer,
    )


def open_trace(source: TraceSource, *, lazy_content: bool,
               progress: Progress | None = None, steps: bool = True,
               arrivals_optional: bool = False, without_pandas: bool = False) -> Trace:
    """The trace of `source`: as given when already read, else read now (`steps=False`: a
    command that does not use a step log does not read one; `arrivals_optional=True`: a
    lengths-only table is accepted, for a command that needs no arrival times;
    `without_pandas=True`: a clean Mooncake JSONL file given without reader options is read
    without importing pandas, for a command whose passes need only its arrays)."""
    if not isinstance(source, TraceInput | str | Path):
        return source
    tell(progress, "reading the trace", 0.0)
    given = source if isinstance(source, TraceInput) else TraceInput(path=Path(source))
    if without_pandas and _plain_mooncake(given):
        from yaotu_trace.ingest.traces.mooncake import read_clean

        clean = read_clean(given.path)
        if clean is not None:
            return clean
    return load_trace(given.path, input_format=given.input_format, column_map=given.column_map,
                      source_block_size=given.source_block_size,
                      steps=given.steps if steps else None, lazy_content=lazy_content,
                      arrivals_optional=arrivals_optional, tokenizer=given.tokenizer)


def _plain_mooncake(given: TraceInput) -> bool:
    """Whether `given` would be read as Mooncake JSONL with no option changing how: the
    format named, or a .jsonl/.ndjson file (whose four Mooncake keys `read_clean` checks,
    which detection reads as Mooncake: tests/ingest/test_mooncake_clean.py)."""
    named = given.input_format
    return (not given.column_map and given.source_block_size is None and given.steps is None
            and given.tokenizer is None
            and (named is TraceFormat.MOONCAKE
                 or (named is None and format_suffix(given.path) in (".jsonl", ".ndjson"))))


def tell(progress: Progress | None, stage: str, share: float) -> None:
    """Report progress when someone listens."""
    if progress is not None:
        progress(stage, share)
