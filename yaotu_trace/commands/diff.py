"""`trace diff`: two runs of a change, judged on one request chain under the same conditions."""

from __future__ import annotations

from pathlib import Path

from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.settings import setup_diagnosis
from yaotu_trace.commands.shared.change import change_report
from yaotu_trace.commands.shared.outputs import check_out, write_requests
from yaotu_trace.data.report import Report
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.diff.table import matched_table


def diff(
    before: TraceSource,
    after: TraceSource,
    options: DiagnosisOptions | None = None,
    *,
    metrics_before: str | Path | None = None,
    matched_only: bool = False,
    out: Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace diff BEFORE AFTER`: the conditions, the per-axis changes and the ledger.

    `options` describe both runs, as `trace diagnose` takes them; `options.metrics` is the
    AFTER run's engine telemetry and `metrics_before` the BEFORE run's (each run's step log
    comes with its trace, `TraceInput.steps`). `matched_only` judges every condition and axis
    on the requests both runs served only. `out` writes the matched requests side by side
    (.parquet or .csv). Every option is checked before a trace is read.
    """
    options = options or DiagnosisOptions()
    if out is not None:
        check_out(out)
    setup = setup_diagnosis(options)
    tell(progress, "reading the before run", 0.0)
    trace_b = open_trace(before, lazy_content=False)
    telemetry_b = setup.telemetry(metrics_before)
    tell(progress, "reading the after run", 0.2)
    trace_a = open_trace(after, lazy_content=False)
    telemetry_a = setup.telemetry(options.metrics)
    tell(progress, "matching the requests and judging the axes", 0.4)
    report, result = change_report(trace_b, trace_a, setup, metrics=(telemetry_b, telemetry_a),
                                   matched_only=matched_only)
    if out is not None:
        write_requests(out, matched_table(trace_b, trace_a, result.matched))
    return report
