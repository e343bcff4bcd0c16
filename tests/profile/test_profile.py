"""The workload profile: hand-checked small cases and the public traces' published shapes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import shared_trace

from yaotu_trace.cli import main
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.profile.workload import arrival_profile, profile_trace


def _trace(**columns: object):
    return normalize(RawTrace(requests=pd.DataFrame(columns), format_name="test"), "t.jsonl")


def test_arrival_profile_hand_checked() -> None:
    # GIVEN arrivals 0, 0.5, 1.0, 1.2, 4.0 s: gaps 0.5, 0.5, 0.2, 2.8 (mean 1.0)
    profile = arrival_profile(np.array([0.0, 0.5, 1.0, 1.2, 4.0]))
    # THEN
    assert profile.span_s == 4.0
    assert profile.mean_rate_rps == pytest.approx(5 / 4)
    assert profile.peak_rps == 2  # bins [0,1): 0, 0.5; [1,2): 1.0, 1.2
    assert profile.peak_to_mean == pytest.approx(2 / 1.25)
    assert profile.interarrival_cv == pytest.approx(np.std([0.5, 0.5, 0.2, 2.8]) / 1.0)
    assert profile.longest_gap_s == pytest.approx(2.8)
    assert profile.median_gap_s == pytest.approx(0.5)


def test_timing_profile_hand_checked() -> None:
    trace = _trace(
        arrival_s=[0.0, 1.0, 2.0],
        prompt_len=[10, 20, 30],
        output_len=[3, 2, 1],
        scheduled_s=[0.5, 1.0, 4.0],
        first_token_s=[1.0, 1.5, 5.0],
        finish_s=[2.0, 3.0, 5.0],
        token_times_s=[[1.0, 1.5, 2.0], [1.5, 3.0], [5.0]],
        num_preemptions=[0, 2, 0],
        cached_tokens=[0, 10, 20],
    )
    timing = profile_trace(trace).timing
    assert timing is not None
    assert timing.queue_time_s.p50 == pytest.approx(0.5)  # 0.5, 0.0, 2.0
    assert timing.ttft_s.max == pytest.approx(3.0)
    # Gaps inside requests only: 0.5, 0.5 and 1.5; never 1.5 → 1.5 across requests.
    assert timing.itl_s.count == 3
    assert timing.itl_s.max == pytest.approx(1.5)
    # In flight: [0,2), [1,3), [2,5): at most 2 at once (an end frees its slot first).
    assert timing.concurrency_max == 2
    assert timing.concurrency_mean == pytest.approx((2 + 2 + 3) / 5)
    assert (timing.preempted_requests, timing.preemptions_total) == (1, 2)
    assert timing.cached_token_share == pytest.approx(30 / 60)
    assert timing.cached_by_idle is None  # no sessions


def test_cached_tokens_by_session_idle_time_hand_checked() -> None:
    # GIVEN two sessions: a at 0, 30 s, 150 s (idle 30 s, then 2 min), 1,000 s (idle 850 s);
    # b at 10 s and 7,210 s (idle 2 h), in file order by arrival; a session-less request
    trace = _trace(
        arrival_s=[0.0, 10.0, 30.0, 150.0, 1000.0, 7000.0, 7210.0],
        session_id=["a", "b", "a", "a", "a", None, "b"],
        prompt_len=[100, 100, 200, 300, 400, 50, 500],
        output_len=[1] * 7,
        cached_tokens=[0, 0, 180, 270, 0, 0, 20],
    )
    buckets = profile_trace(trace).timing.cached_by_idle
    got = [(b.idle_from_s, b.idle_to_s, b.requests, b.prompt_tokens, b.cached_tokens)
           for b in buckets]
    # THEN each request falls in its bucket; the empty ones are left out
    assert got == [(None, None, 2, 200, 0),          # the first of a and of b
                   (0.0, 60.0, 1, 200, 180),         # a after 30 s
                   (60.0, 300.0, 1, 300, 270),       # a after 120 s
                   (300.0, 3600.0, 1, 400, 0),       # a after 850 s: the cache had expired
                   (3600.0, None, 1, 500, 20)]       # b after 2 h
    assert buckets[1].cached_share == pytest.approx(0.9)
    # a failed request is left out of the timing (and of its session's idle spells)
    failed = _trace(arrival_s=[0.0, 30.0, 40.0], session_id=["a", "a", "a"],
                    prompt_len=[100, 100, 100], output_len=[1, 1, 1],
                    cached_tokens=[0, 90, 80], status=["ok", "error", "ok"])
    idle = profile_trace(failed).timing.cached_by_idle
    assert [(b.idle_from_s, b.requests, b.cached_tokens) for b in idle] == [(None, 1, 0),
                                                                             (0.0, 1, 80)]


def test_timing_profile_absent_without_timing_columns() -> None:
    trace = _trace(arrival_s=[0.0, 1.0], prompt_len=[1, 2], output_len=[1, 1])
    assert profile_trace(trace).timing is None


def test_first_token_before_arrival_is_a_note_and_skipped() -> None:
    trace = _trace(arrival_s=[1.0, 2.0], prompt_len=[1, 2], output_len=[1, 1],
                   first_token_s=[0.5, 2.5])
    assert any("first token before arrival" in note for note in trace.notes)
    timing = profile_trace(trace).timing
    assert timing is not None and timing.ttft_s.count == 1


def test_mooncake_conversation_profile_matches_published_counts(capsys) -> None:
    path = shared_trace("mooncake/conversation_trace.jsonl")
    assert main(["analyze", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["input"]["requests"] == 12_031
    assert doc["profile"]["lengths"]["prompt_tokens_total"] == 144_793_823
    assert doc["profile"]["lengths"]["prompt_len"]["p50"] == 6_909
    assert doc["profile"]["arrivals"]["span_s"] == pytest.approx(3_536.999)


def test_azure_code_trace_is_extremely_bursty_and_conv_is_not() -> None:
    code = profile_trace(read_trace(shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")))
    conv = profile_trace(read_trace(shared_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")))
    # trace-formats.md §2.3: CV 13.2 vs 1.09; 67 vs 16 requests in the busiest second.
    assert code.arrivals.interarrival_cv == pytest.approx(13.2, abs=0.05)
    assert conv.arrivals.interarrival_cv == pytest.approx(1.09, abs=0.01)
    assert code.arrivals.peak_rps == 67
    assert conv.arrivals.peak_rps == 16
    assert code.arrivals.peak_rpm == 632
    assert code.arrivals.longest_gap_s == pytest.approx(217, abs=1)


def test_arrival_bins_equal_the_dense_count_and_need_no_dense_array() -> None:
    """Peaks and dispersion from the occupied bins only equal those of a dense bincount."""
    from yaotu_trace.profile.workload import _dispersion, _occupied_bins

    rng = np.random.default_rng(1)
    for _ in range(100):
        arrival = np.sort(rng.exponential(rng.uniform(0.01, 5), size=rng.integers(1, 2000))
                          .cumsum())
        rel = arrival - arrival[0]
        dense = np.bincount(np.floor(rel).astype(np.int64))
        counts, bins = _occupied_bins(rel, 1.0)
        assert counts.max() == dense.max() and bins == dense.size
        if dense.size > 1:
            assert _dispersion(counts, bins) == pytest.approx(dense.var() / dense.mean(),
                                                             rel=1e-12)
    far = arrival_profile(np.array([0.0, 1e9]))  # a dense count would need 8 GB
    assert far.peak_rps == 1 and far.span_s == 1e9


def test_disaggregated_profile_is_the_clients_hand_checked() -> None:
    # GIVEN two requests prefilled on p0 (first token at 1.0 and 2.0) and decoded on d0 from
    # 3.0 and 2.5 (KV moved and a decode slot waited for), and one that fell back to p0
    trace = _trace(
        arrival_s=[0.0, 1.0, 2.0],
        prompt_len=[10, 20, 30],
        output_len=[3, 3, 2],
        first_token_s=[1.0, 2.0, 2.5],
        decode_start_s=[3.0, 2.5, None],
        finish_s=[3.2, 2.9, 2.6],
        token_times_s=[[1.0, 3.1, 3.2], [2.0, 2.6, 2.9], [2.5, 2.6]],
        prefill_instance=["p0", "p0", "p0"],
        decode_instance=["d0", "d0", "p0"],
        instance=["d0", "d0", "p0"],
    )
    profile = profile_trace(trace)
    timing = profile.timing
    assert timing is not None
    # THEN TTFT is the client's: max(first_token_s, decode_start_s) − arrival = 3.0, 1.5, and
    # 0.5 for the fallback (no hand-off)
    assert timing.ttft_s.max == pytest.approx(3.0) and timing.ttft_s.min == pytest.approx(0.5)
    assert timing.ttft_source is not None
    # the hand-offs (2.1 and 0.6 s to the second token) are no inter-token gaps: the gaps are
    # 0.1, 0.3 and the fallback's 0.1; the hand-off is shown apart (decode_start − first)
    assert timing.itl_s.count == 3 and timing.itl_s.max == pytest.approx(0.3)
    assert timing.handoff_s is not None and timing.handoff_s.max == pytest.approx(2.0)
    assert timing.handoff_s.count == 2
    # p0 and d0 are two instances: one prefill, one decode
    pop = profile.population
    assert (pop.instances, pop.prefill_instances, pop.decode_instances) == (2, 1, 1)


def test_colocated_profile_keeps_the_first_token_and_every_gap() -> None:
    trace = _trace(arrival_s=[0.0], prompt_len=[10], output_len=[3], first_token_s=[1.0],
                   token_times_s=[[1.0, 3.1, 3.2]], instance=["i0"])
    timing = profile_trace(trace).timing
    assert timing is not None and timing.ttft_source is None and timing.handoff_s is None
    assert timing.itl_s.count == 2 and timing.itl_s.max == pytest.approx(2.1)
    assert profile_trace(trace).population.prefill_instances is None
