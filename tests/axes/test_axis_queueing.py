"""Queueing axis: burst, dispatch overhead, batch shape, KV admission, and the data it needs."""

from __future__ import annotations

import numpy as np
import pytest
from diag_factories import burst_columns, evidence, make_input, make_metrics, thresholds

from yaotu_trace.axes.base import Status
from yaotu_trace.axes.queueing import analyze_queueing, spread_work


def test_queueing_arrival_burst_above_service_rate_is_bottleneck() -> None:
    # GIVEN a burst of 20 requests in 1 s at a server that serves 1 request/s
    result = analyze_queueing(make_input(burst_columns()), thresholds())
    # THEN the queue is the burst's: Q001, cause arrival_burst, scored by queue share of latency
    assert result.status is Status.BOTTLENECK
    assert result.cause == "arrival_burst"
    assert result.rule_ids == ("Q001",)
    m = result.metrics
    assert m.service_rate_tokens_per_s == pytest.approx(110.0)
    assert m.peak_offered_tokens_per_s == pytest.approx(440.0)  # 20 × 110 tokens in 5 s
    assert m.peak_rho == pytest.approx(4.0)
    assert m.excess_offered_tokens == pytest.approx((440 - 110) * 5)
    burst = m.peak_windows[-1]
    assert (burst.start_s, burst.rho) == (20.0, pytest.approx(4.0))
    assert (burst.waiting_at_start, burst.waiting_at_end) == (0, 14)
    queue = sum(0.95 * k for k in range(20))  # burst request k waits k − 0.05k s
    assert m.queue_seconds_total == pytest.approx(queue)
    assert m.queue_share_of_ttft == pytest.approx(queue / (queue + 40 * 0.5))
    assert result.score == pytest.approx(queue / (queue + 40 * 1.0))
    ev = evidence(result, "Q001")
    # the queue grows in [20, 25) only: 440 offered against 110 tokens/s served, and 20
    # arrivals there (4/s) against 20 in the four windows before it (1/s)
    assert ev["growth_rho"].value == pytest.approx(4.0)
    assert ev["growth_rho"].threshold == 1.0 and ev["growth_rho"].passed
    assert ev["burst_ratio"].value == pytest.approx(4.0)
    assert ev["growing_windows"].value == 1
    assert ev["queue_share_of_ttft"].threshold_name == "queue_share_of_ttft"
    assert "step log" in " ".join(result.notes)


def dispatch_steps() -> dict[str, list[float]]:
    """10 steps of 10 ms with 10 ms idle gaps while 3 requests wait."""
    start = [0.02 * k for k in range(10)]
    return {"start_s": start, "end_s": [s + 0.01 for s in start], "num_waiting": [3] * 10,
            "num_running": [4] * 10, "prefill_tokens": [0] * 10, "decode_tokens": [4] * 10}


def test_queueing_idle_gpu_while_requests_wait_is_dispatch_overhead() -> None:
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=dispatch_steps())
    result = analyze_queueing(inp, thresholds())
    assert result.status is Status.BOTTLENECK
    assert result.cause == "dispatch_overhead"
    assert "Q003" in result.rule_ids
    m = result.metrics
    assert m.wall_s == pytest.approx(0.19)
    assert m.idle_while_waiting_s == pytest.approx(0.09)
    assert m.idle_while_waiting_fraction == pytest.approx(0.09 / 0.19)
    assert m.gpu_busy_fraction == pytest.approx(0.10 / 0.19)
    assert "steps" in result.sources
    assert result.score == pytest.approx(0.09 / 0.19)


def test_queueing_idle_gaps_without_waiting_are_not_dispatch_overhead() -> None:
    steps = dispatch_steps()
    steps["num_waiting"] = [0] * 10
    result = analyze_queueing(
        make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]}, steps=steps),
        thresholds())
    assert result.status is Status.OK
    assert result.metrics.idle_while_waiting_s == 0.0


