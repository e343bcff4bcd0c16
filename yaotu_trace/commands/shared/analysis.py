"""The workload analysis of a read trace (`trace analyze`, and `trace check` under its
checks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from yaotu_trace.commands.shared.observed import observed_vs_replayed
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.telemetry_fit import fit_telemetry
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.overview import reuse_overview
from yaotu_trace.prefix.window import WarmupSpec
from yaotu_trace.profile.success import success_profile
from yaotu_trace.profile.workload import profile_trace

# Extra sections of `trace analyze`, in report order: name → builder(trace, options) or None to
# skip; `options` are the command's keyword options (`preset`, `warmup` as a parsed window,
# `kv_bytes_per_token`, ...).
# Later analyses register here.
AnalyzeSection = Callable[[Trace, Mapping[str, Any]], Any]


def _prefix_reuse(trace: Trace, options: Mapping[str, Any]) -> Any:
    return reuse_overview(trace, options.get("warmup"), preset=options.get("preset"),
                          kv_bytes_per_token=options.get("kv_bytes_per_token"))


def _success(trace: Trace, options: Mapping[str, Any]) -> Any:
    return success_profile(trace)


def _observed(trace: Trace, options: Mapping[str, Any]) -> Any:
    # The engine's counts cover every request, so a window (`--warmup`) has nothing to match.
    return None if options.get("warmup") is not None else observed_vs_replayed(trace)


ANALYZE_SECTIONS: dict[str, AnalyzeSection] = {"success": _success,
                                               "prefix_reuse": _prefix_reuse,
                                               "observed_vs_replayed": _observed}


def analysis_report(loaded: Trace, *, preset: str | None = None,
                    warmup: WarmupSpec | None = None, charts: bool = False,
                    model: str | None = None,
                    kv_bytes_per_token: int | None = None) -> Report:
    """The `analyze` report of a read trace: the workload profile and every registered
    section that applies; a step log from another run is refused, and one partly outside the
    trace noted (`data.telemetry_fit.fit_telemetry`). `charts` adds the console's pictures.
    `kv_bytes_per_token` (of `model`, resolved by the caller) gives the prefix-reuse
    capacities in bytes; the config then names both, so the bytes say what they assume."""
    if loaded.steps is not None:
        if not loaded.has_arrivals:
            raise ConfigError(
                f"{loaded.path}: a lengths-only table (no timestamp column) cannot be matched "
                "to a step log, which is fitted by arrival time; drop --steps, or give the "
                "trace a timestamp column (--map arrival_s=<source column>)")
        loaded = fit_telemetry(loaded).trace
    sections: dict[str, Any] = {"profile": profile_trace(loaded)}
    options: dict[str, Any] = {"preset": preset, "warmup": warmup,
                               "kv_bytes_per_token": kv_bytes_per_token}
    for name, build in ANALYZE_SECTIONS.items():
        section = build(loaded, options)
        if section is not None:
            sections[name] = section
    config: dict[str, Any] = {} if warmup is None else {"warmup": warmup.text}
    if kv_bytes_per_token is not None:
        config.update(model=model, kv_bytes_per_token=kv_bytes_per_token)
    pictures = None
    if charts:
        # NOTE: the console's charts are drawn for a terminal (or --charts) only; a report
        # without them does not pay for their modules (about 0.1 s of imports).
        from yaotu_trace.commands.shared.charts import terminal_charts

        pictures = terminal_charts(loaded, reuse=sections.get("prefix_reuse"))
    return Report(command="analyze", input=input_summary(loaded), config=config,
                  sections=sections, charts=pictures)
