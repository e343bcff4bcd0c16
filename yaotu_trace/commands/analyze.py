"""`trace analyze`: the workload profile of a trace, and every section registered with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, TraceInput, open_trace, tell
from yaotu_trace.data.report import InputSummary, Report, input_summary
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


def observed_vs_replayed(trace: Trace, options: Mapping[str, Any]) -> Any:
    """A capture's own cached tokens against the replay over time (docs/replay.md), as the
    JSON-ready dict; None for other traces."""
    from yaotu_trace.prefix.reconcile import ENGINE_COUNTED

    if (trace.format_name not in ENGINE_COUNTED or not trace.has("cached_tokens")
            or trace.content_column is None or options.get("warmup") is not None):
        return None
    from yaotu_trace.prefix.trace import replay_trace

    found = replay_trace(trace, preset=options.get("preset"), waterfall=False,
                         top_prefixes=0).reconciliation
    return None if found is None else found.to_dict()


ANALYZE_SECTIONS: dict[str, AnalyzeSection] = {"success": _success,
                                               "prefix_reuse": _prefix_reuse,
                                               "observed_vs_replayed": observed_vs_replayed}


def analyze(trace: TraceSource, *, preset: str | None = None, warmup: str | None = None,
            progress: Progress | None = None, charts: bool = False) -> Report:
    """`trace analyze`: the workload profile plus every registered section that applies.

    `preset` is the prefix replay's (default: the one `trace replay` picks for this trace, so
    both give the same unlimited hits). `warmup` counts the prefix reuse after that window
    only (`prefix/window.py`); the profile covers every request. A step log from another run is
    refused, and one partly outside the trace noted (`ingest.telemetry.fit_telemetry`).
    `charts` adds the console's pictures (`Report.charts`: arrivals, lengths, the capacity
    points); the sections, and so the JSON, are the same either way."""
    from yaotu_trace.ingest.telemetry import fit_telemetry
    from yaotu_trace.prefix.window import parse_warmup
    from yaotu_trace.profile.workload import profile_trace

    spec = None if warmup is None else parse_warmup(warmup)
    summary = bench_summary_report(trace)
    if summary is not None:
        return summary

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
    pictures = (terminal_charts(loaded, reuse=sections.get("prefix_reuse")) if charts
                else None)
    return Report(command="analyze", input=input_summary(loaded), config=config,
                  sections=sections, charts=pictures)


def terminal_charts(trace: Trace, *, reuse: Any = None, lengths: bool = True, kv: bool = False,
                    kv_capacity_tokens: float | None = None) -> Any:
    """The console's pictures of a read trace (`render/text_charts.TerminalCharts`): arrivals
    over time and, with `lengths`, the prompt and output lengths of the successful requests
    (as `profile.workload_figures` computes them); the capacity points of the prefix-reuse
    section `reuse` when it has them; with `kv` the KV series (`profile.figures.kv_series`)."""
    import numpy as np

    from yaotu_trace.data.outcome import successful_mask
    from yaotu_trace.profile.workload_figures import arrival_series, length_distribution
    from yaotu_trace.render.text_charts import TerminalCharts

    df = trace.requests
    arrivals = prompt = output = None
    if len(df):
        prompt_len = df["prompt_len"].to_numpy(dtype=np.float64)
        output_len = df["output_len"].to_numpy(dtype=np.float64)
        if trace.has_arrivals:
            arrivals = arrival_series(df["arrival_s"].to_numpy(dtype=np.float64), prompt_len,
                                      output_len)
        if lengths:
            ok = successful_mask(df)
            prompt = length_distribution(prompt_len[ok], "prompt tokens")
            output = length_distribution(output_len[ok], "output tokens")
    capacity = reuse if getattr(reuse, "available", False) else None
    series = None
    if kv:  # diagnose only: analyze does not pay for the module
        from yaotu_trace.profile.figures import kv_series

        series = kv_series(trace, kv_capacity_tokens)[0]
    return TerminalCharts(arrivals=arrivals, prompt_len=prompt, output_len=output,
                          capacity=capacity, kv=series)


def bench_summary_report(source: TraceSource) -> Report | None:
    """The report of a benchmark result that holds run-level numbers only, else None.

    Such a file has no requests to profile: the report shows what it holds, with units, and
    names the sections that need per-request data (`ingest.bench_summary`)."""
    from yaotu_trace.ingest.summary import read_summary

    if not isinstance(source, TraceInput | str | Path):
        return None
    given = source if isinstance(source, TraceInput) else TraceInput(path=Path(source))
    summary = read_summary(given.path, given.input_format)
    if summary is None:
        return None
    if given.steps is not None:
        raise ConfigError(
            f"{given.path}: a benchmark summary has no requests to match a step log to; drop "
            f"--steps, or {summary.fix}")
    return Report(
        command="analyze",
        input=InputSummary(path=str(given.path), format=f"{summary.format_name} (summary)",
                           rows_read=0, requests=0, source_block_size=None, content=None,
                           columns=(), notes=summary.notes),
        sections={"bench_summary": summary},
    )
