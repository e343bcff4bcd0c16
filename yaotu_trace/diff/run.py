"""`diff_traces`: two runs of a change, judged on the same request chain, under the same
conditions. Pure and deterministic: tables in, a `RunDiff` out (the bootstrap uses `seed`).

Order of the work: match the requests; check the conditions (a comparison is fair only when
none differs); diagnose each run on the judged requests (the matched ones, or every request
when every request matched and the comparison is fair, or when none did); compare each axis'
key measures against run-to-run noise; price the change in the ledger.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from yaotu_trace.axes import AXES
from yaotu_trace.axes.base import AxisName, EngineSettings
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.run_diff import AxisChange, Condition, MatchedRequests, RunDiff
from yaotu_trace.data.schema import Trace
from yaotu_trace.diagnosis.diagnose import Diagnosis, judge_trace
from yaotu_trace.diff.axis_change import axis_change
from yaotu_trace.diff.conditions import (
    chain_condition,
    completed_mask,
    hardware_condition,
    io_condition,
    model_condition,
    success_condition,
)
from yaotu_trace.diff.ledger import RunWork, change_ledger
from yaotu_trace.diff.match import match_requests
from yaotu_trace.diff.measures import MEASURES, available, request_columns
from yaotu_trace.diff.noise import NOISE_BASIS, Resamples, measure_change
from yaotu_trace.diff.warmth import warmth_condition
from yaotu_trace.errors import ConfigError

# What would make the comparison fair, per condition that differs.
FAIRNESS = {
    "request_chain": "replay the same request chain on both sides (the same trace, the same "
    "arrival times), or compare on the matched requests only with --matched-only",
    "io_distribution": "serve the same prompts and cap outputs alike (the same max_tokens, "
    "ignore_eos for benchmarks), or compare on the matched requests with --matched-only",
    "model": "run the same model (and quantization) on both sides",
    "hardware": "run both sides on the same GPU type and count",
    "cache_warmth": "start both runs with a cold prefix cache (restart or reset the cache), or "
    "warm both alike and leave the warm-up out of both traces",
    "success_rate": "fix the failures first (or give both runs the same timeouts and limits): "
    "latency of the requests a run dropped is not measured",
}

UNRELATED = ("the runs share no request: serve the same trace (the same prompts at the same "
             "arrival times) on both sides")


def diff_traces(
    before: Trace,
    after: Trace,
    *,
    metrics: tuple[EngineMetrics | None, EngineMetrics | None] = (None, None),
    settings: EngineSettings | None = None,
    thresholds: Thresholds | None = None,
    matched_only: bool = False,
    seed: int = 0,
) -> RunDiff:
    """Whether the two runs compare fairly, what changed per axis, and the work saved/added;
    `metrics` is each run's engine telemetry (before, after), None where not given."""
    before_metrics, after_metrics = metrics
    s = settings or EngineSettings()
    t = thresholds or make_thresholds()
    matched = match_requests(before, after)
    conditions = (
        chain_condition(matched, matched_only),
        io_condition(before, after, matched, matched_only),
        model_condition(before, after, before_metrics, after_metrics, s.model),
        hardware_condition(s.gpu),
        warmth_condition(before, after, s),
        success_condition(before, after, matched, matched_only),
    )
    comparable = not any(c.status == "differs" for c in conditions)
    # Every request when all matched and the comparison is fair; when none matched, each run
    # is judged on its own requests (the request chain already says the runs are unrelated).
    everything = matched.count == 0 or (comparable and not matched_only
                                        and matched.before_share == matched.after_share == 1.0)
    rows_b, rows_a = _judged_rows(before, after, matched, everything)
    diagnosis_b = _diagnose(before, rows_b, before_metrics, s, t)
    diagnosis_a = _diagnose(after, rows_a, after_metrics, s, t)
    stall_factor = float(t.values["stall_factor"])
    columns_b = request_columns(before, stall_factor)
    columns_a = request_columns(after, stall_factor)
    axes = _axis_changes(before, after, diagnosis_b, diagnosis_a, columns_b, columns_a,
                         rows_b, rows_a, seed)
    ledger = change_ledger(_work(before, columns_b, rows_b, diagnosis_b),
                           _work(after, columns_a, rows_a, diagnosis_a), s)
    return RunDiff(comparable=comparable, conditions=conditions, axes=axes, ledger=ledger,
                   matched=matched, fairness=fairness_of(conditions, matched),
                   judged_on="all requests" if everything else "matched requests",
                   noise_basis=NOISE_BASIS)


