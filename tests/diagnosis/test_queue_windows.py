"""The windows where the queue grows (`axes.queueing.windows`), checked by hand: one finder
for the step log, the metrics export and the request table, and the causes judged there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from diag_factories import make_input, thresholds

from yaotu_trace.axes.base import Source
from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.axes.queueing.windows import growth_windows
from yaotu_trace.commands.simulate import write_metrics_csv
from yaotu_trace.ingest.load import read_metrics


def test_growth_needs_a_rise_of_three_requests_and_a_tenth_of_the_arrivals():
    waiting = np.array([0, 5, 12, 12, 4, 0, 4])
    arrivals = np.array([5, 10, 2, 1, 0, 100])
    growing, queued = growth_windows(waiting, arrivals, min_requests=3, min_share=0.1)
    # rises 5, 7, 0, −8, −4, 4: the first two grow; the last rises 4 while 100 arrive (< 10)
    assert growing.tolist() == [True, True, False, False, False, False]
    # a queue that stands (12 → 12) or drains (12 → 4) with requests waiting at both edges
    # is queued; 4 → 0 is not, nor 0 → 4 without growth
    assert queued.tolist() == [True, True, True, True, False, False]


def tiny_burst() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Ten requests arrive 0.00–0.45 s and are served one at a time for 0.3 s each (scheduled
    0.0, 0.3, …, 2.7); the engine logs a 0.1 s step every 0.1 s, num_waiting after admission.

    With 1 s windows from 0: waiting at the edges 0, 1, 2, 3 s is 0, 6, 3, 0 (at 1 s, 10
    arrived and 4 scheduled; at 2 s, 7 scheduled).
    """
    arrival = [0.05 * k for k in range(10)]
    scheduled = [0.3 * k for k in range(10)]
    requests = {"arrival_s": arrival, "scheduled_s": scheduled,
                "first_token_s": [s + 0.1 for s in scheduled],
                "finish_s": [s + 0.3 for s in scheduled],
                "prompt_len": [100] * 10, "output_len": [2] * 10, "instance": ["i0"] * 10}
    start = np.round(0.1 * np.arange(30), 10)
    a, s = np.array(arrival), np.array(scheduled)
    waiting = [int((a <= t).sum() - (s <= t + 1e-9).sum()) for t in start]
    steps = {"instance": ["i0"] * 30, "start_s": start.tolist(),
             "end_s": np.round(start + 0.1, 10).tolist(), "num_waiting": waiting,
             "num_running": [1] * 30, "prefill_tokens": [100 if k % 3 == 0 else 0
                                                         for k in range(30)],
             "decode_tokens": [0 if k % 3 == 0 else 1 for k in range(30)]}
    return requests, steps


@pytest.mark.parametrize("source", ["requests", "steps", "metrics"])
def test_every_source_finds_the_same_windows(tmp_path: Path, source: str):
    requests, steps = tiny_burst()
    metrics = None
    if source == "metrics":
        path = tmp_path / "m.csv"
        write_metrics_csv(pd.DataFrame(requests), pd.DataFrame(steps), path, 0.25)
        metrics = read_metrics(path)
    inp = make_input(requests, steps=steps if source == "steps" else None, metrics=metrics)
    m = analyze_queueing(inp, thresholds(window_s=1.0)).metrics
    assert m.queue_source == Source(source)
    # [0, 1) grows (0 → 6 with 10 arrivals); [1, 2) drains 6 → 3 with requests waiting at
    # both edges; [2, 3) empties
    assert (m.growing_windows, m.queued_windows) == (1, 2)
    # a scrape at 1 s sees the last step ended before it, [0.8, 0.9) with 7 waiting (the
    # step [0.9, 1.0) ends at 1 s): one step behind the log
    assert m.growth_requests == (7 if source == "metrics" else 6)
    # all ten arrive in the growing window, none in the arrival span outside it
    assert m.arrival_rate_growing_per_s == pytest.approx(10.0)
    assert m.arrival_rate_other_per_s is None and m.burst_ratio is None
    # one request runs at a time: the one seat (the most seen) is full while others wait
    assert m.running_fill_queued == pytest.approx(1.0)
    assert m.running_source == Source(source)


