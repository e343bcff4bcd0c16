"""KV-memory axis: preemption at full KV, spiky demand, demand vs capacity, block waste."""

from __future__ import annotations

import numpy as np
import pytest
from diag_factories import evidence, make_input, make_metrics, thresholds

from yaotu_trace.axes.base import Status
from yaotu_trace.axes.kv_memory import analyze_kv_memory


def requests(preemptions: list[int]) -> dict[str, list[float]]:
    """Four requests of 100 prompt + 20 output tokens, held 0–10 s, 1–11 s, …"""
    return {
        "arrival_s": [0.0, 1.0, 2.0, 3.0],
        "scheduled_s": [0.0, 1.0, 2.0, 3.0],
        "first_token_s": [0.5, 1.5, 2.5, 3.5],
        "finish_s": [10.0, 11.0, 12.0, 13.0],
        "prompt_len": [100] * 4,
        "output_len": [20] * 4,
        "num_preemptions": preemptions,
    }


def steps(used: list[int]) -> dict[str, list[float]]:
    return {"start_s": [0.0, 1.0, 2.0, 3.0], "end_s": [0.5, 1.5, 2.5, 3.5],
            "kv_blocks_used": used, "kv_blocks_total": [100] * 4, "num_preempted": [0, 1, 1, 1]}


def test_kv_preemptions_at_full_kv_are_a_bottleneck() -> None:
    inp = make_input(requests([0, 2, 0, 1]), steps=steps([50, 98, 99, 97]))
    result = analyze_kv_memory(inp, thresholds())
    assert result.status is Status.BOTTLENECK
    assert result.cause == "kv_capacity"
    assert {"K001", "K002", "K003"} <= set(result.rule_ids)
    m = result.metrics
    assert m.preemptions_total == 3 and m.preempted_requests == 2
    # 3 preemptions × (100 + 20 / 2) tokens, of 4 × 120 tokens of work.
    assert m.recomputed_tokens == 330.0
    assert (m.recomputed_tokens_low, m.recomputed_tokens_high) == (300.0, 360.0)
    assert result.score == pytest.approx(330 / 480)
    assert m.kv_usage_at_preemption == pytest.approx(0.98)
    ev = evidence(result, "K001")
    assert ev["kv_usage_at_preemption"].threshold == 0.95 and ev["kv_usage_at_preemption"].passed


def test_kv_preemptions_at_low_usage_are_spiky_demand() -> None:
    inp = make_input(requests([0, 0, 0, 1]), steps=steps([20, 30, 40, 50]))
    result = analyze_kv_memory(inp, thresholds(recompute_dominant=0.5))
    assert "K005" in result.rule_ids and "K001" not in result.rule_ids
    assert result.cause == "spiky_demand"
    assert result.status is Status.WARNING


def test_kv_no_preemption_and_low_usage_is_ok() -> None:
    result = analyze_kv_memory(make_input(requests([0, 0, 0, 0]), steps=steps([20, 30, 40, 50])),
                               thresholds())
    assert result.status is Status.OK
    assert result.score == 0.0


def test_kv_peak_demand_against_capacity() -> None:
    # Just before t = 10 s all four hold ceil((100 + g) / 16) · 16 = 128 tokens.
    inp = make_input(requests([0, 0, 0, 0]), kv_capacity_tokens=300, kv_bytes_per_token=1000)
    result = analyze_kv_memory(inp, thresholds())
    m = result.metrics
    assert m.peak_demand_tokens == 512.0
    assert m.extra_kv_tokens == 212.0
    assert m.extra_kv_bytes == 212_000.0
    assert m.n_safe_p95 == pytest.approx(300 / 120)
    assert "K004" in result.rule_ids
    assert result.status is Status.WARNING


def test_kv_block_waste_at_the_block_size() -> None:
    # 120-token sequences in 16-token blocks: 8 blocks = 128 tokens, 8 wasted.
    result = analyze_kv_memory(make_input(requests([0, 0, 0, 0])), thresholds())
    assert result.metrics.block_waste_fraction == pytest.approx(8 / 128)
    assert "K006" in result.rule_ids  # info: 6.25 % > 5 %


