"""Reading what a command is given: a trace in one of the formats of `ingest.traces` (each
describing itself, registered in `ingest.registry`), its step log and an engine's metrics
(`ingest.telemetry`); `ingest.load` holds the entries, the only input I/O.

The package itself imports nothing heavy: its names are loaded on first use, so that
`yaotu_trace.ingest.formats` (the choices of `--input-format`) costs no pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers → the module that defines it.
__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "TraceFormat": "formats",
    "detect_format": "detect",
    "parse_column_map": "load",
    "read_metrics": "load",
    "read_steps": "load",
    "read_trace": "load",
})

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.ingest.detect import detect_format
    from yaotu_trace.ingest.formats import TraceFormat
    from yaotu_trace.ingest.load import parse_column_map, read_metrics, read_steps, read_trace
