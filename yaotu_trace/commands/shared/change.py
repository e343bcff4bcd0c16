"""The diff of two read runs of a change: what `trace diff` shows, and what `trace check
--before` and `trace report --before` judge under the same options."""

from __future__ import annotations

from typing import Any

from yaotu_trace.commands.settings import DiagnosisSetup
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.report import InputPair, Report, input_summary
from yaotu_trace.data.run_diff import MatchSummary, RunDiff
from yaotu_trace.data.schema import Trace
from yaotu_trace.diff.run import diff_traces
from yaotu_trace.ingest.load import dated_by_trace

# The seed of the bootstrap: the same two runs give the same report.
SEED = 0


def change_report(
    before: Trace,
    after: Trace,
    setup: DiagnosisSetup,
    *,
    metrics: tuple[EngineMetrics | None, EngineMetrics | None] = (None, None),
    matched_only: bool = False,
) -> tuple[Report, RunDiff]:
    """The `diff` report of two read runs (docs/json.md, "trace diff") and the diff itself:
    both judged under `setup`, each with its telemetry (`metrics`: before, after);
    `matched_only` judges every condition and axis on the requests both runs served. A
    year-less server log is dated by its run's trace."""
    metrics = (None if metrics[0] is None else dated_by_trace(before, metrics[0]),
               None if metrics[1] is None else dated_by_trace(after, metrics[1]))
    result = diff_traces(before, after, metrics=metrics, settings=setup.settings,
                         thresholds=setup.thresholds, matched_only=matched_only, seed=SEED)
    telemetry_b, telemetry_a = metrics
    config: dict[str, Any] = {
        "settings": setup.settings,
        "thresholds": dict(setup.thresholds.values),
        "thresholds_overridden": setup.thresholds.overridden(),
        "matched_only": matched_only,
        "noise": {"basis": result.noise_basis, "seed": SEED},
        "metrics": {"before": None if telemetry_b is None else telemetry_b.path,
                    "after": None if telemetry_a is None else telemetry_a.path},
    }
    report = Report(
        command="diff",
        input=InputPair(before=input_summary(before), after=input_summary(after)),
        config=config,
        sections={
            "comparable": result.comparable,
            "conditions": list(result.conditions),
            "fairness": list(result.fairness),
            "matched": MatchSummary.of(result.matched, result.judged_on),
            "axes": list(result.axes),
            "ledger": result.ledger,
        },
    )
    return report, result