def test_kv_insufficient_data_names_missing_columns() -> None:
    result = analyze_kv_memory(
        make_input({"arrival_s": [0.0], "prompt_len": [10], "output_len": [10]}), thresholds())
    assert result.status is Status.INSUFFICIENT_DATA
    text = " ".join(result.missing)
    for name in ("num_preemptions", "kv_blocks_used", "vllm:num_preemptions_total",
                 "--kv-capacity"):
        assert name in text


def test_kv_sglang_retracted_tokens_are_exact() -> None:
    rows = [(0.0, "sglang:num_retracted_requests_total", "", 0.0),
            (5.0, "sglang:num_retracted_requests_total", "", 2.0),
            (0.0, "sglang:num_retracted_input_tokens_total", "", 0.0),
            (5.0, "sglang:num_retracted_input_tokens_total", "", 150.0),
            (0.0, "sglang:num_retracted_output_tokens_total", "", 0.0),
            (5.0, "sglang:num_retracted_output_tokens_total", "", 30.0),
            (0.0, "sglang:token_usage", "", 0.5), (5.0, "sglang:token_usage", "", 0.99)]
    inp = make_input({"arrival_s": [0.0, 1.0], "prompt_len": [500, 500], "output_len": [100, 100]},
                     metrics=make_metrics(rows))
    result = analyze_kv_memory(inp, thresholds())
    m = result.metrics
    assert m.preemptions_total == 2 and m.preemption_source == "metrics"
    assert m.recomputed_tokens == 180.0
    assert m.kv_usage_at_preemption == pytest.approx(0.99)
    assert "K001" in result.rule_ids
    assert result.sources == ("metrics",)


def test_kv_usage_over_time_buckets_the_step_log() -> None:
    inp = make_input(requests([0, 2, 0, 1]), steps=steps([50, 98, 99, 97]))
    timeline = analyze_kv_memory(inp, thresholds()).metrics.kv_usage_over_time
    assert len(timeline) == 4
    assert timeline[0] == (0.0, 0.5)
    assert timeline[-1][1] == pytest.approx(0.97)