def busy_steps(kv_used: int) -> dict[str, list[float]]:
    """Back-to-back steps (GPU always busy), 3 waiting, 4 running, 64 tokens per step."""
    start = [0.01 * k for k in range(20)]
    return {"start_s": start, "end_s": [s + 0.01 for s in start], "num_waiting": [3] * 20,
            "num_running": [4] * 20, "prefill_tokens": [60] * 20, "decode_tokens": [4] * 20,
            "kv_blocks_used": [kv_used] * 20, "kv_blocks_total": [100] * 20}


def test_queueing_busy_gpu_small_batches_is_batch_shape() -> None:
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=busy_steps(kv_used=30), max_num_seqs=64)
    result = analyze_queueing(inp, thresholds())
    assert result.cause == "batch_shape"
    assert result.rule_ids == ("Q004",)
    ev = evidence(result, "Q004")
    assert ev["tokens_per_step_queued"].value == 64.0
    assert ev["running_fill_queued"].value == pytest.approx(4 / 64)


@pytest.mark.parametrize("given_cap", [None, 4])
def test_queueing_every_seat_taken_with_kv_and_budget_free_is_batch_shape(
        given_cap: int | None) -> None:
    """4 running of 4 seats in every step while 3 wait, KV 30 % used, 64 tokens a step
    against a budget of 2,048: the seat cap is what admission waits for (before, no rule named
    a cause and Q011 said the data could not tell)."""
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=busy_steps(kv_used=30), max_num_seqs=given_cap,
                     max_batched_tokens=2048)
    result = analyze_queueing(inp, thresholds())
    assert result.status is Status.BOTTLENECK
    assert result.cause == "batch_shape"
    assert result.rule_ids == ("Q004",)
    ev = evidence(result, "Q004")
    assert ev["running_fill_queued"].value == 1.0 and ev["running_fill_queued"].passed
    assert ev["kv_usage_queued"].value == pytest.approx(0.30)
    assert ev["step_fill_queued"].value == pytest.approx(64 / 2048)
    assert ev["seq_cap"].value == 4.0
    inferred = [n for n in result.notes if "seat cap is taken as" in n]
    assert len(inferred) == (1 if given_cap is None else 0)


def test_queue_behind_a_busy_gpu_without_request_timing_is_scored_by_the_steps_that_wait(
) -> None:
    """A step log and no request timing: a queue behind the seat cap leaves the GPU busy, so
    the share of time it idled while requests waited is 0 by definition; scored by it, the
    bottleneck ranked as costing nothing (the verdict read "0.0 % of wall time the GPU idled
    while requests waited"). It is scored by the share of steps that left requests waiting:
    30 of 40 here (half-second steps back to back, 3 waiting for 15 s, then none)."""
    start = [0.5 * k for k in range(40)]
    steps = {"start_s": start, "end_s": [s + 0.5 for s in start],
             "num_waiting": [3] * 30 + [0] * 10, "num_running": [4] * 40,
             "prefill_tokens": [60] * 40, "decode_tokens": [4] * 40,
             "kv_blocks_used": [30] * 40, "kv_blocks_total": [100] * 40}
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=steps, max_num_seqs=4, max_batched_tokens=2048)
    result = analyze_queueing(inp, thresholds())
    assert result.status is Status.BOTTLENECK and result.cause == "batch_shape"
    assert result.metrics.idle_while_waiting_fraction == 0.0
    assert result.score == pytest.approx(30 / 40)
    assert result.score_basis == "share of steps that left requests waiting"


def test_queueing_every_seat_taken_with_kv_nearly_full_is_not_the_seat_cap() -> None:
    """The same seats with KV 80 % used: more seats would not fit, so Q004 does not fire."""
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=busy_steps(kv_used=80), max_num_seqs=4, max_batched_tokens=2048)
    result = analyze_queueing(inp, thresholds())
    assert "Q004" not in result.rule_ids


