"""`trace diagnose`: a verdict on the four axes, the principal bottleneck and a remedy ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.commands.settings import diagnosis_settings
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import Thresholds
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.report import InputSummary, Report
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.ingest.metrics import EngineMetrics


def diagnose(
    trace: TraceSource | None,
    *,
    metrics: str | Path | None = None,
    steps: str | Path | None = None,
    log_tz: str | None = None,
    model: str | None = None,
    kv_bytes_per_token: int | None = None,
    kv_dtype: str | None = None,
    kv_capacity: str | None = None,
    block_size_tokens: int | None = None,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    gpu: str | None = None,
    link_gbps: float | None = None,
    preset: str | None = None,
    threshold: Sequence[str] = (),
    jobs: int = 1,
    dask: str | None = None,
    progress: Progress | None = None,
    charts: bool = False,
) -> Report:
    """`trace diagnose`: the axes, the verdict, the ledger and the findings of a trace.

    `metrics` is an engine Prometheus export or server log, `log_tz` the zone of a server
    log's times (`--log-tz`: Asia/Shanghai, +08:00; UTC when None); `kv_capacity` the KV pool
    of one instance as `trace diagnose --kv-capacity` takes it (20000, 3.2Mtok, 40GiB);
    `threshold` overrides as `NAME=VALUE` (docs/rules.md). Every option is checked before the
    trace is read. Without a trace (`trace=None`), the telemetry alone is judged: `metrics`,
    `steps` (a step log) or both. `charts` adds the console's pictures (`Report.charts`: KV
    over time, arrivals); the sections, and so the JSON, are the same either way.
    """
    from yaotu_trace.ingest.metrics import read_metrics

    zone = log_zone_of(log_tz)
    if trace is None and metrics is None and steps is None:
        raise ConfigError("trace diagnose needs a TRACE to judge, or engine telemetry alone: "
                          "--metrics FILE (a server log or Prometheus export) or --steps FILE")
    if trace is not None and steps is not None:
        raise ConfigError("--steps is read with the trace: pass it in the trace's input "
                          "(TraceInput.steps), not both")

    settings, thresholds = diagnosis_settings(
        model=model, kv_capacity=kv_capacity, block_size=block_size_tokens, preset=preset,
        threshold=threshold, kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, gpu=gpu,
        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, link_gbps=link_gbps,
        replay_jobs=jobs, replay_dask=dask,
    )
    tell(progress, "reading the telemetry and the trace", 0.0)
    engine_metrics = read_metrics(Path(metrics), zone=zone) if metrics is not None else None
    if trace is None:
        loaded = _telemetry_input(engine_metrics, steps)
    else:
        loaded = open_trace(trace, lazy_content=True)
    tell(progress, "judging the axes", 0.3)
    return diagnose_trace(loaded, metrics=engine_metrics, settings=settings,
                          thresholds=thresholds, charts=charts)


def log_zone_of(log_tz: str | None) -> tzinfo | None:
    """The zone `--log-tz` names (None: UTC), refused before anything is read."""
    from yaotu_trace.ingest.serverlog import log_zone

    return None if log_tz is None else log_zone(log_tz)


def _telemetry_input(metrics: EngineMetrics | None, steps: str | Path | None) -> Trace:
    """The stand-in for a trace when only telemetry is given: no request, the step log
    attached, the telemetry's notes first."""
    from yaotu_trace.ingest.load import read_steps
    from yaotu_trace.ingest.telemetry_only import telemetry_trace

    step_log = None if steps is None else read_steps(Path(steps), "--steps")
    paths = [p for p in (None if metrics is None else metrics.path,
                         None if step_log is None else step_log.path) if p is not None]
    judged = " and ".join(paths)
    notes = (f"telemetry only: {judged} judged without a request trace; the axes decide what "
             "the engine's own counters and gauges show, and each panel's `missing` names the "
             "request-trace columns that would decide or sharpen it",
             *(() if metrics is None else metrics.notes))
    if len(paths) == 2:
        notes += ("the step log and the metrics are judged as given: without a trace, their "
                  "clocks are not matched with each other (give both of one run)",)
    return telemetry_trace(judged, steps=step_log, notes=notes)


def diagnosis_of(
    trace: Trace,
    *,
    metrics: str | Path | None = None,
    model: str | None = None,
    kv_capacity: str | None = None,
    block_size_tokens: int | None = None,
    preset: str | None = None,
    threshold: Sequence[str] = (),
    kv_dtype: str | None = None,
    log_tz: str | None = None,
) -> Callable[[], Report]:
    """Check the diagnosis options of `check` and `report` now; diagnose only when called."""
    from yaotu_trace.ingest.metrics import read_metrics

    zone = log_zone_of(log_tz)
    settings, thresholds = diagnosis_settings(model=model, kv_capacity=kv_capacity,
                                              block_size=block_size_tokens, preset=preset,
                                              threshold=threshold, kv_dtype=kv_dtype)
    engine_metrics = (read_metrics(Path(metrics), zone=zone) if metrics is not None
                      else None)

    def build() -> Report:
        return diagnose_trace(trace, metrics=engine_metrics, settings=settings,
                              thresholds=thresholds)

    return build


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
    from yaotu_trace.axes import AXES
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import make_thresholds
    from yaotu_trace.data.report import Report
    from yaotu_trace.diagnosis.diagnose import axis_report
    from yaotu_trace.diagnosis.diagnose import diagnose_trace as judge
    from yaotu_trace.diagnosis.telemetry_alone import judge_telemetry
    from yaotu_trace.ingest.telemetry_only import is_telemetry_only

    t = thresholds or make_thresholds()
    s = settings or EngineSettings()
    judge_input = judge_telemetry if is_telemetry_only(trace) else judge
    judged = judge_input(trace, metrics=metrics, settings=s, thresholds=t)
    result, used = judged.diagnosis, judged.metrics
    config: dict[str, Any] = {
        "settings": s,
        "thresholds": dict(t.values),
        "thresholds_overridden": t.overridden(),
        "metrics": None if used is None else {"path": used.path, "series": sorted(used.names)},
    }
    pictures = None
    if charts:
        from yaotu_trace.commands.analyze import terminal_charts

        pictures = terminal_charts(judged.trace, lengths=False, kv=True,
                                   kv_capacity_tokens=s.kv_capacity_tokens)
    return Report(
        command="diagnose",
        input=_input_of(judged.trace),
        charts=pictures,
        config=config,
        sections={
            "principal": result.verdict.principal_axis,
            "verdict": result.verdict,
            "axes": [axis_report(result.axes[name], result.findings) for name in AXES],
            "ledger": list(result.ledger),
            "findings": list(result.findings),
        } | _observed(judged.trace),
    )


def _observed(trace: Trace) -> dict[str, Any]:
    """A capture's own cached tokens against the replay over time, as `trace analyze` shows
    them (docs/replay.md); nothing for other traces."""
    from yaotu_trace.commands.analyze import observed_vs_replayed
    from yaotu_trace.ingest.telemetry_only import is_telemetry_only

    found = None if is_telemetry_only(trace) else observed_vs_replayed(trace, {})
    return {} if found is None else {"observed_vs_replayed": found}


def _input_of(trace: Trace) -> InputSummary:
    """The report's `input`: the trace read, or the telemetry judged without one (format
    "telemetry only", no request, no column)."""
    from dataclasses import replace

    from yaotu_trace.data.report import input_summary
    from yaotu_trace.ingest.telemetry_only import is_telemetry_only

    summary = input_summary(trace)
    return replace(summary, columns=()) if is_telemetry_only(trace) else summary
