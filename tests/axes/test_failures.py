"""Failed requests in the diagnosis: clustered under load (Q007) or on one instance (Q008), and
never counted as fast requests by the queueing axis."""

from __future__ import annotations

import numpy as np
import pytest
from diag_factories import evidence, make_input, thresholds

from yaotu_trace.axes.base import Status
from yaotu_trace.axes.failures import backlog_at_arrival, measure_failures, recent_arrivals
from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.diagnosis.diagnose import run_diagnosis


def test_backlog_at_arrival_hand_checked() -> None:
    # A: 0 → 3, B: 1 → 2, C: 2.5 → 4, D: 3 rejected (no leaving time, holds no place).
    arrival = np.array([0.0, 1.0, 2.5, 3.0])
    leave = np.array([3.0, 2.0, 4.0, np.nan])
    # At 0: nobody else; at 1: A; at 2.5: A (B left at 2); at 3: C (A leaves at 3).
    assert backlog_at_arrival(arrival, leave).tolist() == [0, 1, 1, 1]


def test_recent_arrivals_hand_checked() -> None:
    # Others in (t − 5, t]: at 0 none; at 1: 0; at 5: 1 (0 is exactly 5 s back, out);
    # at 5.5: 1 and 5; at 6: 5 and 5.5 (1 is exactly 5 s back).
    arrival = np.array([0.0, 1.0, 5.0, 5.5, 6.0])
    assert recent_arrivals(arrival, 5.0).tolist() == [0, 1, 1, 2, 2]


def _burst_with_timeouts() -> dict[str, list[object]]:
    """80 requests at 1/s, each scheduled on arrival; then 20 within 1 s (t = 80 + 0.05 k),
    served one a second in turn, of which the last 10 time out after 10 s in the queue.

    Backlog (queued) at burst request k's arrival: the burst requests j < k not yet scheduled
    at 80 + 0.05 k, i.e. j = 1 … k − 1, so k − 1 for k ≥ 1 (a timed-out request stays queued
    until it times out). Median backlog over the 100 arrivals: 0 (80 steady ones), so the
    loaded arrivals are burst k = 2 … 19 (18 requests). All 10 failures are among them:
    failures_under_load_share = 1.0; failed_share = 10 / 100; lift = (10 / 18) / 0.1.
    """
    steady = [float(i) for i in range(80)]
    burst = [80 + 0.05 * k for k in range(20)]
    scheduled = steady + [80.0 + k if k < 10 else np.nan for k in range(20)]
    finish = [a + 0.5 for a in steady] + [80.0 + k + 0.5 if k < 10 else burst[k] + 10.0
                                          for k in range(20)]
    return {
        "arrival_s": steady + burst,
        "scheduled_s": scheduled,
        "first_token_s": [s + 0.2 if np.isfinite(s) else np.nan for s in scheduled],
        "finish_s": finish,
        "prompt_len": [100] * 100,
        "output_len": [10] * 90 + [0] * 10,
        "status": ["ok"] * 90 + ["timeout"] * 10,
    }


def test_ten_percent_failures_in_a_burst_fire_q007() -> None:
    inp = make_input(_burst_with_timeouts())
    fm = measure_failures(inp, 5.0)
    assert fm is not None and fm.under_load is not None
    assert (fm.failed, fm.failed_share) == (10, pytest.approx(0.1))
    load = fm.under_load
    assert load.backlog_median == 0.0 and load.loaded_arrivals == 18
    assert load.failures_under_load == 10 and load.failures_under_load_share == 1.0
    assert load.failure_lift_under_load == pytest.approx((10 / 18) / 0.1)
    result = analyze_queueing(inp, thresholds())
    assert "Q007" in result.rule_ids
    ev = evidence(result, "Q007")
    assert ev["failures_under_load_share"].passed and ev["failed_share"].passed
    assert ev["failures_under_load_share"].threshold == 0.8
    diagnosis = run_diagnosis(inp)
    assert any(f.id == "Q007" and f.axis == "queueing" for f in diagnosis.findings)
    # Capacity for the burst is the remedy, and the ten failed requests are what it saves.
    entry = next(e for e in diagnosis.ledger if e.remedy == "capacity_admission")
    assert "Q007" in entry.triggered_by
    saved = {q.name: q.value for q in entry.saves}
    assert saved["failed_requests_under_load"] == 10.0


def test_the_same_failures_spread_over_quiet_times_do_not_fire_q007() -> None:
    # The 10 timeouts moved to steady requests 0, 8, …, 72 (backlog 0, not loaded) and the
    # burst all served: none of the failures arrived under load.
    columns = _burst_with_timeouts()
    columns["status"] = ["timeout" if i < 80 and i % 8 == 0 else "ok" for i in range(100)]
    columns["scheduled_s"] = [float(i) for i in range(80)] + [80.0 + k for k in range(20)]
    inp = make_input(columns)
    fm = measure_failures(inp, 5.0)
    assert fm is not None and fm.under_load is not None
    assert fm.failed == 10 and fm.under_load.failures_under_load == 0
    assert "Q007" not in analyze_queueing(inp, thresholds()).rule_ids