def test_queueing_full_kv_with_empty_seats_is_kv_admission() -> None:
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=busy_steps(kv_used=95), max_num_seqs=64)
    result = analyze_queueing(inp, thresholds())
    assert result.status is Status.BOTTLENECK
    assert result.cause == "kv_admission"
    assert "Q005" in result.rule_ids
    assert evidence(result, "Q005")["kv_usage_queued"].value == pytest.approx(0.95)


def test_queueing_insufficient_data_names_missing_columns() -> None:
    result = analyze_queueing(
        make_input({"arrival_s": [0.0, 1.0], "prompt_len": [1, 2], "output_len": [1, 2]}),
        thresholds())
    assert result.status is Status.INSUFFICIENT_DATA
    assert any("scheduled_s" in m for m in result.missing)
    assert any("num_waiting" in m for m in result.missing)
    assert any("vllm:num_requests_waiting" in m for m in result.missing)
    assert result.hits == ()


def moderate_queue() -> dict[str, list[float]]:
    """Each request waits 0.3 s of a 1 s TTFT, at a steady rate: no burst."""
    arrival = [float(i) for i in range(10)]
    return {"arrival_s": arrival, "scheduled_s": [a + 0.3 for a in arrival],
            "first_token_s": [a + 1.0 for a in arrival], "finish_s": [a + 1.5 for a in arrival],
            "prompt_len": [10] * 10, "output_len": [5] * 10}


def test_queueing_noticeable_queue_without_cause_is_warning() -> None:
    result = analyze_queueing(make_input(moderate_queue()), thresholds())
    assert result.status is Status.WARNING
    assert result.rule_ids == ("Q006",)
    assert result.metrics.queue_share_of_ttft == pytest.approx(0.3)


def test_queueing_threshold_override_changes_the_status() -> None:
    result = analyze_queueing(make_input(moderate_queue()), thresholds(queue_share_warn=0.4))
    assert result.status is Status.OK
    assert result.hits == ()
    strict = analyze_queueing(make_input(burst_columns()), thresholds(overload_rho=5.0))
    assert "Q001" not in strict.rule_ids


def test_queueing_bursty_arrivals_at_low_mean_load_is_warning() -> None:
    # Ten quiet requests then a tight burst of forty, over a long span: low mean load, high CV.
    arrival = [10.0 * i for i in range(10)] + [100 + 0.01 * i for i in range(40)]
    wait = [0.0] * 48 + [0.9, 0.9]
    start = [a + w for a, w in zip(arrival, wait, strict=True)]
    columns = {"arrival_s": arrival, "scheduled_s": start,
               "first_token_s": [s + 0.5 for s in start],
               "finish_s": [s + 1.0 for s in start],
               "prompt_len": [10] * 50, "output_len": [10] * 50}
    result = analyze_queueing(make_input(columns), thresholds())
    assert "Q002" in result.rule_ids
    assert result.cause == "arrival_burst"
    assert result.metrics.interarrival_cv > 1.5


def test_queueing_little_law_mismatch_is_flagged() -> None:
    # Requests say nobody waited; the step log says 3 were waiting throughout.
    columns = {"arrival_s": [0.0, 0.1], "scheduled_s": [0.0, 0.1], "first_token_s": [0.05, 0.15],
               "prompt_len": [10, 10], "output_len": [2, 2]}
    steps = busy_steps(kv_used=10)
    result = analyze_queueing(make_input(columns, steps=steps), thresholds())
    assert "Q000" in result.rule_ids
    assert result.metrics.little_expected_waiting == 0.0
    assert result.metrics.little_mismatch == pytest.approx(1.0)
    assert result.status is Status.WARNING


