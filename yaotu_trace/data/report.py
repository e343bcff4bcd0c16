"""Frozen report types shared by every command, and their JSON-ready form.

A report is built once by the core and handed to a renderer; it holds only builtins-convertible
values (no DataFrames, NumPy scalars or NaN), so every renderer shows the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace._version import __version__
from yaotu_trace.data.charts import TerminalCharts
from yaotu_trace.data.order_stats import BlockSum

if TYPE_CHECKING:
    from yaotu_trace.data.order_stats import Summary
    from yaotu_trace.data.schema import Trace

SCHEMA_VERSION = 1
PERCENTILES = (50, 90, 99)
# The format named in the report's `input` when no request trace was given (a diagnosis from
# telemetry alone, `ingest/telemetry_only.py`).
TELEMETRY_ONLY: Final = "telemetry only"


def to_builtins(value: Any) -> Any:
    """Convert dataclasses, enums and NumPy values to JSON-ready builtins; NaN/inf become None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_builtins(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_builtins(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_builtins(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Distribution:
    """Summary of a sample: count, mean and percentiles (numpy's linear interpolation)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    min: float | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> Distribution:
        """Summarise finite values; an empty sample gives count 0 and no statistics.

        Equal, number for number, to `from_summary` of the same sample read in batches: the
        mean is `order_stats`' block sum over the count, not `np.mean`, so a sample held in
        memory and one streamed from disk give the same report.
        """
        data = np.asarray(values, dtype=np.float64)
        data = data[np.isfinite(data)] + 0.0  # -0.0 as 0.0, as order_stats sees it
        if data.size == 0:
            return cls(count=0, mean=None, p50=None, p90=None, p99=None, max=None, min=None)
        p50, p90, p99 = np.percentile(data, PERCENTILES)
        total = BlockSum()
        total.add(data)
        return cls(
            count=int(data.size),
            mean=total.total() / data.size,
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            max=float(data.max()),
            min=float(data.min()),
        )

    @classmethod
    def from_summary(cls, summary: Summary) -> Distribution:
        """The distribution of a sample summarised by `order_stats.summarize` with (at least)
        `PERCENTILES`: for a sample streamed in batches, never held whole."""
        if summary.count == 0:
            return cls(count=0, mean=None, p50=None, p90=None, p99=None, max=None, min=None)
        p50, p90, p99 = (summary.percentiles[q] for q in PERCENTILES)
        return cls(count=summary.count, mean=summary.mean, p50=p50, p90=p90, p99=p99,
                   max=summary.max, min=summary.min)


@dataclass(frozen=True, slots=True, kw_only=True)
class InputSummary:
    """What was read: the file, its format, row counts, the columns present, data-quality notes."""

    path: str
    format: str
    rows_read: int
    requests: int
    source_block_size: int | None
    content: str | None
    columns: tuple[str, ...]
    step_rows: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class InputPair:
    """What a command comparing two runs read (`trace diff`): each run's input summary."""

    before: InputSummary
    after: InputSummary

    @property
    def path(self) -> str:
        """Both files, before first, for a title."""
        return f"{self.before.path} → {self.after.path}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """One command's result: the input summary plus named sections in display order.

    Sections are frozen dataclasses (or builtins); later commands add sections without changing
    the existing ones, so a JSON consumer's paths stay valid.
    """

    command: str
    input: InputSummary | InputPair
    config: Mapping[str, Any] = field(default_factory=dict)
    sections: Mapping[str, Any] = field(default_factory=dict)
    # Pictures for the console (`data/charts.py`, drawn by `render/text_charts.py`), filled only
    # when a command is asked for them (`charts=True`); never in `to_dict`, so the JSON, the
    # Markdown and a report's equality do not depend on them.
    charts: TerminalCharts | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON document: schema_version, tool, command, input, config, sections."""
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "yaotu-trace", "version": __version__},
            "command": self.command,
            "input": to_builtins(self.input),
            "config": to_builtins(self.config),
        }
        for name, section in self.sections.items():
            doc[name] = to_builtins(section)
        return doc


def input_summary(trace: Trace) -> InputSummary:
    """What was read, for every report."""
    return InputSummary(
        path=trace.path,
        format=trace.format_name,
        rows_read=trace.rows_read,
        requests=trace.num_requests,
        source_block_size=trace.source_block_size,
        content=trace.content_column,
        columns=trace.column_names,
        step_rows=None if trace.steps is None else trace.steps.num_rows,
        notes=trace.notes,
    )
