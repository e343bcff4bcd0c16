"""Whether a step log (`--steps`) and a metrics export (`--metrics`) belong to the trace.

Clocks (docs/diagnose.md, "Step logs and metrics from the same run"):

- a step log's `start_s`/`end_s` are on the trace's clock (`arrival_s`), as the engine and
  `trace simulate` write them: they are compared as they are;
- a metrics export's timestamps are Unix seconds. They are compared with `arrival_s` as they
  are when the trace's clock is Unix time too; when exactly one of the two reads below
  `UNIX_CLOCK_S` (a clock that starts near zero, as most published traces do), the two
  cannot be placed on one clock: the export is taken as the trace's run, with a note. So is
  an export of one instant (an instant query), which has no time range.

The trace covers [first arrival, last of any timing column]; a step log [first start_s, last
end_s]; an export [first sample, last sample]. Their overlap share is the time both ranges
cover over the shorter of the two (for a range that is one instant: 1 if the other range holds
it, else 0). Below `MIN_OVERLAP_SHARE` the input is refused: it is from another run. Above it,
the steps and samples outside the trace's range are left out, and when some requests lie
wholly outside the telemetry's range (arrival to last timing column), the axes that read that
telemetry are judged on the other requests only, with a note giving the part of the trace's
time range the telemetry covers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data.clock import UNIX_CLOCK_S
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.order_stats import median_of
from yaotu_trace.data.run_id import (
    check_same_run,
    check_same_run_metrics,
    check_steps_and_metrics,
)
from yaotu_trace.data.schema import Trace, list_arrays
from yaotu_trace.data.step_work import check_step_work
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.errors import TraceReadError

if TYPE_CHECKING:
    import pandas as pd

# Telemetry that shares less than this part of the trace's time range is from another run.
MIN_OVERLAP_SHARE = 0.10
# Unknown step-log instances named in a note before the rest are only counted.
NAMED_INSTANCES = 3
# The axes that read a step log, and every axis (a metrics export may feed each).
STEP_AXES = ("queueing", "kv_memory", "pd_interference")
AXES_NAMES = ("queueing", "kv_memory", "prefix_reuse", "pd_interference")

_TIME_COLUMNS = ("arrival_s", "scheduled_s", "first_token_s", "finish_s")
_MODEL_LABEL = re.compile(r"(?:^|,)model_name=([^,]*)")


@dataclass(frozen=True, slots=True)
class Span:
    """A closed time range in seconds."""

    lo: float
    hi: float

    @property
    def length_s(self) -> float:
        return self.hi - self.lo

    def text(self) -> str:
        return f"{self.lo:.1f}–{self.hi:.1f} s"

    def covers(self, other: Span) -> bool:
        return self.lo <= other.lo and other.hi <= self.hi

    def overlap_s(self, other: Span) -> float:
        return max(0.0, min(self.hi, other.hi) - max(self.lo, other.lo))

    def share_of(self, trace: Span) -> float:
        """The part of `trace` this range covers (for a one-instant trace: 1 or 0)."""
        if trace.length_s <= 0:
            return 1.0 if self.lo <= trace.lo <= self.hi else 0.0
        return self.overlap_s(trace) / trace.length_s


def overlap_share(a: Span, b: Span) -> float:
    """The time both ranges cover over the shorter one (an instant: 1 if the other holds it)."""
    short, long_ = (a, b) if a.length_s <= b.length_s else (b, a)
    if short.length_s <= 0:
        return long_.share_of(short)
    return min(1.0, short.overlap_s(long_) / short.length_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fitted:
    """The trace with its telemetry restricted to the trace's time range and the notes that
    says so; `overlap` is the trace judged on the telemetry's range only (its requests
    outside it left out) for the axes in `overlap_axes`, or None when none lies outside."""

    trace: Trace
    metrics: EngineMetrics | None
    overlap: Trace | None = None
    overlap_axes: frozenset[str] = frozenset()
    # The notes that say which axes are judged on the overlap, for those axes' panels too.
    overlap_notes: tuple[str, ...] = ()


def request_bounds(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each request's first and last time (arrival to the last timing column it has, its last
    token time included: a table with token times and no finish_s still ran until then)."""
    lo = requests["arrival_s"].to_numpy(dtype=np.float64)
    hi = lo.copy()
    for name in _TIME_COLUMNS[1:]:
        if name in requests.columns:
            values = requests[name].to_numpy(dtype=np.float64, na_value=np.nan)
            hi = np.fmax(hi, values)
    if "token_times_s" in requests.columns:
        offsets, times = list_arrays(requests["token_times_s"])
        times = np.asarray(times, dtype=np.float64)
        has = np.diff(offsets) > 0
        last = np.full(lo.size, np.nan)
        last[has] = times[offsets[1:][has] - 1]
        hi = np.fmax(hi, last)
    return lo, hi


def trace_span(trace: Trace) -> Span:
    """From the first arrival to the last time any request has."""
    lo, hi = request_bounds(trace.requests)
    return Span(float(np.nanmin(lo)), float(np.nanmax(hi)))