def test_a_burst_of_failures_without_request_timing_fires_q007() -> None:
    """Arrivals, lengths and status only (a BurstGPT file): the backlog is the arrivals of the
    5 s before. Steady requests see at most 4; burst request k sees steady 76–79 and burst
    0 … k − 1, 4 + k. Median 4, so the loaded arrivals are burst k = 1 … 19: all 10 failures."""
    columns = {k: v for k, v in _burst_with_timeouts().items()
               if k in ("arrival_s", "prompt_len", "output_len", "status")}
    inp = make_input(columns)
    fm = measure_failures(inp, 5.0)
    assert fm is not None and fm.under_load is not None
    assert fm.under_load.backlog_median == 4.0 and fm.under_load.loaded_arrivals == 19
    assert fm.under_load.failures_under_load_share == 1.0
    assert "arrived in the 5 s before" in fm.under_load.backlog_counts
    result = analyze_queueing(inp, thresholds())
    # Q009 says the failures themselves (share, when, which error) whatever their cause.
    assert result.rule_ids == ("Q007", "Q009") and result.status is Status.WARNING
    # No queue time to score it by: the axis is scored by the share of requests lost.
    assert result.score == pytest.approx(0.1)
    assert result.score_basis == "share of requests that failed"


def _two_instances(failing: list[int]) -> dict[str, list[object]]:
    """60 requests 1 s apart, alternating i0/i1, each served in 0.5 s; `failing` errored."""
    return {
        "arrival_s": [float(k) for k in range(60)],
        "scheduled_s": [float(k) for k in range(60)],
        "first_token_s": [k + 0.1 for k in range(60)],
        "finish_s": [k + 0.5 for k in range(60)],
        "prompt_len": [100] * 60,
        "output_len": [10] * 60,
        "instance": [f"i{k % 2}" for k in range(60)],
        "status": ["error" if k in failing else "ok" for k in range(60)],
        "error": ["CUDA error: an illegal memory access" if k in failing else None
                  for k in range(60)],
    }


def test_failures_on_one_instance_fire_q008() -> None:
    # 6 errors, all on i1 (odd requests): share 6/6 = 1.0, i1 fails 6/30 = 0.2 against its
    # peer's 0/30, taken as half a failure (0.5/30): a lift of 12.
    result = analyze_queueing(make_input(_two_instances([1, 11, 21, 31, 41, 51])), thresholds())
    assert result.rule_ids == ("Q008", "Q009")
    assert result.status is Status.WARNING
    ev = evidence(result, "Q008")
    assert ev["worst_instance"].value == "i1"
    assert ev["worst_instance_failure_share"].value == 1.0
    assert ev["worst_instance_failure_lift"].value == pytest.approx(12.0)


def test_q008_fires_when_the_sick_instance_takes_most_of_the_traffic() -> None:
    # i0 takes 40 of 60 requests and fails 8 of them; i1 fails 1 of its 20. Against the whole
    # trace i0 fails (8/40) / (9/60) = 1.33 ×, under the lift of 2; against its peer
    # (8/40) / (1/20) = 4 ×: the sick instance.
    cols = _two_instances([])
    cols["instance"] = ["i0" if k % 3 else "i1" for k in range(60)]
    on_i0 = [k for k in range(60) if k % 3][:8]
    on_i1 = [k for k in range(60) if not k % 3][:1]
    cols["status"] = ["error" if k in on_i0 + on_i1 else "ok" for k in range(60)]
    ev = evidence(analyze_queueing(make_input(cols), thresholds()), "Q008")
    assert ev["worst_instance"].value == "i0"
    assert ev["worst_instance_failure_lift"].value == pytest.approx(4.0)


def test_failures_spread_over_instances_do_not_fire_q008() -> None:
    # 3 on i0, 3 on i1: i0 (first by name among equals) holds half, lift 1.0.
    result = analyze_queueing(make_input(_two_instances([0, 10, 20, 1, 11, 21])), thresholds())
    assert "Q008" not in result.rule_ids


def test_failure_rules_fire_when_no_queue_time_decides_the_axis() -> None:
    # Only arrivals, lengths, instance and status (BurstGPT-like): the queueing axis cannot
    # be decided, but the failures' placement can.
    columns = {k: v for k, v in _two_instances([1, 11, 21, 31, 41, 51]).items()
               if k in ("arrival_s", "prompt_len", "output_len", "instance", "status")}
    result = analyze_queueing(make_input(columns), thresholds())
    assert result.rule_ids == ("Q008", "Q009")
    assert result.status is Status.WARNING
    assert result.missing  # still says what would decide the queueing itself
    no_failures = {**columns, "status": ["ok"] * 60}
    assert analyze_queueing(make_input(no_failures),
                            thresholds()).status is Status.INSUFFICIENT_DATA


