"""The conditions a fair comparison holds fixed, each `same`, `differs` or `unknown`.

An architectural gain is real only when the model, the hardware, the input/output lengths, the
cache warmth and the success rate stay fixed and the same request chain is served. Each check
here reads both runs and says what it saw on each side; none decides on a number it lacks.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.run_diff import Condition, ConditionStatus, MatchedRequests
from yaotu_trace.data.schema import Trace
from yaotu_trace.diff.ks import ks_test
from yaotu_trace.diff.noise import Z95

# The request chain is the same when this share of each run's requests matched, the matched
# arrivals keep their order (rank correlation) and their span within SPAN_TOL.
CHAIN_SHARE = 0.99
CHAIN_ORDER = 0.99
SPAN_TOL = 0.10
# Lengths differ when the KS test rejects at this level and the distance is at least this.
KS_ALPHA = 0.01
KS_MIN_DISTANCE = 0.05
# Success rates differ beyond this many percentage points and outside the 95 % interval.
SUCCESS_MIN_POINTS = 0.01
LENGTH_PERCENTILES = (50, 90, 99)
MODEL_LABELS = re.compile(r'\b(?:model_name|model)="?([^",}]+)')


def chain_condition(matched: MatchedRequests, matched_only: bool) -> Condition:
    """The same requests, in the same order and spacing."""
    sides = {
        "before": {"requests": matched.before_requests, "matched_share": matched.before_share},
        "after": {"requests": matched.after_requests, "matched_share": matched.after_share},
    }
    how = (f"{matched.count} requests matched by {matched.basis}; arrival rank correlation "
           f"{_num(matched.order_correlation)}, span ratio {_num(matched.span_ratio)}, "
           f"{_share(matched.gap_agreement)} of gaps agree")
    order_kept = matched.order_correlation is not None and matched.order_correlation >= CHAIN_ORDER
    span_kept = matched.span_ratio is not None and abs(matched.span_ratio - 1.0) <= SPAN_TOL
    shares_kept = min(matched.before_share, matched.after_share) >= CHAIN_SHARE
    if matched.count < 2:
        return Condition(name="request_chain", status="differs", before=sides["before"],
                         after=sides["after"],
                         detail=f"{matched.count} request(s) in both runs (by id, prompt "
                         "content or lengths): the runs share no request chain")
    if order_kept and span_kept and (shares_kept or matched_only):
        scope = " (--matched-only: the matched requests are compared)" if not shares_kept else ""
        return Condition(name="request_chain", status="same", before=sides["before"],
                         after=sides["after"], detail=how + scope)
    why = [w for w, bad in (("not every request is in both runs", not shares_kept),
                            ("the arrivals changed order", not order_kept),
                            ("the arrival spacing changed", not span_kept)) if bad]
    return Condition(name="request_chain", status="differs", before=sides["before"],
                     after=sides["after"], detail=f"{how}: {'; '.join(why)}")


def io_condition(before: Trace, after: Trace, matched: MatchedRequests,
                 matched_only: bool) -> Condition:
    """Prompt and output lengths drawn alike: KS on every request and on the matched ones."""
    b, a = before.requests, after.requests
    rows_b = np.asarray(matched.before_rows, dtype=np.int64)
    rows_a = np.asarray(matched.after_rows, dtype=np.int64)
    side_b: dict[str, object] = {}
    side_a: dict[str, object] = {}
    tests: dict[str, float | None] = {}
    differs: list[str] = []
    for column in ("prompt_len", "output_len"):
        all_b = b[column].to_numpy(dtype=np.float64)
        all_a = a[column].to_numpy(dtype=np.float64)
        side_b[column] = _percentiles(all_b)
        side_a[column] = _percentiles(all_a)
        for scope, x, y in (("all", all_b, all_a),
                            ("matched", all_b[rows_b], all_a[rows_a])):
            test = ks_test(x, y)
            tests[f"{column}_{scope}_ks"] = test.statistic
            tests[f"{column}_{scope}_p"] = test.p_value
            judged = "matched" if matched_only else "all"
            if scope == judged and test.p_value < KS_ALPHA and test.statistic >= KS_MIN_DISTANCE:
                differs.append(f"{column} D = {test.statistic:.3f} (p = {test.p_value:.2g})")
    scope_words = "the matched requests" if matched_only else "every request"
    detail = (f"two-sample Kolmogorov–Smirnov on {scope_words}: differs when p < {KS_ALPHA} "
              f"and D ≥ {KS_MIN_DISTANCE}")
    status: ConditionStatus = "differs" if differs else "same"
    if differs:
        detail += ": " + "; ".join(differs)
    return Condition(name="io_distribution", status=status, before=side_b, after=side_a,
                     detail=detail, statistics=tests)


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {f"p{q}": None for q in LENGTH_PERCENTILES}
    return {f"p{q}": float(v) for q, v in
            zip(LENGTH_PERCENTILES, np.percentile(finite, LENGTH_PERCENTILES), strict=True)}


def model_condition(before: Trace, after: Trace, before_metrics: EngineMetrics | None,
                    after_metrics: EngineMetrics | None, given: str | None) -> Condition:
    """The model served: the traces' `model` column, else the metrics' labels, else --model."""
    seen_b = _models(before, before_metrics)
    seen_a = _models(after, after_metrics)
    return _label_condition("model", seen_b, seen_a, given, "--model",
                            "the trace's model column or the metrics' model_name label")


def hardware_condition(given: str | None) -> Condition:
    """The GPU: no trace format records it, so only --gpu (for both runs) says."""
    return _label_condition("hardware", (), (), given, "--gpu", "no trace records its GPU")


def _label_condition(name: str, seen_b: tuple[str, ...], seen_a: tuple[str, ...],
                     given: str | None, option: str, where: str) -> Condition:
    before = list(seen_b) or None
    after = list(seen_a) or None
    if seen_b and seen_a:
        status: ConditionStatus = "same" if seen_b == seen_a else "differs"
        return Condition(name=name, status=status, before=before, after=after,
                         detail=f"from {where} of each run")
    if given is not None:
        return Condition(name=name, status="same", before=before or given,
                         after=after or given,
                         detail=f"{option} {given} is taken for both runs (not read from them)")
    if seen_b or seen_a:
        return Condition(name=name, status="unknown", before=before, after=after,
                         detail=f"only one run says ({where}); give {option} to state it")
    return Condition(name=name, status="unknown", before=None, after=None,
                     detail=f"neither run says ({where}); give {option} to state it")


def _models(trace: Trace, metrics: EngineMetrics | None) -> tuple[str, ...]:
    if "model" in trace.requests.columns and trace.requests["model"].notna().any():
        return tuple(sorted(set(trace.requests["model"].dropna().astype(str))))
    if metrics is not None:
        labels = metrics.frame["labels"].dropna().astype(str).unique()
        found = {m.group(1) for text in labels for m in MODEL_LABELS.finditer(text)}
        return tuple(sorted(found))
    return ()


def success_condition(before: Trace, after: Trace, matched: MatchedRequests,
                      matched_only: bool) -> Condition:
    """Completed / total per run; a faster run that fails more requests is not faster."""
    done_b, done_a = completed_mask(before.requests), completed_mask(after.requests)
    if matched_only:
        done_b = done_b[np.asarray(matched.before_rows, dtype=np.int64)]
        done_a = done_a[np.asarray(matched.after_rows, dtype=np.int64)]
    n_b, n_a = done_b.size, done_a.size
    if n_b == 0 or n_a == 0:
        return Condition(name="success_rate", status="unknown", before=None, after=None,
                         detail="a run has no request to count")
    rate_b, rate_a = float(done_b.mean()), float(done_a.mean())
    pooled = (done_b.sum() + done_a.sum()) / (n_b + n_a)
    half = Z95 * math.sqrt(pooled * (1 - pooled) * (1 / n_b + 1 / n_a))
    gap = abs(rate_a - rate_b)
    differs = gap > SUCCESS_MIN_POINTS and gap > half
    side = {"completed": int(done_b.sum()), "total": n_b, "rate": rate_b}
    other = {"completed": int(done_a.sum()), "total": n_a, "rate": rate_a}
    detail = (f"completed = status ok (or unset) with a finish time where the run records "
              f"them; differs beyond {_pct(SUCCESS_MIN_POINTS, 0)} and the 95 % two-proportion "
              f"interval (± {_pct(half)}): {_pct(rate_b)} before, {_pct(rate_a)} after")
    return Condition(name="success_rate", status="differs" if differs else "same", before=side,
                     after=other, detail=detail)


def completed_mask(table: pd.DataFrame) -> np.ndarray:
    """Per request, True when it succeeded (`data.outcome`) and, in a run that records finish
    times, has one: a request the engine never finished is not a completed request."""
    done = successful_mask(table)
    if "finish_s" in table.columns and table["finish_s"].notna().any():
        done &= table["finish_s"].notna().to_numpy(dtype=bool)
    return done


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "–" if value is None else _pct(value, 1)


def _pct(ratio: float, digits: int = 2) -> str:
    return f"{100 * ratio:.{digits}f} %"