def fairness_of(conditions: tuple[Condition, ...], matched: MatchedRequests
                ) -> tuple[str, ...]:
    """What would make the comparison fair: one step per condition that differs (with no
    request in common, no subset of them can be compared)."""
    steps = FAIRNESS
    if matched.count < 2:
        steps = {**FAIRNESS, "request_chain": UNRELATED,
                 "io_distribution": FAIRNESS["io_distribution"].split(", or ")[0]}
    return tuple(f"{c.name}: {steps[c.name]}" for c in conditions if c.status == "differs")


def _judged_rows(before: Trace, after: Trace, matched: MatchedRequests,
                 everything: bool) -> tuple[np.ndarray, np.ndarray]:
    if everything:
        return np.arange(len(before.requests)), np.arange(len(after.requests))
    return (np.asarray(matched.before_rows, dtype=np.int64),
            np.asarray(matched.after_rows, dtype=np.int64))


def subset(trace: Trace, rows: np.ndarray) -> Trace:
    """The trace with only `rows` (positions in arrival order), its step log kept."""
    if rows.size == len(trace.requests) and np.array_equal(rows, np.arange(rows.size)):
        return trace
    if trace.lazy is not None:
        raise ConfigError(f"{trace.path}: the matched requests are judged apart, which needs "
                          "the prompt content in memory; read the trace without lazy_content")
    kept = np.sort(rows)
    return replace(trace, table=trace.requests.iloc[kept].reset_index(drop=True))


def _diagnose(trace: Trace, rows: np.ndarray, metrics: EngineMetrics | None,
              settings: EngineSettings, thresholds: Thresholds) -> Diagnosis:
    judged = subset(trace, rows)
    return judge_trace(judged, metrics=metrics, settings=settings,
                          thresholds=thresholds).diagnosis


def _axis_changes(before: Trace, after: Trace, diagnosis_b: Diagnosis, diagnosis_a: Diagnosis,
                  columns_b: dict[str, np.ndarray], columns_a: dict[str, np.ndarray],
                  rows_b: np.ndarray, rows_a: np.ndarray, seed: int) -> tuple[AxisChange, ...]:
    rng = np.random.default_rng(seed)
    resample_b, resample_a = Resamples.of(rows_b, rng), Resamples.of(rows_a, rng)
    out = []
    for name in AXES:
        measures = tuple(measure_change(m, columns_b, columns_a, resample_b, resample_a)
                         for m in MEASURES if m.axis is name and available(m, before, after))
        out.append(axis_change(name, diagnosis_b.axes[name], diagnosis_a.axes[name], measures))
    return tuple(out)


def _work(trace: Trace, columns: dict[str, np.ndarray], rows: np.ndarray,
          diagnosis: Diagnosis) -> RunWork:
    """What the ledger measures on one run: its judged rows, diagnosis, steps, failures, pool
    and the prompt tokens it moved between instances (P/D)."""
    kv = diagnosis.axes[AxisName.KV_MEMORY].metrics
    req = trace.requests
    transfer = None
    if "prefill_instance" in req.columns and "decode_instance" in req.columns:
        judged = req.iloc[np.sort(rows)]
        moved = (judged["prefill_instance"].notna() & judged["decode_instance"].notna()
                 & (judged["prefill_instance"] != judged["decode_instance"]))
        transfer = float(judged["prompt_len"][moved.to_numpy(dtype=bool)].sum())
    return RunWork(columns=columns, rows=rows, diagnosis=diagnosis,
                   steps=None if trace.steps is None else trace.steps.num_rows,
                   failed=int((~completed_mask(req)).sum()),
                   pool_tokens=getattr(kv, "kv_capacity_tokens", None),
                   transfer_tokens=transfer)