def metrics_span(metrics: EngineMetrics) -> Span:
    times = metrics.frame["time_s"].to_numpy(dtype=np.float64)
    return Span(float(times.min()), float(times.max()))


def _scrape_interval_s(metrics: EngineMetrics) -> float:
    """The median gap between the export's distinct timestamps (0 for one timestamp)."""
    times = np.unique(metrics.frame["time_s"].to_numpy(dtype=np.float64))
    return median_of(np.diff(times)) if times.size > 1 else 0.0


def _refuse(what: str, path: str, span: Span, trace: Trace, whole: Span, share: float,
            fix: str) -> None:
    shared = "" if share == 0 else (f" (they share {100 * share:.1f} % of the shorter range, "
                                    f"under the {100 * MIN_OVERLAP_SHARE:.0f} % needed)")
    raise TraceReadError(
        f"{path}: {what} covers {span.text()} but {trace.path} covers {whole.text()}{shared}; "
        f"they are from different runs ({fix})"
    )


def _outside(trace: Trace, span: Span) -> np.ndarray:
    """Requests whose whole time (arrival to last timing column) lies outside `span`."""
    lo, hi = request_bounds(trace.requests)
    return (hi < span.lo) | (lo > span.hi)


def _instance_note(trace: Trace, steps: StepLog) -> str | None:
    if "instance" not in trace.requests.columns:
        return None
    named = set(trace.requests["instance"].dropna().astype(str))
    if not named:
        return None
    for column in ("prefill_instance", "decode_instance"):  # disaggregated pools
        if column in trace.requests.columns:
            named |= set(trace.requests[column].dropna().astype(str))
    unknown = sorted(steps.instances() - named - {"all"})
    if not unknown:
        return None
    shown = ", ".join(repr(n) for n in unknown[:NAMED_INSTANCES])
    more = len(unknown) - NAMED_INSTANCES
    if more > 0:
        shown += f" and {more} more"
    return (f"the step log {steps.path} names instance(s) {shown} that the trace's 'instance' "
            "column never names; check the step log is of this deployment")


def metrics_models(metrics: EngineMetrics) -> frozenset[str]:
    """The `model_name` labels of the export's series."""
    labels = metrics.frame["labels"].astype(str).unique()
    return frozenset(m.group(1) for text in labels if (m := _MODEL_LABEL.search(text)))


def _model_note(trace: Trace, metrics: EngineMetrics) -> str | None:
    if "model" not in trace.requests.columns:
        return None
    named = set(trace.requests["model"].dropna().astype(str))
    other = sorted(metrics_models(metrics) - named)
    if not named or not other:
        return None
    return (f"the metrics export {metrics.path} is labelled model_name "
            f"{', '.join(repr(m) for m in other)}, which the trace's 'model' column "
            f"({', '.join(repr(m) for m in sorted(named)[:NAMED_INSTANCES])}) never names; "
            "its series may be of another deployment")


def _kept(trace: Trace, keep: np.ndarray) -> Trace:
    """The trace with only the `keep` requests; columns left on disk are read for them (file
    row i is request i), since a filtered table no longer lines up with the file."""
    import pandas as pd
    import pyarrow.parquet as pq

    requests = trace.requests[keep]
    if trace.lazy is not None:
        rows = np.flatnonzero(keep)
        table = pq.read_table(trace.lazy.path, columns=list(trace.lazy.columns)).take(rows)
        requests = requests.assign(**{
            name: pd.Series(table.column(name).to_pandas(types_mapper=pd.ArrowDtype).array,
                            index=requests.index)
            for name in trace.lazy.columns})
    return replace(trace, table=requests.reset_index(drop=True), lazy=None)


@dataclass(slots=True)
class _Fit:
    """What fitting the telemetry collects: notes, requests kept, axes judged on them."""

    keep: np.ndarray
    notes: list[str]
    axes: set[str]
    judged: list[str]

    def judge(self, trace: Trace, span: Span, path: str, label: str, axes: set[str],
              which: str) -> None:
        """Leave out the requests wholly outside `span` (of the `label` at `path`) from
        `axes`, with a note; refuse when no request is left."""
        outside = _outside(trace, span)
        if not outside.any():
            return
        if outside.all():
            raise TraceReadError(
                f"{path}: {label} covers {span.text()} but no request of {trace.path} lies in "
                f"it; they are from different runs (pass the {label} of this trace's run)")
        whole = trace_span(trace)
        self.keep &= ~outside
        self.axes |= axes
        self.judged.append(
            f"the {label} covers {100 * span.share_of(whole):.0f} % of the trace's time range "
            f"({whole.text()}); "
            f"{which} judged on {max(span.lo, whole.lo):.1f}–{min(span.hi, whole.hi):.1f} s "
            f"only ({int(outside.sum())} of {outside.size} requests outside it left out)")
        self.notes.append(self.judged[-1])


