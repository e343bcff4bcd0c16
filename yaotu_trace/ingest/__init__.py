"""Reading traces: one module per format, each describing itself (`FORMAT`), registered in
`ingest.registry`; `detect_format` and `load_trace`, the only input I/O.

The package itself imports nothing heavy: its names are loaded from `ingest.load` on first
use, so that `yaotu_trace.ingest.formats` (the choices of `--input-format`) costs no pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers, defined in (or re-exported by) `ingest.load`.
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

__getattr__, __dir__ = lazy_names(__name__, "load", __all__)

if TYPE_CHECKING:
    from yaotu_trace.ingest.load import (
        CANONICAL_COLUMNS,
        JSON_ERRORS,
        STEP_COLUMNS,
        ConfigError,
        RawTrace,
        Reader,
        StepLog,
        Trace,
        TraceFormat,
        TraceFormatSpec,
        TraceReadError,
        all_formats,
        apply_options,
        codec_of,
        detect_format,
        find_file,
        first_record,
        format_suffix,
        get_reader,
        is_compressed,
        load_trace,
        names_of,
        normalize,
        open_parquet,
        open_trace,
        parse_column_map,
        read_steps,
        sniff_header,
        sniff_keys,
        spec_of,
    )
