"""Observed against replayed over time (`prefix/reconcile.py`), on captures SGLang's own
exporter wrote: one where the engine's cache was flushed mid-run, one where it was not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

from yaotu_trace.commands.check import check
from yaotu_trace.errors import ConfigError
from yaotu_trace.gate.fail_on import ObservedGate, parse_fail_on
from yaotu_trace.ingest.load import read_trace
from yaotu_trace.prefix.reconcile import reconcile
from yaotu_trace.prefix.trace import replay_trace

SGLANG = FIXTURES / "captures" / "sglang"


def test_a_flushed_cache_is_a_shortfall_stretch_with_its_reset_time() -> None:
    r = replay_trace(read_trace(SGLANG / "metrics_flush")).reconciliation
    assert r is not None and r.shortfall is not None
    # The engine's cache was flushed 300 s after 09:55:00, 281.9 s after the first arrival.
    assert r.shortfall.start_s < 300 - 18.091 < r.shortfall.end_s
    assert (r.differing_requests, r.below_tokens, r.above_tokens) == (4, 418, 0)
    assert [x.cause for x in r.reasons] == ["reset"]
    assert "25 of 25 requests agree exactly" in r.reasons[0].basis
    assert r.largest[0].request_id == "conv6-turn2" and r.largest[0].observed_hit_tokens == 0


def test_agreeing_counts_give_no_shortfall_and_no_reason() -> None:
    r = replay_trace(read_trace(SGLANG / "metrics_agree")).reconciliation
    assert r is not None
    assert (r.shortfall, r.differing_requests, r.reasons) == (None, 0, ())
    assert sum(w.observed_hit_tokens for w in r.windows) == 6615


def test_observed_above_the_replay_is_a_counting_reason_not_a_shortfall() -> None:
    t = np.arange(20, dtype=np.float64)
    hits = np.full(20, 10)
    r = reconcile(t, np.array([f"r{i}" for i in range(20)], dtype=object),
                  (hits + 5).astype(np.float64), hits, np.full(20, 100))
    assert r is not None and r.shortfall is None
    assert [x.cause for x in r.reasons] == ["counting"]


def test_a_shortfall_spread_over_the_run_points_at_capacity_and_routing() -> None:
    t = np.arange(20, dtype=np.float64)
    hits = np.full(20, 50)
    observed = hits.astype(np.float64)
    observed[::2] = 0  # every other request, from the first: no clean stretch before it
    r = reconcile(t, np.array([f"r{i}" for i in range(20)], dtype=object), observed, hits,
                  np.full(20, 100), instances=2)
    assert r is not None and r.shortfall is not None
    assert (r.shortfall.start_s, r.shortfall.end_s) == (0.0, 19.0)
    assert [x.cause for x in r.reasons] == ["capacity", "routing"]


def test_the_margins_are_both_needed() -> None:
    t = np.arange(10, dtype=np.float64)
    hits = np.full(10, 500)
    observed = hits - 30.0  # 3 points of a 1,000-token prompt, 6 % of the replayed hits
    r = reconcile(t, np.array([f"r{i}" for i in range(10)], dtype=object), observed, hits,
                  np.full(10, 1000))
    assert r is not None and r.shortfall is None
    loose = reconcile(t, np.array([f"r{i}" for i in range(10)], dtype=object), observed, hits,
                      np.full(10, 1000), relative=0.05)
    assert loose is not None and loose.shortfall is not None


def test_check_fails_on_the_flushed_capture_naming_the_stretch() -> None:
    section = check(SGLANG / "metrics_flush", fail_on="observed-shortfall").sections["checks"]
    assert section.failed == 1
    message = section.results[0].message
    assert "fall short of the sglang replay from 264.4 s to 317.2 s" in message
    assert "cache reset or engine restart at 283.4 s" in message


def test_check_passes_on_the_agreeing_capture() -> None:
    section = check(SGLANG / "metrics_agree", fail_on="observed-shortfall").sections["checks"]
    assert (section.passed, section.failed) == (1, 0)


def test_check_margins_are_configurable() -> None:
    assert parse_fail_on("observed-shortfall").observed == ObservedGate(0.02, 0.10)
    assert parse_fail_on("bottleneck,observed-shortfall:3:15").observed == ObservedGate(0.03,
                                                                                         0.15)
    section = check(SGLANG / "metrics_flush",
                    fail_on="observed-shortfall:60:10").sections["checks"]
    assert section.failed == 0
    with pytest.raises(ConfigError, match="observed-shortfall:POINTS:PERCENT"):
        parse_fail_on("observed-shortfall:two")


def test_check_refuses_a_trace_without_cached_tokens() -> None:
    vllm = SGLANG.parent / "vllm" / "vllm_requests.log"
    with pytest.raises(ConfigError, match="has none; give a capture"):
        check(vllm, fail_on="observed-shortfall")


def test_analyze_and_diagnose_show_observed_and_replayed_side_by_side() -> None:
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.commands.diagnose import diagnose

    for report in (analyze(SGLANG / "metrics_flush"), diagnose(SGLANG / "metrics_flush")):
        section = report.sections["observed_vs_replayed"]
        assert section.below_tokens == 418
        assert section.shortfall.requests == 4
        assert [r.cause for r in section.reasons] == ["reset"]


def test_a_trace_not_captured_from_an_engine_gets_no_such_section() -> None:
    from yaotu_trace.commands.analyze import analyze

    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "diag-prefix-recompute.parquet"
    assert "observed_vs_replayed" not in analyze(sample).sections