@pytest.mark.parametrize("seed", range(6))
def test_kv_demand_equals_summing_every_request_at_every_point(seed: int) -> None:
    # GIVEN requests of mixed lengths, one very long (it spans every chunk of points)
    from yaotu_trace.axes.kv_memory.metrics import demand_tokens

    rng = np.random.default_rng(seed)
    n = 400
    begin = np.sort(rng.uniform(0, 1000, n))
    finish = begin + rng.exponential(20, n)
    finish[n // 3] = begin[n // 3] + 900
    first = np.where(rng.random(n) < 0.1, np.nan, begin + rng.uniform(0, 1, n))
    prompt = rng.integers(1, 3000, n).astype(float)
    output = rng.integers(0, 500, n).astype(float)
    times = np.nextafter(np.unique(finish), -np.inf)
    # WHEN the demand is taken chunk by chunk over the requests alive in each chunk's range
    got = demand_tokens(times, begin, first, finish, prompt, output, 16)
    # THEN it is the sum over every request alive at each point, as the docstring defines it
    fi = np.where(np.isfinite(first), first, begin)
    d = np.maximum(finish - fi, 1e-12)
    want = np.array([sum(np.ceil((prompt[j] + np.floor(np.clip((t - fi[j]) / d[j], 0, 1)
                                                       * output[j])) / 16) * 16
                         for j in range(n) if begin[j] <= t < finish[j]) for t in times])
    np.testing.assert_array_equal(got, want)


def test_estimated_recompute_under_prefix_cache_hits_is_said_to_be_high() -> None:
    # GIVEN preemptions counted per request but no recompute, once without and once with
    # prefix-cache hits in the table
    plain = analyze_kv_memory(make_input(requests([0, 2, 0, 1])), thresholds())
    cached = analyze_kv_memory(make_input({**requests([0, 2, 0, 1]),
                                           "cached_tokens": [0, 64, 0, 32]}), thresholds())
    # THEN both estimate the same tokens, and only the one whose trace hits the cache says
    # the estimate is likely high (a readmission finds its own freed blocks there)
    assert plain.metrics.recomputed_tokens == cached.metrics.recomputed_tokens == 330.0
    # (its lower bound is then none: a readmission may find all it had computed cached)
    assert (plain.metrics.recomputed_tokens_low, cached.metrics.recomputed_tokens_low) == (
        300.0, 0.0)
    assert not [n for n in plain.notes if "likely high" in n]
    said = [n for n in cached.notes if "likely high" in n]
    assert len(said) == 1 and "an estimate" in said[0]
    # AND a step log that counts the recompute is used as it is, with no such word
    counted = analyze_kv_memory(make_input(
        {**requests([0, 2, 0, 1]), "cached_tokens": [0, 64, 0, 32]},
        steps={**steps([50, 98, 99, 97]), "recomputed_tokens": [0, 100, 40, 0]}), thresholds())
    assert counted.metrics.recomputed_tokens == 140.0
    assert not [n for n in counted.notes if "likely high" in n]


def test_estimated_recompute_is_said_high_when_the_engines_metrics_show_cache_hits() -> None:
    # GIVEN preemptions per request and no cached_tokens column, with vLLM's metrics whose
    # prefix-cache hit counter rises (once) or stays at zero (once)
    def metrics(hits: float):
        return make_metrics([(0.0, "vllm:prefix_cache_hits_total", "", 0.0),
                             (5.0, "vllm:prefix_cache_hits_total", "", hits)])

    hit = analyze_kv_memory(make_input(requests([0, 2, 0, 1]), metrics=metrics(640.0)),
                            thresholds())
    cold = analyze_kv_memory(make_input(requests([0, 2, 0, 1]), metrics=metrics(0.0)),
                             thresholds())
    # THEN only the run whose engine hit its prefix cache says the estimate is likely high
    assert [n for n in hit.notes if "likely high" in n]
    assert not [n for n in cold.notes if "likely high" in n]
    assert (hit.metrics.recomputed_tokens_low, cold.metrics.recomputed_tokens_low) == (0.0, 300.0)


def test_an_estimate_without_cache_hits_says_by_how_much_it_can_be_high() -> None:
    """diag-kv-churn's request table alone shows no cache hit (its first admissions never
    hit), yet the engine that ran it computed far less again than the estimate: the note says
    so with the sample's own two numbers, which this holds to the sample."""
    from pathlib import Path

    from yaotu_trace.commands.diagnose import diagnose_trace
    from yaotu_trace.ingest import read_trace

    samples = Path(__file__).resolve().parents[2] / "sample_traces"
    def kv_memory(**steps: Path) -> dict:
        doc = diagnose_trace(read_trace(samples / "diag-kv-churn.parquet", **steps)).to_dict()
        return next(a for a in doc["axes"] if a["name"] == "kv_memory")

    kv_alone = kv_memory()
    kv_counted = kv_memory(steps_path=samples / "diag-kv-churn.steps.parquet")
    estimate = kv_alone["metrics"]["recomputed_tokens"]
    engine = kv_counted["metrics"]["recomputed_tokens"]
    said = [n for n in kv_alone["notes"] if "an estimate" in n]
    assert len(said) == 1 and not [n for n in kv_alone["notes"] if "likely high" in n]
    assert (f"the engine computed {engine:,.0f} tokens again where this estimate says "
            f"{estimate:,.0f}") in said[0]
    assert engine < estimate


def test_a_recompute_column_with_empty_steps_says_they_count_as_zero() -> None:
    # GIVEN a step log whose recomputed_tokens is empty in one step
    counted = analyze_kv_memory(make_input(
        requests([0, 2, 0, 1]),
        steps={**steps([50, 98, 99, 97]), "recomputed_tokens": [0, 100, None, 0]}), thresholds())
    # THEN the logged steps are summed, and a note says the empty one counted as 0
    assert counted.metrics.recomputed_tokens == 100.0
    assert [n for n in counted.notes if "empty in some steps" in n]
    full = analyze_kv_memory(make_input(
        requests([0, 2, 0, 1]),
        steps={**steps([50, 98, 99, 97]), "recomputed_tokens": [0, 100, 40, 0]}), thresholds())
    assert not [n for n in full.notes if "empty in some steps" in n]
