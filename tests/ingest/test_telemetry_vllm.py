"""vLLM 0.33.0's own telemetry, read with the numbers it was fed (tests/fixtures/telemetry/vllm).

Every file there was written by vLLM's own stat loggers (`LoggingStatLogger`,
`PrometheusStatLogger`, `KVConnectorLogging`) or by a real Prometheus 2.42 server scraping them,
fed a known sequence whose numbers `expected.json` holds (README.md says which code wrote what).
A reader is right when those numbers come out; a file it cannot read right is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, run_json

from yaotu_trace.data import engine_facts
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest.load import read_metrics

DATA = FIXTURES / "telemetry" / "vllm"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
E0, E1, KV = EXPECTED["engine0"], EXPECTED["engine1"], EXPECTED["kv_decode"]


def _last(m: EngineMetrics, key: str, how: str = "sum") -> float:
    g = m.gauge(key, how=how)
    assert g is not None
    return float(g["value"].iloc[-1])


@pytest.mark.parametrize("name", ["metrics_one_engine.prom", "scrapes",
                                  "prometheus_range_vllm.json", "prometheus_instant_vllm.json"])
def test_counters_and_histograms_come_out_as_fed(name: str) -> None:
    """One saved /metrics body (counters are totals since _created), a folder of scrapes, and
    a real Prometheus 2.x range and instant export (vllm_… names) all give engine 0's totals."""
    m = read_metrics(DATA / name)
    assert m.counter_increase("preemptions") == E0["preemptions_total"] == 16
    assert m.counter_increase("prefix_queries") == E0["prefix_cache_queries_total"]
    assert m.counter_increase("prefix_hits") == E0["prefix_cache_hits_total"]
    assert m.histogram_mean("ttft_s") == pytest.approx(E0["ttft_mean_s"])
    assert m.histogram_mean("itl_s") == pytest.approx(E0["itl_mean_s"])
    assert m.histogram_mean("e2e_s") == pytest.approx(E0["e2e_mean_s"])
    per_request = engine_facts.request_preemptions(m)
    assert per_request is not None
    assert per_request.requests == E0["requests_finished"]
    fed = sum(int(k) * v for k, v in E0["finished_request_preemptions"].items())
    assert per_request.preemptions == fed
    sources = engine_facts.cache_sources(m)
    assert sources is not None and sources.tokens == E0["prompt_tokens_by_source"]


@pytest.mark.parametrize("name", ["scrapes", "prometheus_range_vllm.json"])
def test_gauges_over_time_end_and_peak_as_fed(name: str) -> None:
    m = read_metrics(DATA / name)
    assert _last(m, "num_waiting") == E0["final_waiting"]
    assert _last(m, "num_running") == E0["final_running"]
    assert _last(m, "kv_usage", "max") == pytest.approx(E0["final_kv_usage"])
    kv = m.gauge("kv_usage", how="max")
    assert kv is not None and float(kv["value"].max()) == pytest.approx(E0["max_kv_usage"])
    assert _last(m, "num_waiting_by_reason") == E0["final_waiting"]
    deferred = m.gauge("num_waiting_by_reason", value="deferred")
    assert deferred is not None and deferred["value"].iloc[-1] == E0["final_waiting_deferred"]


def test_prometheus_2x_names_are_read_under_the_engine_names_with_a_note() -> None:
    m = read_metrics(DATA / "prometheus_range_vllm.json")
    assert "vllm:num_preemptions_total" in m.names
    assert not any(n.startswith("vllm_") for n in m.names)
    assert any("as Prometheus 2.x stores them are read under the engine's names" in n
               for n in m.notes)


def test_unused_series_are_counted_and_named() -> None:
    m = read_metrics(DATA / "metrics_one_engine.prom")
    note = next(n for n in m.notes if "are not used" in n)
    # vllm:prompt_tokens_cached_by_source (5 series) is read: the hits by tier (--tier).
    assert note.startswith("141 series of 39 name(s) are not used: vllm:admission_rejections")
    assert "and 34 more" in note
    assert "prompt_tokens_cached_by_source" not in note


def test_one_instant_judges_no_gauge_and_names_its_values() -> None:
    """A saved /metrics body is one instant: its gauges cannot show a queue or a KV usage at
    preemption, so they are named with their values and not judged."""
    m = read_metrics(DATA / "metrics_one_engine.prom")
    assert m.instant and m.gauge("num_waiting") is None and m.gauge("kv_usage") is None
    assert any(f"num_waiting {E0['final_waiting']}, num_running {E0['final_running']}, "
               f"kv_usage {E0['final_kv_usage']}" in n for n in m.notes)
    assert m.gauge("max_total_tokens") is not None  # the pool's size holds for the process


def test_two_engines_sum_their_counters() -> None:
    m = read_metrics(DATA / "metrics_two_engines.prom")
    assert m.counter_increase("preemptions") == E0["preemptions_total"] + E1["preemptions_total"]
    hits = E0["prefix_cache_hits_total"] + E1["prefix_cache_hits_total"]
    queries = E0["prefix_cache_queries_total"] + E1["prefix_cache_queries_total"]
    assert m.counter_increase("prefix_hits") == hits and m.counter_increase(
        "prefix_queries") == queries


