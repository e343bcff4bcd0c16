"""SGLang 0.5.23's own telemetry, read with the numbers it was fed (tests/fixtures/telemetry/sglang;
README.md names the code: SchedulerMetricsReporter, update_running_batch, the multiprocess
collectors, a real Prometheus 2.42 server; expected.json the numbers).

The retraction counter is created at the first retraction, so it first appears at 4 in the
scrapes and the range export: counted from zero, it gives the 10 retractions fed.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from yaotu_trace.data import engine_facts
from yaotu_trace.ingest.load import read_metrics

DATA = FIXTURES / "telemetry" / "sglang"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["metrics_snapshot.prom", "scrapes",
                                  "prometheus_range_sglang.json"])
def test_counters_and_sources_come_out_as_fed(name: str) -> None:
    m = read_metrics(DATA / name)
    assert m.counter_increase("preemptions") == EXPECTED["retracted_requests_total"] == 10
    assert m.counter_increase("prompt_tokens") == EXPECTED["prompt_tokens_total"]
    cached = EXPECTED["cached_tokens_total"]
    assert m.counter_increase("cached_tokens") == sum(cached.values())
    for source, tokens in cached.items():
        assert m.counter_increase("cached_tokens", source) == tokens
    found = engine_facts.cache_sources(m)
    assert found is not None
    assert found.share("cache_device", "cache_host", "cache_storage") == pytest.approx(
        sum(cached.values()) / EXPECTED["prompt_tokens_total"])
    assert m.histogram_mean("ttft_s") == pytest.approx(EXPECTED["ttft"]["mean"], abs=1e-6)
    assert m.histogram_mean("e2e_s") == pytest.approx(EXPECTED["e2e"]["mean"], abs=1e-6)
    assert m.histogram_mean("queue_time_s") == pytest.approx(EXPECTED["queue_time"]["mean"],
                                                             abs=1e-6)
    retracted = (m.counter_increase("retracted_input_tokens") or 0) + (
        m.counter_increase("retracted_output_tokens") or 0)
    assert retracted == EXPECTED["retracted_input_tokens_total"] + EXPECTED[
        "retracted_output_tokens_total"]


def test_the_retraction_counter_born_mid_series_steps_as_fed() -> None:
    steps = read_metrics(DATA / "scrapes").counter_steps("preemptions")
    assert steps is not None
    assert steps["delta"].tolist() == EXPECTED["retraction_events"] == [4, 3, 2, 1]


@pytest.mark.parametrize("name", ["scrapes", "prometheus_range_sglang.json"])
def test_gauges_end_as_fed(name: str) -> None:
    m = read_metrics(DATA / name)
    for key, fed in (("num_waiting", "gauge_num_queue_reqs_end"),
                     ("num_running", "gauge_num_running_reqs_end")):
        g = m.gauge(key)
        assert g is not None and g["value"].iloc[-1] == EXPECTED[fed]
    kv = m.gauge("kv_usage", how="max")
    assert kv is not None and kv["value"].iloc[-1] == pytest.approx(
        EXPECTED["gauge_token_usage_end"])


def test_server_log_batches_retractions_and_cap() -> None:
    m = read_metrics(DATA / "sglang_server.log")
    log = EXPECTED["log"]
    assert m.counter_increase("preemptions") == log["sum_retracted_reqs"]
    assert m.counter_increase("cached_tokens") == log["sum_cached_token"]
    assert m.counter_increase("prompt_tokens") == log["sum_new_token"] + log["sum_cached_token"]
    for key, fed in (("num_waiting", "requests_waiting_at_end"),
                     ("num_running", "requests_running_at_end")):
        g = m.gauge(key)
        assert g is not None and g["value"].iloc[-1] == EXPECTED[fed]
    pool, cap = m.gauge("max_total_tokens"), m.gauge("max_running")
    assert pool is not None and pool["value"].iloc[0] == EXPECTED["max_total_num_tokens"]
    assert cap is not None and cap["value"].iloc[0] == 16  # max_running_requests=16


def test_one_snapshot_without_created_samples_says_what_its_totals_cover() -> None:
    """SGLang's multiprocess collector writes no _created: the totals run from the start."""
    m = read_metrics(DATA / "metrics_snapshot.prom")
    assert m.instant and not any(n.endswith("_created") for n in m.names)
    assert any("counters are totals since the engine started" in n for n in m.notes)
    assert any("num_waiting 10, num_running 11, kv_usage 0.82" in n for n in m.notes)
