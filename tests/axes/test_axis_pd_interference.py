"""Prefill/decode interference axis: stalls, their coincidence with prefill, decode-seconds lost."""

from __future__ import annotations

import pytest
from diag_factories import evidence, make_input, thresholds

from yaotu_trace.axes.base import Status
from yaotu_trace.axes.pd_interference import analyze_pd_interference


def decoding(stall_s: float) -> list[float]:
    """20 tokens 20 ms apart with one gap of `stall_s` after the 10th."""
    first = [0.02 * i for i in range(10)]
    return first + [first[-1] + stall_s + 0.02 * i for i in range(10)]


def colocated(stall_s: float, other_first_token_s: float, instances=("a", "a")) -> dict:
    return {"arrival_s": [0.0, 0.1], "prompt_len": [10, 4000], "output_len": [20, 1],
            "instance": list(instances), "first_token_s": [0.0, other_first_token_s],
            "token_times_s": [decoding(stall_s), [other_first_token_s]]}


def test_pd_stall_during_another_prefill_loses_exact_decode_seconds() -> None:
    # GIVEN a 0.5 s gap (median step 20 ms) while request 2's first token lands on the same instance
    result = analyze_pd_interference(make_input(colocated(0.5, 0.4)), thresholds())
    m = result.metrics
    assert m.median_decode_step_s == pytest.approx(0.02)
    assert m.stalls == 1 and m.stalls_with_prefill == 1
    # THEN the excess over the median step is lost: 0.5 − 0.02 = 0.48 decode-seconds
    assert m.decode_seconds_lost == pytest.approx(0.48)
    assert m.decode_seconds_total == pytest.approx(18 * 0.02 + 0.5)
    assert m.interference_share == pytest.approx(0.48 / 0.86)
    assert result.status is Status.BOTTLENECK
    # Material interference asks the P/D network check on the axis itself: without --model
    # the KV bytes are unknown, so it cannot pass (D004) and says why.
    assert result.rule_ids == ("D001", "D002", "D004")
    assert evidence(result, "D002")["interference_share"].threshold == 0.15
    assert "KV bytes per token unknown" in result.hits[-1].detail


def test_pd_prefill_on_another_instance_does_not_explain_the_stall() -> None:
    result = analyze_pd_interference(make_input(colocated(0.5, 0.4, ("a", "b"))), thresholds())
    assert result.metrics.stalls_with_prefill == 0
    assert result.metrics.decode_seconds_lost == 0.0
    assert "D006" in result.rule_ids and "D005" in result.rule_ids
    assert result.status is Status.OK


def test_pd_step_log_prefill_steps_locate_the_interference() -> None:
    columns = colocated(0.5, 5.0)  # the other request's first token is far away
    steps = {"instance": ["a", "a", "b"], "start_s": [0.20, 0.5, 0.25], "end_s": [0.22, 0.6, 0.27],
             "prefill_tokens": [0, 4000, 0], "decode_tokens": [1, 1, 1]}
    result = analyze_pd_interference(make_input(columns, steps=steps), thresholds())
    m = result.metrics
    assert m.coincidence_source == "prefill steps in the step log"
    assert m.median_step_source == "decode-only steps"
    assert m.median_decode_step_s == pytest.approx(0.02)
    assert m.stalls_with_prefill == 1
    # The same prefill on instance b would not count.
    steps["instance"] = ["a", "b", "a"]
    moved = analyze_pd_interference(make_input(columns, steps=steps), thresholds())
    assert moved.metrics.stalls_with_prefill == 0
    assert "steps" in result.sources


def test_pd_small_stall_share_is_a_warning() -> None:
    # A 0.08 s stall at k = 3 (threshold 60 ms): loses 60 ms of about 0.44 s → 13.6 %.
    result = analyze_pd_interference(make_input(colocated(0.08, 0.2)), thresholds(stall_factor=3))
    assert result.metrics.stall_threshold_s == pytest.approx(0.06)
    assert result.metrics.decode_seconds_lost == pytest.approx(0.06)
    assert result.status is Status.WARNING
    assert result.rule_ids == ("D001", "D004")  # the network check cannot pass without --model


def test_pd_stall_factor_override_removes_the_stall() -> None:
    result = analyze_pd_interference(make_input(colocated(0.5, 0.4)), thresholds(stall_factor=30))
    assert result.metrics.stalls == 0
    assert result.status is Status.OK
    assert result.rule_ids == ("D005",)


def test_pd_insufficient_data_without_token_times() -> None:
    result = analyze_pd_interference(
        make_input({"arrival_s": [0.0], "prompt_len": [1], "output_len": [1]}), thresholds())
    assert result.status is Status.INSUFFICIENT_DATA
    assert any("token_times_s" in m for m in result.missing)


def test_pd_metrics_alone_give_context_but_not_a_verdict() -> None:
    from diag_factories import make_metrics

    rows = [(0.0, "vllm:inter_token_latency_seconds_sum", "", 0.0),
            (9.0, "vllm:inter_token_latency_seconds_sum", "", 3.0),
            (0.0, "vllm:inter_token_latency_seconds_count", "", 0.0),
            (9.0, "vllm:inter_token_latency_seconds_count", "", 100.0)]
    inp = make_input({"arrival_s": [0.0], "prompt_len": [1], "output_len": [1]},
                     metrics=make_metrics(rows))
    result = analyze_pd_interference(inp, thresholds())
    assert result.status is Status.INSUFFICIENT_DATA
    assert result.sources == ("metrics",)
    assert result.metrics.metrics_itl_mean_s == pytest.approx(0.03)


def test_pd_step_instances_ignored_when_requests_have_none() -> None:
    columns = colocated(0.5, 5.0)
    del columns["instance"]
    steps = {"instance": ["a", "a"], "start_s": [0.20, 0.5], "end_s": [0.22, 0.6],
             "prefill_tokens": [0, 4000], "decode_tokens": [1, 1]}
    result = analyze_pd_interference(make_input(columns, steps=steps), thresholds())
    assert result.metrics.stalls_with_prefill == 1
    assert any("co-located" in n for n in result.notes)
