"""Failed requests: how many, when and with which error (rule Q009), and where they cluster:
under load (rule Q007) or on one instance (rule Q008).

Definitions (a request fails when its `status` is other than ok, `data/outcome.py`):

- failed_share = failed / requests (ratio).
- backlog at a request's arrival t = #{other requests j : arrival_j ≤ t < leave_j}, where a
  request leaves the queue when scheduled (`scheduled_s`; one never scheduled, when it
  finished), or without `scheduled_s` the server when it finishes (`finish_s`):
  `backlog_counts` says which. A request with no leaving time (rejected at the door) holds no
  place. Loaded arrivals are those whose backlog is above the median backlog
  over all arrivals (so at most half of them).
- failures_under_load_share = failed requests among loaded arrivals / failed (ratio);
  failure_lift_under_load = failure rate among loaded arrivals / overall failure rate.
  A timeout or rejection storm while the queue is long puts most failures there.
- When: each failure's time is its `finish_s` (when it ended), else its arrival, counted from
  the trace's first arrival; failure_tenths = how many tenths of the trace's span (first
  arrival to its last time) hold a failure: 10 is spread over the run, 1 a single episode.
- Which: the commonest `error` text (else status) of the failed requests and its count.
- Per instance (`instance`, else `decode_instance`): the worst instance is the one with the
  most failures (ties by name); worst_instance_failure_share = its failures / failed, and
  worst_instance_failure_lift = its failure rate / its peers' (the other instances together;
  half a failure when they have none) (ratio).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from yaotu_trace.axes.base import (
    AxisInput,
    AxisResult,
    RuleHit,
    Severity,
    Source,
    ratio,
    status_from,
)
from yaotu_trace.data.order_stats import median_of
from yaotu_trace.data.outcome import successful_mask


@dataclass(frozen=True, slots=True, kw_only=True)
class FailuresUnderLoad:
    """Failures among the arrivals that met a long backlog."""

    backlog_counts: str
    backlog_median: float
    loaded_arrivals: int
    failures_under_load: int
    failures_under_load_share: float
    failure_lift_under_load: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceFailures:
    """The instance with the most failures, against the whole trace."""

    instances: int
    worst_instance: str
    worst_instance_requests: int
    worst_instance_failed: int
    worst_instance_failure_share: float
    worst_instance_failure_lift: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureTimes:
    """When the failures happened, from the trace's first arrival (s), and which error."""

    first_failure_s: float
    last_failure_s: float
    span_s: float
    failure_tenths: int
    commonest_error: str
    commonest_error_requests: int
    statuses: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureMetrics:
    """Failed requests, when, which error, and where they cluster (None where the inputs do
    not say: no `scheduled_s` or `finish_s`, no instance column)."""

    requests: int
    failed: int
    failed_share: float
    under_load: FailuresUnderLoad | None
    by_instance: InstanceFailures | None
    times: FailureTimes | None = None


def measure_failures(inp: AxisInput, window_s: float) -> FailureMetrics | None:
    """The failure measurements, or None when the table has no status or no failure;
    `window_s` is the look-back of the arrival backlog when no request says when it left."""
    if not inp.has("status"):
        return None
    req = inp.requests
    failed = ~successful_mask(req)
    n, n_failed = len(req), int(failed.sum())
    if not n_failed:
        return None
    return FailureMetrics(requests=n, failed=n_failed, failed_share=n_failed / n,
                          under_load=_under_load(inp, failed, window_s),
                          by_instance=_worst_instance(inp, failed),
                          times=_failure_times(inp, failed))


def _failure_times(inp: AxisInput, failed: np.ndarray) -> FailureTimes | None:
    """When the failures happened and their commonest error (None without arrival times)."""
    req = inp.requests
    if not inp.trace.has_arrivals:
        return None
    arrival = req["arrival_s"].to_numpy(dtype=np.float64)
    at = arrival.copy()
    ends = [arrival, *(req[name].to_numpy(dtype=np.float64, na_value=np.nan)
                       for name in ("scheduled_s", "first_token_s", "finish_s")
                       if inp.has(name))]
    if inp.has("finish_s"):
        finish = ends[-1]
        at = np.where(np.isfinite(finish), finish, arrival)
    t0 = float(np.nanmin(arrival))
    span = float(np.nanmax(np.concatenate(ends))) - t0
    when = at[failed] - t0
    tenths = (np.zeros(0, dtype=np.int64) if span <= 0
              else np.clip(np.floor(10 * when / span), 0, 9).astype(np.int64))
    status = req["status"].astype("string").fillna("ok")[failed]
    texts = status
    if inp.has("error"):
        texts = req["error"].astype("string")[failed].fillna(status)
    counts = texts.value_counts(sort=True)
    # ties by text, for a deterministic name
    top = sorted(counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))[0]
    return FailureTimes(
        first_failure_s=float(when.min()), last_failure_s=float(when.max()), span_s=span,
        failure_tenths=int(np.unique(tenths).size) if span > 0 else 1,
        commonest_error=str(top[0]), commonest_error_requests=int(top[1]),
        statuses={str(k): int(v) for k, v in sorted(status.value_counts().items())})