def test_step_log_measures_busy_idle_and_batch_in_the_queued_windows():
    requests, steps = tiny_burst()
    m = analyze_queueing(make_input(requests, steps=steps), thresholds(window_s=1.0)).metrics
    # steps back to back over [0, 2): busy 2 s of the 2 s covered, no idle gap
    assert m.busy_queued == pytest.approx(1.0)
    assert m.idle_waiting_queued == 0.0
    # the steps in [0, 2) that leave requests waiting are 0.1 … 1.9 s (19; at 0.0 the first
    # request is admitted and nobody else has arrived); 100 tokens at the admission steps
    # 0.3, 0.6, …, 1.8 (6), 1 at the other 13: (600 + 13) / 19
    assert steps["num_waiting"][:20].count(0) == 1
    assert m.tokens_per_step_queued == pytest.approx(613 / 19)


def two_instances() -> tuple[dict[str, list], dict[str, list]]:
    """The tiny burst on instance i0, and an idle instance i1: one request and two 0.1 s
    steps, at 0.0 and 1.9 s, never anybody waiting."""
    requests, steps = tiny_burst()
    requests = {k: [*v, v[0]] for k, v in requests.items()}
    requests["instance"][-1] = "i1"
    requests["finish_s"][-1] = 0.1
    steps = {k: [*v, v[0], v[0]] for k, v in steps.items()}
    steps["instance"][-2:] = ["i1", "i1"]
    steps["start_s"][-2:] = [0.0, 1.9]
    steps["end_s"][-2:] = [0.1, 2.0]
    steps["num_waiting"][-2:] = [0, 0]
    order = np.argsort(steps["start_s"], kind="stable")
    return requests, {k: [v[i] for i in order] for k, v in steps.items()}


def test_each_instance_is_judged_where_its_own_queue_is():
    requests, steps = two_instances()
    m = analyze_queueing(make_input(requests, steps=steps), thresholds(window_s=1.0)).metrics
    # i0 queues in [0, 2) and is busy throughout; i1 never queues, so its idle time there
    # does not count: 2.0 s busy of i0's 2.0 s
    assert (m.growing_windows, m.queued_windows) == (1, 2)
    assert m.busy_queued == pytest.approx(1.0)


def test_too_many_instance_windows_fall_back_to_the_cluster_sums(monkeypatch):
    from yaotu_trace.axes.queueing import steps as step_pass

    monkeypatch.setattr(step_pass, "MAX_CELLS", 1)
    requests, steps = two_instances()
    m = analyze_queueing(make_input(requests, steps=steps), thresholds(window_s=1.0)).metrics
    # the cluster in [0, 2): i0 busy 2.0 s and i1 0.2 s of the 2.0 + 2.0 s they cover
    assert m.busy_queued == pytest.approx(2.2 / 4.0)


def test_a_large_queue_share_is_never_ok_whatever_the_step_log_shows():
    # Each of ten requests waits 0.3 s of its 1.5 s latency (a share of 0.2), while the step
    # log never reports anybody waiting: the old gate (a quarter of the steps with requests
    # waiting) left the axis ok; now it is a warning with the cause unidentified.
    arrival = [float(i) for i in range(10)]
    requests = {"arrival_s": arrival, "scheduled_s": [a + 0.3 for a in arrival],
                "first_token_s": [a + 1.0 for a in arrival],
                "finish_s": [a + 1.5 for a in arrival],
                "prompt_len": [10] * 10, "output_len": [5] * 10}
    steps = {"start_s": [a + 0.3 for a in arrival], "end_s": [a + 1.5 for a in arrival],
             "num_waiting": [0] * 10, "num_running": [1] * 10}
    result = analyze_queueing(make_input(requests, steps=steps), thresholds())
    assert result.metrics.queued_windows == 0
    assert result.metrics.queue_share_of_latency == pytest.approx(0.2)
    assert (result.status, result.cause, result.rule_ids) == ("warning", "unidentified",
                                                              ("Q006",))
    assert any("KV usage" in step for step in result.next_steps)
