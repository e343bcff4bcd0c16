"""The diagnosis report of a read trace: what `trace diagnose` shows, and what `trace check`
and `trace report` judge under the same options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from yaotu_trace.axes import AXES
from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.commands.settings import DiagnosisSetup
from yaotu_trace.commands.shared.observed import observed_vs_replayed
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.report import InputSummary, Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.telemetry_only import is_telemetry_only
from yaotu_trace.diagnosis.diagnose import axis_report, judge_trace
from yaotu_trace.diagnosis.telemetry_alone import judge_telemetry


def diagnose_trace(
    trace: Trace,
    *,
    metrics: EngineMetrics | None = None,
    settings: EngineSettings | None = None,
    thresholds: Thresholds | None = None,
    charts: bool = False,
) -> Report:
    """The `diagnose` report of a read trace: sections principal, verdict, axes, ledger and
    findings; its config names the settings, thresholds and metrics it was judged with. With
    `charts`, the console's pictures of the trace judged: KV usage from the step log (else KV
    demand from request timing, against the KV capacity when known) and the arrivals."""
    t = thresholds or make_thresholds()
    s = settings or EngineSettings()
    judge_input = judge_telemetry if is_telemetry_only(trace) else judge_trace
    if metrics is not None and judge_input is judge_trace:
        from yaotu_trace.ingest.load import dated_by_trace  # pandas only with metrics

        metrics = dated_by_trace(trace, metrics)
    judged = judge_input(trace, metrics=metrics, settings=s, thresholds=t)
    result, used = judged.diagnosis, judged.metrics
    config: dict[str, Any] = {
        "settings": s,
        "thresholds": dict(t.values),
        "thresholds_overridden": t.overridden(),
        "metrics": None if used is None else {"path": used.path, "series": sorted(used.names)},
    }
    sections: dict[str, Any] = {
        "principal": result.verdict.principal_axis,
        "verdict": result.verdict,
        "axes": [axis_report(result.axes[name], result.findings) for name in AXES],
        "ledger": list(result.ledger),
        "findings": list(result.findings),
    }
    # A capture's own cached tokens against the replay, as `trace analyze` shows them, with
    # the capacity reason tested at the pool --kv-capacity or --metrics names.
    observed = observed_vs_replayed(judged.trace, settings=s, metrics=used)
    if observed is not None:
        sections["observed_vs_replayed"] = observed
    pictures = None
    if charts:
        # NOTE: imported here: the pictures' modules (and the step log's) load for --charts.
        from yaotu_trace.commands.shared.charts import terminal_charts
        from yaotu_trace.profile.figures import kv_series

        pictures = terminal_charts(judged.trace, lengths=False,
                                   kv=kv_series(judged.trace, s.kv_capacity_tokens)[0])
    return Report(
        command="diagnose",
        input=_input_of(judged.trace),
        charts=pictures,
        config=config,
        sections=sections,
    )


def deferred_diagnosis(trace: Trace, setup: DiagnosisSetup,
                       metrics: EngineMetrics | None) -> Callable[[], Report]:
    """The diagnosis of `trace` under options checked already (`setup`) and its telemetry
    read, run when called: `check` and `report` diagnose only when they need to."""
    def build() -> Report:
        return diagnose_trace(trace, metrics=metrics, settings=setup.settings,
                              thresholds=setup.thresholds)

    return build


def _input_of(trace: Trace) -> InputSummary:
    """The report's `input`: the trace read, or the telemetry judged without one (format
    "telemetry only", no request, no column)."""
    summary = input_summary(trace)
    return replace(summary, columns=()) if is_telemetry_only(trace) else summary
