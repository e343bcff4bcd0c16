"""Orchestration: trace in, `Report` out. No formatting and no terminal here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.profile.workload import profile_trace

# Extra sections of `trace analyze`, in report order: name → builder(trace) or None to skip.
# Later analyses (prefix reuse, the four axes) register here.
AnalyzeSection = Callable[[Trace], Any]
def _prefix_reuse(trace: Trace) -> Any:
    from yaotu_trace.replay.overview import reuse_overview

    return reuse_overview(trace)


ANALYZE_SECTIONS: dict[str, AnalyzeSection] = {"prefix_reuse": _prefix_reuse}


def analyze(trace: Trace) -> Report:
    """`trace analyze`: the workload profile plus every registered section that applies.

    A step log from another run is refused, and one partly outside the trace noted
    (`ingest.telemetry.fit_telemetry`)."""
    from yaotu_trace.ingest.telemetry import fit_telemetry

    if trace.steps is not None:
        trace = fit_telemetry(trace).trace
    sections: dict[str, Any] = {"profile": profile_trace(trace)}
    for name, build in ANALYZE_SECTIONS.items():
        section = build(trace)
        if section is not None:
            sections[name] = section
    return Report(command="analyze", input=input_summary(trace), sections=sections)