def backlog_at_arrival(arrival_s: np.ndarray, leave_s: np.ndarray) -> np.ndarray:
    """Per request, the other requests present at its arrival: arrived at or before it and
    not yet left (a NaN or early `leave_s` counts as leaving on arrival)."""
    leave = np.where(np.isfinite(leave_s) & (leave_s >= arrival_s), leave_s, arrival_s)
    arrived = np.searchsorted(np.sort(arrival_s), arrival_s, side="right")
    left = np.searchsorted(np.sort(leave), arrival_s, side="right")
    itself = (leave > arrival_s).astype(np.int64)  # present at its own arrival
    return arrived - left - itself


def recent_arrivals(arrival_s: np.ndarray, window_s: float) -> np.ndarray:
    """Per request, the other requests that arrived in the `window_s` up to its arrival."""
    ordered = np.sort(arrival_s)
    upto = np.searchsorted(ordered, arrival_s, side="right")
    since = np.searchsorted(ordered, arrival_s - window_s, side="right")
    return upto - since - 1


def _leave_s(inp: AxisInput) -> tuple[str, np.ndarray] | None:
    """When each request left the queue (scheduled, else finished: a request that timed out
    waiting was never scheduled), or the server (finished) without `scheduled_s`."""
    req = inp.requests

    def times(column: str) -> np.ndarray:
        return req[column].to_numpy(dtype=np.float64, na_value=np.nan)

    if inp.has("scheduled_s"):
        leave = times("scheduled_s")
        if inp.has("finish_s"):
            leave = np.where(np.isfinite(leave), leave, times("finish_s"))
        return "queued (scheduled_s)", leave
    if inp.has("finish_s"):
        return "in flight (finish_s)", times("finish_s")
    return None


def _under_load(inp: AxisInput, failed: np.ndarray, window_s: float) -> FailuresUnderLoad | None:
    if not inp.trace.has_arrivals:
        return None
    arrival = inp.requests["arrival_s"].to_numpy(dtype=np.float64)
    found = _leave_s(inp)
    if found is None:
        counts = f"arrived in the {window_s:g} s before (no scheduled_s or finish_s)"
        backlog = recent_arrivals(arrival, window_s)
    else:
        counts, leave = found
        backlog = backlog_at_arrival(arrival, leave)
    backlog_median = median_of(backlog)
    loaded = backlog > backlog_median
    under = int((failed & loaded).sum())
    n_failed, n_loaded = int(failed.sum()), int(loaded.sum())
    return FailuresUnderLoad(
        backlog_counts=counts,
        backlog_median=backlog_median,
        loaded_arrivals=n_loaded,
        failures_under_load=under,
        failures_under_load_share=under / n_failed,
        failure_lift_under_load=ratio(ratio(under, n_loaded), n_failed / failed.size),
    )


def _worst_instance(inp: AxisInput, failed: np.ndarray) -> InstanceFailures | None:
    import pandas as pd

    column = next((c for c in ("instance", "decode_instance") if inp.has(c)), None)
    if column is None:
        return None
    frame = pd.DataFrame({"name": inp.requests[column].astype("string"),
                          "failed": failed}).dropna()
    per = frame.groupby("name", sort=True)["failed"].agg(["size", "sum"])
    if per.empty:
        return None
    worst = per.sort_values("sum", ascending=False, kind="stable").iloc[0]
    n_failed, size, hits = int(failed.sum()), int(worst["size"]), int(worst["sum"])
    return InstanceFailures(
        instances=len(per),
        worst_instance=str(worst.name),
        worst_instance_requests=size,
        worst_instance_failed=hits,
        worst_instance_failure_share=hits / n_failed,
        worst_instance_failure_lift=_lift_over_peers(hits, size, n_failed, failed.size),
    )


def _lift_over_peers(hits: int, size: int, n_failed: int, n: int) -> float | None:
    """The worst instance's failure rate over its peers' (the other instances together), with
    half a failure on the peers when they have none, so that it stays finite. Against the
    peers, not the whole trace: an instance that takes most of the traffic is most of the
    trace, and could never fail twice as often as itself."""
    if n <= size:
        return None
    return ratio(hits / size, max(n_failed - hits, 0.5) / (n - size))


def with_failure_hits(undecided: AxisResult, hits: Sequence[RuleHit],
                      failures: FailureMetrics | None,
                      severity_of: Mapping[str, Severity]) -> AxisResult:
    """An axis its other inputs cannot decide, with the failure rules that fired on it: their
    status, scored by the failed share (the work lost); unchanged when none fired."""
    if not hits or failures is None:
        return undecided
    return replace(undecided, status=status_from(hits, severity_of), hits=tuple(hits),
                   score=failures.failed_share, score_basis="share of requests that failed",
                   sources=(Source.REQUESTS,))