def _fit_steps(trace: Trace, steps: StepLog, fit: _Fit) -> StepLog:
    """The step log within the trace's range; refused when from another run."""
    whole = trace_span(trace)
    found = steps.span()
    if found is None:
        raise TraceReadError(f"{steps.path}: the step log has no steps; pass a step log with "
                             "at least one row (start_s, end_s)")
    span = Span(*found)
    share = overlap_share(span, whole)
    if share < MIN_OVERLAP_SHARE:
        _refuse("step log", steps.path, span, trace, whole, share,
                "pass the step log of this trace's run")
    timed = "finish_s" in trace.requests.columns and bool(
        trace.requests["finish_s"].notna().any())
    if not timed:  # the whole log: steps after the last arrival still decode its requests
        check_step_work(trace, steps)
    if not whole.covers(span):
        steps = steps.within(whole.lo, whole.hi)
        fit.notes.append(f"the step log {steps.path} covers {span.text()}, beyond the trace's "
                         f"{whole.text()}: only its {steps.num_rows} step(s) within the "
                         "trace's range are used")
    if timed:  # every request's work lies within the trace's range, up to its last finish
        check_step_work(trace, steps)
    # Last, as what the time and work checks cannot tell: two runs of `trace simulate`.
    check_same_run(trace.path, steps.path)
    fit.judge(trace, span, steps.path, "step log", set(STEP_AXES),
              "the queueing, kv_memory and pd_interference axes are")
    instances = _instance_note(trace, steps)
    if instances is not None:
        fit.notes.append(instances)
    return steps


def _fit_metrics(trace: Trace, metrics: EngineMetrics, fit: _Fit) -> EngineMetrics:
    """The export's samples within the trace's range (one scrape interval either side);
    refused when from another run, noted when its clock cannot be matched."""
    whole = trace_span(trace)
    # First, as what the clocks cannot tell (and an instant or Unix-time export skips them):
    # two runs of `trace simulate`.
    check_same_run_metrics(trace.path, metrics.path, metrics.run_ids)
    span = metrics_span(metrics)
    fit.notes.extend(metrics.notes)
    if span.length_s <= 0:
        fit.notes.append(f"the metrics export {metrics.path} is one instant ({span.lo:.1f} s): "
                         "it has no time range to match with the trace's, and its counters "
                         "are totals since the engine started; export a range query covering "
                         f"{whole.text()} to judge this trace only")
        return metrics
    if (span.lo >= UNIX_CLOCK_S) != (whole.lo >= UNIX_CLOCK_S):
        kind = "Unix" if span.lo >= UNIX_CLOCK_S else "relative"
        fit.notes.append(f"the metrics export {metrics.path} is on {kind} time ({span.text()}) "
                         f"and the trace's clock is not ({whole.text()}), so they cannot be "
                         "matched in time; the export is taken as this trace's run")
        return metrics
    share = overlap_share(span, whole)
    if share < MIN_OVERLAP_SHARE:
        _refuse("metrics export", metrics.path, span, trace, whole, share,
                "export the metrics of this trace's time range")
    gap = _scrape_interval_s(metrics)
    times = metrics.frame["time_s"].to_numpy(dtype=np.float64)
    inside = (times >= whole.lo - gap) & (times <= whole.hi + gap)
    if not inside.any():
        raise TraceReadError(f"{metrics.path}: metrics export covers {span.text()} but none of "
                             f"its samples lies within {trace.path}'s {whole.text()}; they are "
                             "from different runs (export the metrics of this trace's time "
                             "range)")
    if not inside.all():
        metrics = replace(metrics, frame=metrics.frame[inside].reset_index(drop=True))
        fit.notes.append(f"the metrics export {metrics.path} covers {span.text()}, beyond the "
                         f"trace's {whole.text()}: only its samples within the trace's range "
                         f"(and one scrape interval, {gap:.1f} s, either side) are used")
    fit.judge(trace, span, metrics.path, "metrics export", set(AXES_NAMES),
              "the axes that read it are")
    model = _model_note(trace, metrics)
    if model is not None:
        fit.notes.append(model)
    return metrics


def fit_telemetry(trace: Trace, metrics: EngineMetrics | None = None) -> Fitted:
    """Refuse a step log or metrics export from another run, and restrict one that only
    partly overlaps the trace (see the module docstring). A server log whose times lack a year
    is dated by the trace before (`ingest.load.dated_by_trace`)."""
    fit = _Fit(keep=np.ones(trace.num_requests, dtype=bool), notes=[], axes=set(), judged=[])
    if trace.steps is not None and metrics is not None:
        check_steps_and_metrics(trace.steps.path, metrics.path, metrics.run_ids)
    steps = None if trace.steps is None else _fit_steps(trace, trace.steps, fit)
    if metrics is not None:
        metrics = _fit_metrics(trace, metrics, fit)
    # Nothing to fit: the trace itself, and with it what its passes keep (`Trace.derived`:
    # the chain builds `trace check`'s analysis and diagnosis both read).
    fitted = (trace if steps is trace.steps and not fit.notes
              else replace(trace, steps=steps, notes=trace.notes + tuple(fit.notes)))
    overlap = None if fit.keep.all() else _kept(fitted, fit.keep)
    return Fitted(trace=fitted, metrics=metrics, overlap=overlap,
                  overlap_axes=frozenset(fit.axes), overlap_notes=tuple(fit.judged))
