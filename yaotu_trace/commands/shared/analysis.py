"""The workload analysis of a read trace (`trace analyze`, and `trace check` under its
checks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.shared.observed import observed_vs_replayed
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.overview import reuse_overview
from yaotu_trace.prefix.window import WarmupSpec
from yaotu_trace.profile.success import success_profile
from yaotu_trace.profile.workload import profile_trace

# Extra sections of `trace analyze`, in report order: name → builder(trace, options) or None to
# skip; `options` are the command's keyword options (`settings`, an `EngineSettings` of the
# replay's preset, block size and model; `warmup` as a parsed window; ...).
# Later analyses register here.
AnalyzeSection = Callable[[Trace, Mapping[str, Any]], Any]


def _prefix_reuse(trace: Trace, options: Mapping[str, Any]) -> Any:
    s: EngineSettings = options["settings"]
    return reuse_overview(trace, options.get("warmup"), preset=s.replay_preset,
                          kv_bytes_per_token=s.kv_bytes_per_token,
                          block_size_tokens=s.block_size_tokens if s.block_size_given else None)


def _success(trace: Trace, options: Mapping[str, Any]) -> Any:
    return success_profile(trace)


def _observed(trace: Trace, options: Mapping[str, Any]) -> Any:
    # The engine's counts cover every request, so a window (`--warmup`) has nothing to match.
    if options.get("warmup") is not None:
        return None
    return observed_vs_replayed(trace, settings=options["settings"])


ANALYZE_SECTIONS: dict[str, AnalyzeSection] = {"success": _success,
                                               "prefix_reuse": _prefix_reuse,
                                               "observed_vs_replayed": _observed}


def analysis_report(loaded: Trace, *, settings: EngineSettings | None = None,
                    warmup: WarmupSpec | None = None, charts: bool = False) -> Report:
    """The `analyze` report of a read trace: the workload profile and every registered
    section that applies; a step log from another run is refused, and one partly outside the
    trace noted (`data.telemetry_fit.fit_telemetry`). `charts` adds the console's pictures.
    The replays follow `settings` (`replay_rules`: the preset and the block size given, as the
    diagnosis of the same command does), and its `kv_bytes_per_token` (of `model`) gives the
    prefix-reuse capacities in bytes; the config then names both, so the bytes say what they
    assume."""
    if loaded.steps is not None:
        if not loaded.has_arrivals:
            raise ConfigError(
                f"{loaded.path}: a lengths-only table (no timestamp column) cannot be matched "
                "to a step log, which is fitted by arrival time; drop --steps, or give the "
                "trace a timestamp column (--map arrival_s=<source column>)")
        from yaotu_trace.data.telemetry_fit import fit_telemetry

        loaded = fit_telemetry(loaded).trace
    sections: dict[str, Any] = {"profile": profile_trace(loaded)}
    settings = settings or EngineSettings()
    options: dict[str, Any] = {"settings": settings, "warmup": warmup}
    for name, build in ANALYZE_SECTIONS.items():
        section = build(loaded, options)
        if section is not None:
            sections[name] = section
    config: dict[str, Any] = {} if warmup is None else {"warmup": warmup.text}
    if settings.kv_bytes_per_token is not None:
        config.update(model=settings.model, kv_bytes_per_token=settings.kv_bytes_per_token)
    pictures = None
    if charts:
        # NOTE: the console's charts are drawn for a terminal (or --charts) only; a report
        # without them does not pay for their modules (about 0.1 s of imports).
        from yaotu_trace.commands.shared.charts import terminal_charts

        pictures = terminal_charts(loaded, reuse=sections.get("prefix_reuse"))
    return Report(command="analyze", input=input_summary(loaded), config=config,
                  sections=sections, charts=pictures)
