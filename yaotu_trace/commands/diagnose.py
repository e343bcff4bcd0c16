"""`trace diagnose`: a verdict on the four axes, the principal bottleneck and a remedy ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.commands.settings import diagnosis_settings

if TYPE_CHECKING:
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import Thresholds
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.report import Report
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.ingest.metrics import EngineMetrics


def diagnose(
    trace: TraceSource,
    *,
    metrics: str | Path | None = None,
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
) -> Report:
    """`trace diagnose`: the axes, the verdict, the ledger and the findings of a trace.

    `metrics` is an engine Prometheus export; `kv_capacity` the KV pool of one instance as
    `trace diagnose --kv-capacity` takes it (20000, 3.2Mtok, 40GiB); `threshold` overrides
    as `NAME=VALUE` (docs/rules.md). Every option is checked before the trace is read.
    """
    from yaotu_trace.ingest.metrics import read_metrics

    settings, thresholds = diagnosis_settings(
        model=model, kv_capacity=kv_capacity, block_size=block_size_tokens, preset=preset,
        threshold=threshold, kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, gpu=gpu,
        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, link_gbps=link_gbps,
        replay_jobs=jobs, replay_dask=dask,
    )
    tell(progress, "reading the telemetry and the trace", 0.0)
    engine_metrics = read_metrics(Path(metrics)) if metrics is not None else None
    loaded = open_trace(trace, lazy_content=True)
    tell(progress, "judging the axes", 0.3)
    return diagnose_trace(loaded, metrics=engine_metrics, settings=settings,
                          thresholds=thresholds)


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
) -> Callable[[], Report]:
    """Check the diagnosis options of `check` and `report` now; diagnose only when called."""
    from yaotu_trace.ingest.metrics import read_metrics

    settings, thresholds = diagnosis_settings(model=model, kv_capacity=kv_capacity,
                                              block_size=block_size_tokens, preset=preset,
                                              threshold=threshold, kv_dtype=kv_dtype)
    engine_metrics = read_metrics(Path(metrics)) if metrics is not None else None

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
) -> Report:
    """The `diagnose` report of a read trace: sections principal, verdict, axes, ledger and
    findings; its config names the settings, thresholds and metrics it was judged with."""
    from yaotu_trace.axes import AXES
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import make_thresholds
    from yaotu_trace.data.report import Report, input_summary
    from yaotu_trace.diagnosis.diagnose import axis_report
    from yaotu_trace.diagnosis.diagnose import diagnose_trace as judge

    t = thresholds or make_thresholds()
    s = settings or EngineSettings()
    judged = judge(trace, metrics=metrics, settings=s, thresholds=t)
    result, used = judged.diagnosis, judged.metrics
    config: dict[str, Any] = {
        "settings": s,
        "thresholds": dict(t.values),
        "thresholds_overridden": t.overridden(),
        "metrics": None if used is None else {"path": used.path, "series": sorted(used.names)},
    }
    return Report(
        command="diagnose",
        input=input_summary(judged.trace),
        config=config,
        sections={
            "principal": result.verdict.principal_axis,
            "verdict": result.verdict,
            "axes": [axis_report(result.axes[name], result.findings) for name in AXES],
            "ledger": list(result.ledger),
            "findings": list(result.findings),
        },
    )
