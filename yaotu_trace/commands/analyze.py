"""`trace analyze`: the workload profile of a trace, and every section registered with it
(`commands/shared/analysis.py`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.load import Progress, TraceInput, TraceSource, open_trace, tell
from yaotu_trace.commands.shared.analysis import analysis_report
from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.summary import read_summary
from yaotu_trace.prefix.chain_cache import holds_streamed_chains
from yaotu_trace.prefix.window import parse_warmup

# NOTE: the tiers' and pricing's modules (the model catalogue, the tier specs, the prices) are
# imported when `--tier` or a price is given: a plain analysis never loads them.
if TYPE_CHECKING:
    from yaotu_trace.commands.shared.pricing import PricingOptions
    from yaotu_trace.prefix.options import ReplayOptions


@holds_streamed_chains
def analyze(trace: TraceSource, *, preset: str | None = None, warmup: str | None = None,
            progress: Progress | None = None, charts: bool = False,
            tiers: ReplayOptions | None = None,
            pricing: PricingOptions | None = None) -> Report:
    """`trace analyze`: the workload profile plus every registered section that applies.

    `preset` is the prefix replay's (default: the one `trace replay` picks for this trace, so
    both give the same unlimited hits). `warmup` counts the prefix reuse after that window
    only (`prefix/window.py`); the profile covers every request. A step log from another run is
    refused, and one partly outside the trace noted (`data.telemetry_fit.fit_telemetry`).
    `tiers` (`--tier`, `--capacity`) adds the `tiers` section: which source served what
    with tiers below a GPU pool of `tiers.capacity` (`commands/shared/tiers.py`), and with
    one tier the `tier_curve` section, hits over GPU size × tier size around it. Its `model`
    (at `kv_dtype`) or `kv_bytes_per_token`, which must agree, also give the prefix-reuse
    capacities in bytes, with or without tiers (resolved as `trace sweep` does). `charts`
    adds the console's pictures (`Report.charts`: arrivals, lengths, the capacity points);
    the sections, and so the JSON, are the same either way. `pricing` (a GPU, links, prices)
    prices that tiered replay in the `prefill_pricing` section, as `trace replay` does."""
    spec = None if warmup is None else parse_warmup(warmup)
    if pricing is not None:
        pricing.check()
        if pricing.asked and (tiers is None or not tiers.tiers):
            raise ConfigError("trace analyze prices its tiered replay: add --tier (and "
                              "--capacity for the GPU pool), or price one replay with trace "
                              "replay --gpu")
    if tiers is not None and not tiers.tiers and tiers.capacity is not None:
        # Taken alone it would change nothing: the profile's prefix reuse is the unlimited
        # replay with the LRU capacity points, whatever the pool.
        raise ConfigError(f"trace analyze --capacity {tiers.capacity} sizes the GPU pool a "
                          "--tier sits below; its prefix reuse is unlimited, with the capacities "
                          "for 50/90/99 % of the reuse: add --tier, or replay that pool with "
                          f"trace replay --capacity {tiers.capacity}")
    model = kv_bytes_per_token = None
    if tiers is not None:
        from yaotu_trace.commands.shared.kv_bytes import kv_bytes_per_token_of
        from yaotu_trace.prefix.options import check_tier_options

        tiers = replace(tiers, preset=preset if tiers.preset is None else tiers.preset)
        check_tier_options(tiers)
        model, kv_bytes_per_token = kv_bytes_per_token_of(
            tiers.model, tiers.kv_bytes_per_token, tiers.kv_dtype)
    summary = bench_summary_report(trace)
    if summary is not None:
        return summary
    loaded = open_trace(trace, lazy_content=True, progress=progress, arrivals_optional=True,
                        without_pandas=True)
    if isinstance(trace, TraceInput | str | Path):  # else read already
        tell(progress, "profiling", 0.5)
    settings = EngineSettings(replay_preset=preset, model=model,
                              kv_bytes_per_token=kv_bytes_per_token)
    report = analysis_report(loaded, settings=settings, warmup=spec, charts=charts)
    if tiers is not None and tiers.tiers:
        tell(progress, "replaying the tiers below the GPU", 0.8)
        from yaotu_trace.commands.shared.pricing import PricingOptions
        from yaotu_trace.commands.shared.tiers import priced_tiers, tier_curve_around

        section, priced = priced_tiers(loaded, tiers, pricing or PricingOptions())
        extra = {"tiers": section} if priced is None else {"tiers": section,
                                                          "prefill_pricing": priced}
        if (around := tier_curve_around(loaded, tiers)) is not None:
            extra["tier_curve"] = around
        report = replace(report, sections={**report.sections, **extra})
    return report


def bench_summary_report(source: TraceSource) -> Report | None:
    """The report of a benchmark result that holds run-level numbers only, else None.

    Such a file has no requests to profile: the report shows what it holds, with units, and
    names the sections that need per-request data (`ingest.telemetry.bench_summary`)."""
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
