"""`trace diff`: two runs of a change, judged on one request chain under the same conditions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.diagnose import log_zone_of
from yaotu_trace.commands.load import Progress, TraceInput, open_trace, tell
from yaotu_trace.commands.settings import diagnosis_settings
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.engine_metrics import EngineMetrics
    from yaotu_trace.data.report import Report
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.diff.result import RunDiff

# The seed of the bootstrap: the same two runs give the same report.
SEED = 0


def diff(
    before: TraceSource,
    after: TraceSource,
    *,
    steps_before: str | Path | None = None,
    steps_after: str | Path | None = None,
    metrics_before: str | Path | None = None,
    metrics_after: str | Path | None = None,
    log_tz: str | None = None,
    model: str | None = None,
    gpu: str | None = None,
    kv_capacity: str | None = None,
    kv_bytes_per_token: int | None = None,
    kv_dtype: str | None = None,
    block_size_tokens: int | None = None,
    preset: str | None = None,
    threshold: Sequence[str] = (),
    matched_only: bool = False,
    out: Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace diff BEFORE AFTER`: the conditions, the per-axis changes and the ledger.

    `steps_*` and `metrics_*` are each run's step log and engine telemetry; `model`, `gpu`,
    `kv_capacity` and the rest describe both runs, as `trace diagnose` takes them. `out` writes
    the matched requests side by side (.parquet or .csv). Every option is checked before a
    trace is read.
    """
    from yaotu_trace.diff.run import diff_traces

    if out is not None:
        from yaotu_trace.commands.replay import check_out

        check_out(out)
    zone = log_zone_of(log_tz)
    settings, thresholds = diagnosis_settings(
        model=model, kv_capacity=kv_capacity, block_size=block_size_tokens, preset=preset,
        threshold=threshold, kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, gpu=gpu)
    tell(progress, "reading the before run", 0.0)
    trace_b = _read(before, steps_before, "BEFORE")
    telemetry_b = _metrics(metrics_before, zone, trace_b)
    tell(progress, "reading the after run", 0.2)
    trace_a = _read(after, steps_after, "AFTER")
    telemetry_a = _metrics(metrics_after, zone, trace_a)
    tell(progress, "matching the requests and judging the axes", 0.4)
    result = diff_traces(trace_b, trace_a, before_metrics=telemetry_b,
                         after_metrics=telemetry_a, settings=settings, thresholds=thresholds,
                         matched_only=matched_only, seed=SEED)
    if out is not None:
        from yaotu_trace.commands.replay import write_requests
        from yaotu_trace.diff.table import matched_table

        write_requests(out, matched_table(trace_b, trace_a, result.matched))
    config: dict[str, Any] = {
        "settings": settings,
        "thresholds": dict(thresholds.values),
        "thresholds_overridden": thresholds.overridden(),
        "matched_only": matched_only,
        "noise": {"basis": result.noise_basis, "seed": SEED},
        "metrics": {"before": None if telemetry_b is None else telemetry_b.path,
                    "after": None if telemetry_a is None else telemetry_a.path},
    }
    return diff_report(result, trace_b, trace_a, config)


def diff_report(result: RunDiff, before: Trace, after: Trace,
                config: dict[str, Any] | None = None) -> Report:
    """The `diff` report of a run diff (docs/json.md, "trace diff")."""
    from yaotu_trace.data.report import InputPair, Report, input_summary
    from yaotu_trace.diff.result import MatchSummary

    return Report(
        command="diff",
        input=InputPair(before=input_summary(before), after=input_summary(after)),
        config=config or {},
        sections={
            "comparable": result.comparable,
            "conditions": list(result.conditions),
            "fairness": list(result.fairness),
            "matched": MatchSummary.of(result.matched, result.judged_on),
            "axes": list(result.axes),
            "ledger": result.ledger,
        },
    )


def _read(source: TraceSource, steps: str | Path | None, side: str) -> Trace:
    """One run's trace with its step log (`--steps-before`/`--steps-after`)."""
    if steps is not None:
        if not isinstance(source, TraceInput | str | Path):
            raise ConfigError(f"--steps-{side.lower()} is read with the {side} trace: give the "
                              "trace as a file, or attach the step log to the Trace")
        given = source if isinstance(source, TraceInput) else TraceInput(path=Path(source))
        source = TraceInput(path=given.path, input_format=given.input_format,
                            column_map=given.column_map,
                            source_block_size=given.source_block_size, steps=Path(steps))
    return open_trace(source, lazy_content=False)


def _metrics(path: str | Path | None, zone: Any, trace: Trace) -> EngineMetrics | None:
    """One run's metrics, a year-less server log dated by its trace."""
    if path is None:
        return None
    from yaotu_trace.ingest.load import dated_by_trace, read_metrics

    return dated_by_trace(trace, read_metrics(Path(path), zone=zone))
