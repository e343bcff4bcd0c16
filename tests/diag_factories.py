"""Builders for the small hand-checked inputs of the axis and diagnosis tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any, TypeVar

import pandas as pd

from yaotu_trace.axes.base import AxisInput, AxisName, AxisResult, Cause, EngineSettings, Status
from yaotu_trace.axes.kv_memory import KvMetrics
from yaotu_trace.axes.pd_interference import InterferenceMetrics
from yaotu_trace.axes.prefix_reuse import PrefixMetrics
from yaotu_trace.axes.queueing import QueueingMetrics
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.data.steplog import StepLog

M = TypeVar("M")
# Each axis' metrics type.
METRICS_OF: dict[AxisName, type] = {
    AxisName.QUEUEING: QueueingMetrics, AxisName.KV_MEMORY: KvMetrics,
    AxisName.PREFIX_REUSE: PrefixMetrics, AxisName.PD_INTERFERENCE: InterferenceMetrics,
}


def make_trace(columns: dict[str, Sequence[Any]], *, steps: dict[str, Sequence[Any]] | None = None,
               source_block_size: int | None = None) -> Trace:
    """A validated `Trace` from canonical columns (and an optional step log)."""
    trace = normalize(RawTrace(requests=pd.DataFrame(columns), format_name="canonical",
                               source_block_size=source_block_size), "test")
    if steps is not None:
        from dataclasses import replace

        trace = replace(trace, steps=StepLog.from_frame(pd.DataFrame(steps), "steps"))
    return trace


def make_input(columns: dict[str, Sequence[Any]], *, steps: dict[str, Sequence[Any]] | None = None,
               metrics: EngineMetrics | None = None, **settings: Any) -> AxisInput:
    """The analyzers' input for a trace built from columns."""
    return AxisInput.of(make_trace(columns, steps=steps), metrics, EngineSettings(**settings))


def make_metrics(rows: list[tuple[float, str, str, float]]) -> EngineMetrics:
    """Engine metrics from (time_s, metric, labels, value) rows."""
    return EngineMetrics(frame=pd.DataFrame(rows, columns=["time_s", "metric", "labels", "value"]),
                         path="metrics.json")


def blank_metrics(kind: type[M], **values: Any) -> M:
    """An axis' metrics (`QueueingMetrics`, ...) with `values` and every other field None: the
    typed value the verdict and the ledger read, for hand-built axis results."""
    return kind(**{f.name: values.get(f.name) for f in fields(kind)})  # type: ignore[arg-type]


def axis_result(name: AxisName, status: Status, score: float | None = 0.0,
                cause: str | None = None, **values: Any) -> AxisResult:
    """A hand-built axis result whose metrics (blank but for `values`) are its axis' own type."""
    return AxisResult(axis=name, status=status, cause=Cause(cause) if cause else None,
                      score=score, score_basis="s", sources=(),
                      metrics=blank_metrics(METRICS_OF[name], **values))


def thresholds(**overrides: float) -> Thresholds:
    """Default thresholds with overrides."""
    return make_thresholds(overrides)


def evidence(result: Any, rule_id: str) -> dict[str, Any]:
    """The evidence of one fired rule, by name."""
    hit = next(h for h in result.hits if h.rule_id == rule_id)
    return {e.name: e for e in hit.evidence}


def burst_columns() -> dict[str, list[float]]:
    """20 requests at 1/s served in 1 s each, then 20 arriving within 1 s and served in turn."""
    arrival = [float(i) for i in range(20)] + [20 + 0.05 * i for i in range(20)]
    scheduled = [float(i) for i in range(20)] + [20.0 + i for i in range(20)]
    return {
        "arrival_s": arrival,
        "scheduled_s": scheduled,
        "first_token_s": [s + 0.5 for s in scheduled],
        "finish_s": [s + 1.0 for s in scheduled],
        "prompt_len": [100] * 40,
        "output_len": [10] * 40,
    }
