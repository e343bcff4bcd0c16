"""`trace analyze`: the workload profile of a trace, and every section registered with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, TraceInput, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.schema import Trace

# Extra sections of `trace analyze`, in report order: name → builder(trace, options) or None to
# skip; `options` are the command's keyword options (`preset`, `warmup` as a parsed window, ...).
# Later analyses register here.
AnalyzeSection = Callable[["Trace", Mapping[str, Any]], Any]


def _prefix_reuse(trace: Trace, options: Mapping[str, Any]) -> Any:
    from yaotu_trace.prefix.overview import reuse_overview

    return reuse_overview(trace, options.get("warmup"), preset=options.get("preset"))


def _success(trace: Trace, options: Mapping[str, Any]) -> Any:
    from yaotu_trace.profile.success import success_profile

    return success_profile(trace)


ANALYZE_SECTIONS: dict[str, AnalyzeSection] = {"success": _success,
                                               "prefix_reuse": _prefix_reuse}


def analyze(trace: TraceSource, *, preset: str | None = None, warmup: str | None = None,
            progress: Progress | None = None) -> Report:
    """`trace analyze`: the workload profile plus every registered section that applies.

    `preset` is the prefix replay's (default: the one `trace replay` picks for this trace, so
    both give the same unlimited hits). `warmup` counts the prefix reuse after that window
    only (`prefix/window.py`); the profile covers every request. A step log from another run is
    refused, and one partly outside the trace noted (`ingest.telemetry.fit_telemetry`)."""
    from yaotu_trace.ingest.telemetry import fit_telemetry
    from yaotu_trace.prefix.window import parse_warmup
    from yaotu_trace.profile.workload import profile_trace

    spec = None if warmup is None else parse_warmup(warmup)

    loaded = open_trace(trace, lazy_content=True, progress=progress, arrivals_optional=True)
    if isinstance(trace, TraceInput | str | Path):  # else read already (as the CLI does)
        tell(progress, "profiling", 0.5)
    if loaded.steps is not None:
        if not loaded.has_arrivals:
            raise ConfigError(
                f"{loaded.path}: a lengths-only table (no timestamp column) cannot be matched "
                "to a step log, which is fitted by arrival time; drop --steps, or give the "
                "trace a timestamp column (--map arrival_s=<source column>)")
        loaded = fit_telemetry(loaded).trace
    sections: dict[str, Any] = {"profile": profile_trace(loaded)}
    options: dict[str, Any] = {"preset": preset, "warmup": spec}
    for name, build in ANALYZE_SECTIONS.items():
        section = build(loaded, options)
        if section is not None:
            sections[name] = section
    config = {} if spec is None else {"warmup": spec.text}
    return Report(command="analyze", input=input_summary(loaded), config=config,
                  sections=sections)