@pytest.mark.parametrize("name", ["vllm_server.log", "vllm_server_cpu.log",
                                  "vllm_server_xpu.log", "vllm_server_json.log"])
def test_server_log_gauges_on_any_device_and_formatter(name: str) -> None:
    """The stats line names the KV pool after its device (GPU, CPU, XPU); the JSON formatter
    writes the same message with an `asctime`."""
    m = read_metrics(DATA / name, year=2026)
    assert _last(m, "num_waiting") == E0["final_waiting"]
    assert _last(m, "num_running") == E0["final_running"]
    kv = m.gauge("kv_usage", how="max")
    assert kv is not None and float(kv["value"].max()) == pytest.approx(E0["max_kv_usage"])
    pool = m.gauge("max_total_tokens")
    assert pool is not None and pool["value"].iloc[0] == 32768
    reasons = engine_facts.waiting_reasons(m)
    assert reasons is not None
    deferred = m.gauge("num_waiting_by_reason", value="deferred")
    assert deferred is not None and deferred["value"].iloc[-1] == E0["final_waiting_deferred"]
    # vLLM's stats line gives the hit rate over its recent requests: the last line's
    assert engine_facts.gauge_hit_rate(m) == pytest.approx(E0["prefix_cache_hit_rate"])


def test_json_log_without_a_time_is_refused_with_the_fix() -> None:
    with pytest.raises(TraceReadError, match=r"hold engine stats but no time field.*asctime"):
        read_metrics(DATA / "vllm_server_json_docs_example.log")


def test_stats_line_preemptions_are_summed_and_absent_means_unknown() -> None:
    """vLLM 0.33.0's stats line drops its 'Preemptions: N' part (reset before it is read;
    vllm PR #38452), so a log without the part gives no preemption count, not zero; with
    the fix, the parts add up to the 16 fed."""
    assert read_metrics(DATA / "vllm_server.log", year=2026).name_of("preemptions") is None
    m = read_metrics(DATA / "vllm_server_preemptions_pr38452.log", year=2026)
    assert m.counter_increase("preemptions") == E0["preemptions_total"]


def test_kv_transfer_line_and_external_cache() -> None:
    m = read_metrics(DATA / "vllm_kv_transfer.log", year=2026)
    moved = engine_facts.kv_transfers(m)
    assert moved is not None
    assert moved.transfers == 10 and moved.mean_ms == pytest.approx(2.9)
    assert moved.mean_mb == pytest.approx(5.6)
    prom = read_metrics(DATA / "metrics_kv_transfer.prom")
    assert engine_facts.external_hit_rate(prom) == pytest.approx(
        KV["external_prefix_cache_hits_total"] / KV["external_prefix_cache_queries_total"])
    sources = engine_facts.cache_sources(prom)
    assert sources is not None and sources.tokens == KV["prompt_tokens_by_source"]


def test_two_engine_log_sums_running_and_averages_last_rates() -> None:
    m = read_metrics(DATA / "vllm_server_dp2.log", year=2026)
    assert _last(m, "num_running") == E0["final_running"] + E1["final_running"]
    rate = engine_facts.gauge_hit_rate(m)
    assert rate == pytest.approx((E0["prefix_cache_hit_rate"] + E1["prefix_cache_hit_rate"]) / 2)


def test_diagnose_reads_the_sources_into_the_axes(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(["diagnose", "--metrics", str(DATA / "metrics_kv_transfer.prom"),
                    "--format", "json"], capsys)
    assert isinstance(doc["axes"], list)
    axes = {axis["name"]: axis for axis in doc["axes"]}
    prefix = axes["prefix_reuse"]["metrics"]
    total = sum(KV["prompt_tokens_by_source"].values())
    assert prefix["observed_hit_rate"] == pytest.approx(
        1 - KV["prompt_tokens_by_source"]["local_compute"] / total)
    assert prefix["observed_hit_sources"]["external_kv_transfer"] == pytest.approx(
        KV["prompt_tokens_by_source"]["external_kv_transfer"] / total)
    assert axes["pd_interference"]["metrics"]["external_kv_token_share"] == pytest.approx(
        KV["prompt_tokens_by_source"]["external_kv_transfer"] / total)


def test_one_instant_of_gauges_only_is_refused(tmp_path: Path) -> None:
    """A gauge at one instant shows nothing over time, and with no counter beside it nothing
    is left to judge: refused, not judged "undecided" on an empty export."""
    path = tmp_path / "one.csv"
    path.write_text("timestamp,metric,labels,value\n"
                    "1732931200,vllm:num_requests_waiting,,3\n"
                    "1732931200,vllm:kv_cache_usage_perc,,0.5\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"one instant of gauges only \(num_waiting 3, "
                                             r"kv_usage 0.5\)"):
        read_metrics(path)
