"""Whether a file is a benchmark result with run-level numbers only, and its summary if so."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.data.compressed import format_suffix
from yaotu_trace.ingest.formats import TraceFormat

if TYPE_CHECKING:
    from yaotu_trace.ingest.telemetry.bench_summary import BenchSummary


def read_summary(path: Path, fmt: TraceFormat | None = None) -> BenchSummary | None:
    """The summary of a benchmark result that has no per-request data, else None.

    Only `.json` documents are looked at unless `fmt` names the format, so a trace of another
    kind costs nothing here (not even the import of the readers); the file is read, never
    modified.
    """
    if fmt is None:
        if path.is_dir() or format_suffix(path) != ".json":
            return None
        from yaotu_trace.ingest.detect import detect_format

        fmt = detect_format(path)
    from yaotu_trace.ingest.registry import spec_of

    spec = spec_of(fmt)
    return None if spec.summary is None else spec.summary(path)
