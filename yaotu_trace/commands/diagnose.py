"""`trace diagnose`: a verdict on the four axes, the principal bottleneck and a remedy ledger."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.settings import setup_diagnosis
from yaotu_trace.commands.shared.diagnosis import diagnose_trace
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.report import Report
from yaotu_trace.data.run_id import check_steps_and_metrics
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.telemetry_only import telemetry_trace
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.chain_cache import holds_streamed_chains

if TYPE_CHECKING:
    from yaotu_trace.prefix.options import ReplayOptions


@holds_streamed_chains
def diagnose(
    trace: TraceSource | None,
    options: DiagnosisOptions | None = None,
    *,
    steps: str | Path | None = None,
    progress: Progress | None = None,
    charts: bool = False,
    tiers: ReplayOptions | None = None,
) -> Report:
    """`trace diagnose`: the axes, the verdict, the ledger and the findings of a trace, judged
    under `options` (docs/diagnose.md). Every option is checked before the trace is read.

    Without a trace (`trace=None`), the telemetry alone is judged: `options.metrics`, `steps`
    (a step log) or both; with a trace, its step log comes with it (`TraceInput.steps`).
    `charts` adds the console's pictures (`Report.charts`: KV over time, arrivals); the
    sections, and so the JSON, are the same either way. `tiers` (`--tier`) adds the `tiers`
    section: which source served what with tiers below the KV pool of `options.kv_capacity`
    (`commands/shared/tiers.py`), and, when `options.metrics` splits the engine's hits by
    tier, the `observed_tiers` section that holds them against it.
    """
    options = options or DiagnosisOptions()
    if tiers is not None:
        # NOTE: imported here: the tiers' modules (their specs, pricing) load for --tier only.
        from yaotu_trace.commands.shared.tiers import under_deployment

        tiers = under_deployment(tiers, options)
    if tiers is not None and trace is None:
        raise ConfigError("--tier replays a trace's prompts; give the TRACE")
    if trace is None and options.metrics is None and steps is None:
        raise ConfigError("trace diagnose needs a TRACE to judge, or engine telemetry alone: "
                          "--metrics FILE (a server log or Prometheus export) or --steps FILE")
    if trace is not None and steps is not None:
        raise ConfigError("--steps is read with the trace: pass it in the trace's input "
                          "(TraceInput.steps), not both")
    setup = setup_diagnosis(options)
    tell(progress, "reading the telemetry and the trace", 0.0)
    engine_metrics = setup.telemetry(options.metrics)
    if trace is None:
        loaded = _telemetry_input(engine_metrics, steps)
    else:
        loaded = open_trace(trace, lazy_content=True, without_pandas=True)
    tell(progress, "judging the axes", 0.3)
    report = diagnose_trace(loaded, metrics=engine_metrics, settings=setup.settings,
                            thresholds=setup.thresholds, charts=charts)
    if tiers is not None and tiers.tiers:
        tell(progress, "replaying the tiers below the GPU", 0.9)
        from yaotu_trace.commands.shared.tiers import tier_sections

        extra = tier_sections(loaded, tiers, engine_metrics)
        report = replace(report, sections={**report.sections, **extra})
    return report


def _telemetry_input(metrics: EngineMetrics | None, steps: str | Path | None) -> Trace:
    """The stand-in for a trace when only telemetry is given: no request, the step log
    attached, the telemetry's notes first."""
    from yaotu_trace.ingest.load import read_steps  # pandas only with telemetry to read

    step_log = None if steps is None else read_steps(Path(steps), "--steps")
    paths = [p for p in (None if metrics is None else metrics.path,
                         None if step_log is None else step_log.path) if p is not None]
    judged = " and ".join(paths)
    notes = (f"telemetry only: {judged} judged without a request trace; the axes decide what "
             "the engine's own counters and gauges show, and each panel's `missing` names the "
             "request-trace columns that would decide or sharpen it",
             *(() if metrics is None else metrics.notes))
    if metrics is not None and step_log is not None:
        check_steps_and_metrics(step_log.path, metrics.path, metrics.run_ids)
    if len(paths) == 2:
        notes += ("the step log and the metrics are judged as given: without a trace, their "
                  "clocks are not matched with each other (give both of one run)",)
    return telemetry_trace(judged, steps=step_log, notes=notes)