def test_queueing_uses_metrics_when_no_request_timing() -> None:
    rows = [(float(t), "vllm:num_requests_waiting", "engine=0", 2.0) for t in range(10)]
    rows += [(float(t), "vllm:num_requests_running", "engine=0", 8.0) for t in range(10)]
    rows += [(float(t), "vllm:kv_cache_usage_perc", "engine=0", 0.97) for t in range(10)]
    rows += [(0.0, "vllm:request_queue_time_seconds_sum", "", 0.0),
             (9.0, "vllm:request_queue_time_seconds_sum", "", 6.0),
             (0.0, "vllm:request_queue_time_seconds_count", "", 0.0),
             (9.0, "vllm:request_queue_time_seconds_count", "", 10.0),
             (0.0, "vllm:time_to_first_token_seconds_sum", "", 0.0),
             (9.0, "vllm:time_to_first_token_seconds_sum", "", 8.0),
             (0.0, "vllm:time_to_first_token_seconds_count", "", 0.0),
             (9.0, "vllm:time_to_first_token_seconds_count", "", 10.0),
             (0.0, "vllm:e2e_request_latency_seconds_sum", "", 0.0),
             (9.0, "vllm:e2e_request_latency_seconds_sum", "", 30.0),
             (0.0, "vllm:e2e_request_latency_seconds_count", "", 0.0),
             (9.0, "vllm:e2e_request_latency_seconds_count", "", 10.0)]
    inp = make_input({"arrival_s": [0.0], "prompt_len": [1], "output_len": [1]},
                     metrics=make_metrics(rows))
    result = analyze_queueing(inp, thresholds())
    assert result.sources == ("metrics",)
    assert result.metrics.queue_share_of_ttft == pytest.approx(0.75)
    assert result.metrics.queue_share_of_latency == pytest.approx(0.2)
    assert result.score == pytest.approx(0.2)
    assert result.metrics.waiting_share == 1.0
    assert result.cause == "kv_admission"  # KV usage 0.97 with a standing queue


def test_spread_work_splits_a_request_across_windows() -> None:
    edges = np.array([0.0, 5.0, 10.0])
    done = spread_work(edges, np.array([4.0, 6.0]), np.array([6.0, 6.0]), np.array([10.0, 3.0]))
    assert done.tolist() == pytest.approx([5.0, 8.0])


def test_queueing_idle_time_unknown_without_waiting_counts() -> None:
    steps = dispatch_steps()
    del steps["num_waiting"]
    result = analyze_queueing(
        make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]}, steps=steps),
        thresholds())
    assert result.metrics.idle_while_waiting_s is None
    assert result.metrics.gpu_busy_fraction == pytest.approx(0.10 / 0.19)
    assert any("num_waiting" in m for m in result.missing)


def test_queueing_head_waiting_for_kv_blocks_is_kv_admission_at_half_usage() -> None:
    # GIVEN busy steps with 3 waiting at a KV usage of 50 % (far below kv_admission_usage) and
    # half the seats taken, whose admission signal says the head of the queue asked for 600
    # blocks with 50 free in 15 of the 20 steps (and 30 of 50 in the other 5)
    steps = busy_steps(kv_used=50)
    steps["head_blocks_needed"] = [600] * 15 + [30] * 5
    steps["kv_blocks_free"] = [50] * 20
    inp = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                     steps=steps, max_num_seqs=8)
    result = analyze_queueing(inp, thresholds())
    # THEN admission is blocked by KV: 15 of the 20 waiting steps (0.75 ≥ kv_blocked_share)
    assert result.cause == "kv_admission" and "Q005" in result.rule_ids
    ev = evidence(result, "Q005")
    assert ev["kv_blocked_queued"].value == pytest.approx(0.75)
    assert ev["kv_blocked_queued"].threshold_name == "kv_blocked_share"
    assert ev["kv_usage_queued"].value == pytest.approx(0.5)
    # AND without the signal the same steps are batch-shaped (seats half full), not KV
    plain = make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]},
                       steps=busy_steps(kv_used=50), max_num_seqs=8)
    assert analyze_queueing(plain, thresholds()).cause != "kv_admission"


