"""The workload pictures' numbers: hand-checked small cases and the public traces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import shared_trace

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.profile.workload_figures import (
    arrival_series,
    bin_width_s,
    bursts,
    busiest_windows,
    interarrival_cdf,
    length_distribution,
    reuse_over_time,
    session_shape,
    tenant_shares,
    workload_figures,
)


def _trace(**columns: object):
    return normalize(RawTrace(requests=pd.DataFrame(columns), format_name="test"), "t.jsonl")


def test_bin_width_is_the_smallest_round_width_within_the_points() -> None:
    assert bin_width_s(100.0) == 0.5  # 200 bins; 0.2 s would give 500
    assert bin_width_s(3600.0) == 10.0  # the Azure hour: 360 bins
    assert bin_width_s(400.0) == 1.0
    assert bin_width_s(401.0) == 2.0
    assert bin_width_s(86400.0 * 800) == 2 * 86400.0  # beyond the table: whole days


def test_arrival_series_counts_requests_and_tokens_per_second() -> None:
    # Span 4 s -> 0.01 s bins would be 400: bins of 0.01 s, 401 of them.
    arrival = np.array([0.0, 0.0, 1.0, 4.0])
    series = arrival_series(arrival, np.array([10.0, 20.0, 30.0, 40.0]),
                            np.array([1.0, 1.0, 1.0, 1.0]))
    assert series is not None
    assert series.bin_s == 0.01 and len(series.t_s) == 401
    assert series.requests_per_s[0] == pytest.approx(200.0)  # two arrivals in 0.01 s
    assert series.prompt_tokens_per_s[0] == pytest.approx(3000.0)
    assert series.requests_per_s[100] == pytest.approx(100.0)
    assert series.requests_per_s[400] == pytest.approx(100.0)  # the last arrival's bin
    assert sum(series.requests_per_s) * series.bin_s == pytest.approx(4.0)
    assert series.mean_rate_rps == pytest.approx(1.0)
    assert series.peak_rate_rps == pytest.approx(200.0)


def test_arrivals_at_one_instant_have_no_series() -> None:
    assert arrival_series(np.array([5.0, 5.0]), np.ones(2), np.ones(2)) is None


def test_busiest_windows_do_not_overlap_and_prefer_the_earliest_tie() -> None:
    arrival = np.array([0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 20.0, 30.0])
    windows = busiest_windows(arrival, 5.0, top=3)
    assert [(w.start_s, w.requests) for w in windows] == [(0.0, 3), (10.0, 3), (20.0, 1)]
    assert windows[0].rate_rps == pytest.approx(0.6)


def test_a_burst_is_a_run_of_bins_above_twice_the_mean_and_the_poisson_band() -> None:
    counts = np.array([1, 1, 9, 10, 1, 1, 1, 1, 1, 12], dtype=float)
    mean = counts.mean()  # 3.8; threshold max(7.6, 3.8 + 3 * 1.949) = 9.65
    found = bursts(counts, 100.0, 2.0, mean)
    assert [(w.start_s, w.end_s, w.requests) for w in found] == [(106.0, 108.0, 10),
                                                                 (118.0, 120.0, 12)]
    assert found[0].rate_rps == pytest.approx(5.0)
    assert bursts(np.full(10, 5.0), 0.0, 1.0, 5.0) == ()  # steady load has no burst


def test_interarrival_of_a_regular_clock_is_far_from_poisson() -> None:
    cdf = interarrival_cdf(np.arange(0.0, 101.0))
    assert cdf is not None
    assert cdf.gap_s == (1.0,) and cdf.share == (1.0,)
    assert cdf.mean_gap_s == 1.0 and cdf.cv == 0.0 and cdf.zero_gap_share == 0.0
    # Every gap is 1 s: the empirical CDF jumps from 0 to 1 at 1 s, Poisson's is 1 - e^-1 there.
    assert cdf.ks_distance == pytest.approx(1 - math.exp(-1.0))
    assert cdf.poisson_share == (pytest.approx(1 - math.exp(-1.0)),)


def test_interarrival_of_poisson_arrivals_is_close_to_poisson() -> None:
    rng = np.random.default_rng(7)
    cdf = interarrival_cdf(np.cumsum(rng.exponential(0.5, 20_000)))
    assert cdf is not None and cdf.ks_distance < 0.015
    assert cdf.cv == pytest.approx(1.0, abs=0.03)
    assert max(abs(a - b) for a, b in zip(cdf.share, cdf.poisson_share, strict=True)) < 0.015


def test_zero_gaps_count_in_the_cdf_but_are_not_drawn() -> None:
    cdf = interarrival_cdf(np.array([0.0, 0.0, 0.0, 2.0]))  # gaps 0, 0, 2
    assert cdf is not None
    assert cdf.zero_gap_share == pytest.approx(2 / 3)
    assert cdf.gap_s == (2.0,) and cdf.share == (1.0,)
    assert interarrival_cdf(np.array([3.0, 3.0])) is None


def test_lengths_spanning_decades_get_log_bins() -> None:
    wide = length_distribution(np.array([1.0, 10.0, 100.0, 1000.0, 10000.0]), "prompt tokens")
    assert wide is not None and wide.log_x
    assert wide.edges[0] == 1.0 and wide.edges[-1] == pytest.approx(10000.0)
    assert sum(wide.counts) == 5
    narrow = length_distribution(np.array([100.0, 120.0, 150.0, 200.0]), "output tokens",
                                 bins=4)
    assert narrow is not None and not narrow.log_x
    assert narrow.edges == (0.0, 50.0, 100.0, 150.0, 200.0)
    assert narrow.counts == (0, 0, 2, 2)
    assert narrow.cdf_tokens == (100.0, 120.0, 150.0, 200.0)
    assert narrow.cdf_share == (0.25, 0.5, 0.75, 1.0)
    assert length_distribution(np.array([]), "x") is None
    assert narrow.overflow == 0  # a longest value near p99.5 keeps the full range


def test_a_long_tail_beyond_p995_is_left_off_linear_bins_and_counted() -> None:
    # GIVEN 199 lengths of 10 and one of 1,000: p0.5 = 10, p99.5 = 10 + 0.005 × 990 = 14.95
    d = length_distribution(np.array([10.0] * 199 + [1000.0]), "output tokens", bins=4)
    # THEN linear bins (0.17 decades) end at p99.5, not at 1,000 (more than twice beyond it)
    assert d is not None and not d.log_x
    assert d.edges[-1] == pytest.approx(14.95)
    assert d.counts == (0, 0, 199, 0) and d.overflow == 1
    assert d.cdf_tokens[-1] == 1000.0 and d.total == 200  # the CDF keeps every value


def test_azure_code_output_lengths_end_their_bins_at_p995() -> None:
    # The Azure 2023 code trace: outputs p50 13, p99.5 359.4, longest 1,899 (NumPy's
    # percentiles of its GeneratedTokens column)
    trace = read_trace(shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    d = workload_figures(trace).output_len
    assert d is not None and not d.log_x
    out = trace.requests["output_len"].to_numpy()
    assert d.edges[-1] == pytest.approx(float(np.percentile(out, 99.5)))
    assert d.overflow == int((out > d.edges[-1]).sum()) == 45
    assert sum(d.counts) + d.overflow == d.total == 8819


def test_tenants_most_requests_first_and_the_rest_summed() -> None:
    df = pd.DataFrame({"tenant": ["b", "a", "b", "c", "a", "b", "d"],
                       "prompt_len": [1, 2, 3, 4, 5, 6, 7]})
    shares = tenant_shares(df, top=2)
    assert shares is not None
    assert [(s.label, s.requests, s.prompt_tokens) for s in shares] == [
        ("b", 3, 10), ("a", 2, 7), ("other (2 tenants)", 2, 11)]
    assert shares[0].request_share == pytest.approx(3 / 7)
    assert tenant_shares(pd.DataFrame({"tenant": ["x", "x"], "prompt_len": [1, 2]})) is None


def test_sessions_depth_and_think_time_from_the_previous_finish() -> None:
    df = pd.DataFrame({"session_id": ["s1", "s2", "s1", "s1", None],
                       "arrival_s": [0.0, 1.0, 5.0, 9.0, 9.5],
                       "finish_s": [2.0, 3.0, 6.0, 10.0, 11.0]})
    shape = session_shape(df)
    assert shape is not None
    assert shape.sessions == 2 and shape.depths == (1, 2, 3)
    assert shape.sessions_by_depth == (1, 0, 1)
    assert shape.think_time_from == "the previous turn's finish"
    assert shape.think_time is not None
    assert shape.think_time.cdf_tokens == (3.0,)  # 5 - 2 and 9 - 6
    assert shape.think_time.total == 2
    no_finish = session_shape(df.drop(columns="finish_s"))
    assert no_finish is not None and no_finish.think_time is not None
    assert no_finish.think_time.cdf_tokens == (4.0, 5.0)  # 5 - 0, 9 - 5
    assert session_shape(df.drop(columns="session_id")) is None


def test_reuse_over_time_is_hit_tokens_over_prompt_tokens_per_bin() -> None:
    arrival = np.array([0.0, 30.0, 61.0, 3000.0])  # 50 min: minute bins
    reuse = reuse_over_time(arrival, np.array([100.0, 100.0, 50.0, 10.0]),
                            np.array([0.0, 50.0, 50.0, 10.0]))
    assert reuse is not None and reuse.bin_s == 60.0
    assert reuse.t_s == (0.0, 60.0, 3000.0)  # minutes without prompts are left out
    assert reuse.hit_ratio == (0.25, 1.0, 1.0)
    assert reuse.prompt_tokens == (200, 50, 10)
    assert reuse.overall_hit_ratio == pytest.approx(110 / 260)
    short = reuse_over_time(np.array([0.0, 100.0]), np.ones(2), np.ones(2))
    assert short is not None and short.bin_s == 5.0  # a short trace gets about 30 bins


def test_a_lengths_only_table_says_why_it_has_no_arrival_pictures(tmp_path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_len,output_len\n10,5\n2000,7\n")
    figures = workload_figures(read_trace(path, arrivals_optional=True))
    assert figures.arrivals is None and figures.interarrival is None
    assert "lengths-only" in figures.unavailable["arrivals"]
    assert figures.prompt_len is not None and figures.prompt_len.total == 2


def test_failed_requests_are_left_out_of_the_lengths_only() -> None:
    trace = _trace(arrival_s=[0.0, 1.0, 2.0], prompt_len=[10, 20, 5000],
                   output_len=[1, 2, 3], status=["ok", "ok", "error"])
    figures = workload_figures(trace)
    assert figures.prompt_len is not None and figures.prompt_len.total == 2
    assert figures.arrivals is not None
    assert sum(figures.arrivals.requests_per_s) * figures.arrivals.bin_s == pytest.approx(3)


def test_azure_code_trace_bursts_are_found_and_its_gaps_are_far_from_poisson() -> None:
    trace = read_trace(shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    figures = workload_figures(trace)
    arrivals, gaps = figures.arrivals, figures.interarrival
    assert arrivals is not None and gaps is not None
    assert arrivals.bin_s == 10.0
    assert sum(arrivals.requests_per_s) * 10.0 == pytest.approx(8819)
    assert arrivals.peak_rate_rps > 10 * arrivals.mean_rate_rps
    assert len(arrivals.bursts) >= 10
    assert gaps.cv == pytest.approx(13.15, abs=0.01)  # the profile's interarrival CV
    assert gaps.ks_distance > 0.4
    assert figures.prompt_len is not None and figures.prompt_len.log_x


def test_mooncake_conversation_reuse_over_time_matches_the_replay() -> None:
    from yaotu_trace.prefix import effective_rules, replay_trace_with_requests

    trace = read_trace(shared_trace("mooncake/conversation_trace.jsonl"), lazy_content=False)
    rules, preset, notes = effective_rules(trace)
    summary, table = replay_trace_with_requests(trace, rules, preset=preset, notes=notes)
    figures = workload_figures(trace, table.to_columns()["hit_tokens"])
    reuse = figures.reuse_over_time
    assert reuse is not None and reuse.bin_s == 60.0
    assert reuse.overall_hit_ratio == pytest.approx(summary.to_dict()["hit_ratio"])
    assert sum(reuse.prompt_tokens) == int(trace.requests["prompt_len"].sum())
    # A cold cache warms: the first minute reuses less than the trace as a whole.
    assert reuse.hit_ratio[0] < reuse.overall_hit_ratio