def test_fast_failures_do_not_make_the_queue_look_shorter() -> None:
    """Eight requests that waited 4 s, with and without two requests rejected at once
    (scheduled and failed on arrival): the queue time and TTFT the axis reports are equal."""
    slow = {
        "arrival_s": [float(k) for k in range(8)],
        "scheduled_s": [k + 4.0 for k in range(8)],
        "first_token_s": [k + 4.5 for k in range(8)],
        "finish_s": [k + 6.0 for k in range(8)],
        "prompt_len": [100] * 8,
        "output_len": [10] * 8,
    }
    failing = {key: [*values] for key, values in slow.items()}
    for key, extra in (("arrival_s", [8.0, 9.0]), ("scheduled_s", [8.0, 9.0]),
                       ("first_token_s", [8.001, 9.001]), ("finish_s", [8.002, 9.002]),
                       ("prompt_len", [100, 100]), ("output_len", [0, 0])):
        failing[key] = [*failing[key], *extra]
    failing["status"] = ["ok"] * 8 + ["rejected", "rejected"]
    clean = analyze_queueing(make_input(slow), thresholds()).metrics
    with_failures = analyze_queueing(make_input(failing), thresholds()).metrics
    assert clean.queue_time_s.p50 == 4.0
    assert with_failures.queue_time_s == clean.queue_time_s
    assert with_failures.ttft_s == clean.ttft_s
    assert with_failures.queue_share_of_ttft == pytest.approx(clean.queue_share_of_ttft)
    assert with_failures.queue_share_of_latency == pytest.approx(clean.queue_share_of_latency)


def _spread_errors() -> dict[str, list[object]]:
    """100 requests 1 s apart on two instances, each served in 0.5 s with no queue; every
    tenth (0, 10, …, 90) fails mid-stream with one of two errors (7 × A, 3 × B), finishing at
    arrival + 0.5: spread over the run, not under load, half on each instance."""
    failing = set(range(0, 100, 10))
    return {
        "arrival_s": [float(k) for k in range(100)],
        "scheduled_s": [float(k) for k in range(100)],
        "first_token_s": [k + 0.1 for k in range(100)],
        "finish_s": [k + 0.5 for k in range(100)],
        "prompt_len": [100] * 100,
        "output_len": [10] * 100,
        "instance": [f"i{(k // 10) % 2}" if k in failing else f"i{k % 2}" for k in range(100)],
        "status": ["error" if k in failing else "ok" for k in range(100)],
        "error": [("A: stream reset" if k < 70 else "B: timeout") if k in failing else None
                  for k in range(100)],
    }


def test_failures_tied_to_nothing_still_fire_q009() -> None:
    # GIVEN 10 % of requests failing, spread over the run and both instances
    inp = make_input(_spread_errors())
    result = analyze_queueing(inp, thresholds())
    # THEN neither Q007 (no backlog) nor Q008 (5 and 5) places them, but Q009 reports them:
    # the axis is a warning scored by the share of requests that failed
    assert result.rule_ids == ("Q009",)
    assert result.status is Status.WARNING and result.cause == "request_failures"
    assert result.score == pytest.approx(0.1)
    assert result.score_basis == "share of requests that failed"
    ev = evidence(result, "Q009")
    assert ev["failed_share"].value == pytest.approx(0.1)
    # When: failures end at 0.5, 10.5, …, 90.5 s over the 0–99.5 s span, one in each tenth
    assert ev["first_failure_s"].value == 0.5 and ev["last_failure_s"].value == 90.5
    assert ev["failure_tenths"].value == 10
    # Which error: the commonest text and its count
    assert ev["commonest_error"].value == "A: stream reset"
    assert ev["commonest_error_requests"].value == 7
    note = next(n for n in result.notes if n.startswith("10 of 100 requests failed"))
    assert "spread over the run" in note and "(7): A: stream reset" in note
    assert any("successful requests only (90 of 100)" in n for n in result.notes)


def test_one_failure_episode_names_its_tenth() -> None:
    columns = _spread_errors()
    # the ten failures moved to requests 40–49: one tenth of the run (40.5–49.5 s)
    columns["status"] = ["error" if 40 <= k < 50 else "ok" for k in range(100)]
    columns["error"] = ["A: stream reset" if 40 <= k < 50 else None for k in range(100)]
    ev = evidence(analyze_queueing(make_input(columns), thresholds()), "Q009")
    assert ev["failure_tenths"].value == 1
    assert (ev["first_failure_s"].value, ev["last_failure_s"].value) == (40.5, 49.5)


def test_few_or_rare_failures_do_not_fire_q009() -> None:
    columns = _spread_errors()
    four = {0, 10, 20, 30}  # under failure_min_requests (5)
    columns["status"] = ["error" if k in four else "ok" for k in range(100)]
    assert "Q009" not in analyze_queueing(make_input(columns), thresholds()).rule_ids


def test_the_verdict_says_how_many_requests_succeeded() -> None:
    diagnosis = run_diagnosis(make_input(_spread_errors()), thresholds())
    assert diagnosis.verdict.outcome == (
        "successful requests only (90 of 100): 10 failed (10.0 %; error 10); timing figures "
        "cover the successful ones")
    clean = {**_spread_errors(), "status": ["ok"] * 100}
    assert run_diagnosis(make_input(clean), thresholds()).verdict.outcome is None