def most_of_latency_queued() -> dict[str, list[float]]:
    """Each request waits 3 s of a 3.5 s TTFT (4 s latency) at a steady rate: no burst."""
    arrival = [float(i) for i in range(10)]
    return {"arrival_s": arrival, "scheduled_s": [a + 3.0 for a in arrival],
            "first_token_s": [a + 3.5 for a in arrival], "finish_s": [a + 4.0 for a in arrival],
            "prompt_len": [10] * 10, "output_len": [5] * 10}


def test_queueing_most_of_latency_without_cause_is_admission_blocked_not_unidentified() -> None:
    result = analyze_queueing(make_input(most_of_latency_queued()), thresholds())
    # 3 s of 4 s latency queued (0.75 ≥ queue_share_of_ttft 0.5) and no rule names why
    assert result.rule_ids == ("Q011",)
    assert result.status is Status.BOTTLENECK and result.cause == "admission_blocked"
    ev = evidence(result, "Q011")
    assert ev["queue_share_of_latency"].value == pytest.approx(0.75)
    assert any("head_blocks_needed" in s for s in result.next_steps)
    # the moderate queue (0.3 of TTFT, 0.2 of latency) stays Q006's
    assert analyze_queueing(make_input(moderate_queue()), thresholds()).cause == "unidentified"


def test_queueing_admission_blocked_shows_vllm_waiting_reason() -> None:
    # vLLM's num_requests_waiting_by_reason: 3 waiting for capacity, 1 deferred
    rows = [(t, "vllm:num_requests_waiting_by_reason", f'reason={r}', v)
            for t in (0.0, 5.0, 10.0) for r, v in (("capacity", 3.0), ("deferred", 1.0))]
    inp = make_input(most_of_latency_queued(), metrics=make_metrics(rows))
    result = analyze_queueing(inp, thresholds())
    assert result.cause == "admission_blocked"
    assert evidence(result, "Q011")["waiting_capacity_share"].value == pytest.approx(0.75)


def _two_pools(held: tuple[float, float] | None) -> dict[str, float | None]:
    """One 5 s window where both instances queue: a prefill instance with 4 steps of 8,000
    tokens, 10 % KV, none KV-blocked; a decode instance with 100 steps of 30 tokens, 99 % KV,
    every one KV-blocked. `held`: each one's queue (waiting × step time; None: not logged)."""
    from yaotu_trace.axes.queueing.steps import WindowBins
    from yaotu_trace.axes.queueing.windows import _step_shape

    col = lambda a, b: np.array([[a], [b]], dtype=np.float64)  # noqa: E731
    bins = WindowBins(
        instances=("p0", "d0"), covered_s=col(5.0, 5.0), busy_s=col(5.0, 4.0),
        idle_waiting_s=col(0.0, 0.0), steps=col(4, 100), running_sum=col(8, 3000),
        tokens_sum=col(32000, 3000), kv_usage_sum=col(0.4, 99.0), waiting_at_edges=None,
        admission_steps=col(4, 100), kv_blocked_steps=col(0, 100),
        held_s=None if held is None else col(*held))
    return _step_shape(bins, np.ones((2, 1), dtype=bool), budget=8192.0, seq_cap=64.0)


def test_queued_means_weigh_each_instance_by_the_queue_it_held() -> None:
    # GIVEN the prefill instance held 80 request-seconds of queue (20 waiting, 4 s), the
    # decode instance 4 (1 waiting, 100 steps of 40 ms)
    shape = _two_pools((80.0, 4.0))
    # THEN each mean is the instances' own, weighed 80 : 4
    assert shape["kv_blocked_queued"] == pytest.approx(4 / 84)
    assert shape["tokens_per_step_queued"] == pytest.approx((8000 * 80 + 30 * 4) / 84)
    assert shape["kv_usage_queued"] == pytest.approx((0.1 * 80 + 0.99 * 4) / 84)
    assert shape["running_fill_queued"] == pytest.approx((2 * 80 + 30 * 4) / 84 / 64)
    # AND without a queue count the steps are pooled as before (100 of 104 blocked)
    pooled = _two_pools(None)
    assert pooled["kv_blocked_queued"] == pytest.approx(100 / 104)
    assert pooled["tokens_per_step_queued"] == pytest.approx(35000 / 104)


def test_a_capture_overloaded_in_every_window_with_arrivals_is_one_burst() -> None:
    """No calmer window to hold the arrival rate against (burst_ratio none): Q001 fires when
    the steps run at their token budget, not when a seat cap binds with the budget idle."""
    from diag_factories import blank_metrics

    from yaotu_trace.axes.queueing.metrics import QueueingMetrics
    from yaotu_trace.axes.queueing.rules.q001_arrival_burst import RULE
    from yaotu_trace.axes.queueing.rules.shared import QueueingFacts

    def fired(step_fill: float) -> bool:
        mt = blank_metrics(QueueingMetrics, queue_share_of_ttft=0.9, queue_share_of_latency=0.8,
                           growing_windows=9, growth_rho=2.7, burst_ratio=None,
                           arrival_rate_growing_per_s=6.7, arrival_rate_other_per_s=None,
                           busy_queued=1.0, idle_waiting_queued=0.0, step_fill_queued=step_fill,
                           running_fill_queued=0.5, kv_usage_queued=0.15)
        return RULE.check(QueueingFacts(metrics=mt, has_steps=True), thresholds(),
                          frozenset()) is not None

    assert fired(0.96)
    assert not fired(0.2)


def test_metrics_means_weigh_each_instance_by_what_waited_at_its_scrapes() -> None:
    """Scrapes every second for 5 s: instance p has 40 waiting at 10 % KV, instance d 2
    waiting at 100 % KV. Each instance's mean, weighed 200 : 10 by what waited, is near p's;
    one instance alone is its own plain mean."""
    from yaotu_trace.axes.queueing.metrics import Windows
    from yaotu_trace.axes.queueing.windows import _gauge_mean_in

    rows = []
    for t in range(5):
        for inst, waiting, kv in (("p", 40.0, 0.10), ("d", 2.0, 1.00)):
            label = f'instance="{inst}"'
            rows += [(float(t), "vllm:num_requests_waiting", label, waiting),
                     (float(t), "vllm:kv_cache_usage_perc", label, kv)]
    grid = Windows(t0_s=0.0, width_s=5.0, count=1)
    queued = np.ones(1, dtype=bool)
    both = _gauge_mean_in(make_metrics(rows), "kv_usage", grid, queued)
    assert both == pytest.approx((0.10 * 200 + 1.00 * 10) / 210)
    alone = [r for r in rows if 'instance="d"' in r[2]]
    assert _gauge_mean_in(make_metrics(alone), "kv_usage", grid, queued) == pytest.approx(1.0)


def test_the_panel_shows_the_queue_weighted_shape_beside_the_pooled_p75s() -> None:
    """A P/D cluster's P75s pool every instance's steps, mostly the decode pool's (run of
    `trace simulate --pd 2:1 --link-gbps 1` on 300 agentic requests: P75 step fill 0.2 %,
    KV 93 %), while the queue is the prefill pool's (95.6 %, 14.8 %): the panel shows both."""
    from yaotu_trace.render.views.axes import metric_rows

    metrics = {"step_fill_p75": 0.002, "running_fill_p75": 0.65, "kv_usage_p75": 0.931,
               "step_fill_queued": 0.956, "running_fill_queued": 0.123,
               "kv_usage_queued": 0.148}
    rows = metric_rows({"name": "queueing", "metrics": metrics})
    assert rows == [("P75 step tokens / budget", "0.2 %"), ("P75 running / seq cap", "65.0 %"),
                    ("P75 KV usage", "93.1 %"),
                    ("step tokens / budget where queued", "95.6 %"),
                    ("running / seq cap where queued", "12.3 %"),
                    ("KV usage where queued", "14.8 %")]
    # no queue, no rows for it
    assert len(metric_rows({"name": "queueing", "metrics": {"step_fill_p75": 0.5}})) == 1
