"""The engines' hits by tier, read from their own telemetry and held against the tiered replay.

The fixtures (tests/fixtures/tier_metrics/README.md) are written by vLLM 0.33.0's
`PrometheusStatLogger`, SGLang 0.5.23's `TokenizerMetricsCollector` and LMCache 0.5.6's logger;
what was fed to each comes out, tier by tier.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, shared_trace

from yaotu_trace.commands.replay import replay
from yaotu_trace.data.engine_facts import TierSources, tier_sources
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.prefix.tiers.observed import ABOVE, AGREES, BELOW, compare_tiers

HERE = FIXTURES / "tier_metrics"
TRACE = FIXTURES / "engines" / "trace_mixed.parquet"


def _sums(path: Path, *columns: str) -> list[int]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return [sum(int(r[c]) for r in rows) for c in columns]


def _observed(metrics: Path, **options: object) -> dict:
    report = replay(TRACE, ReplayOptions(**options), waterfall=False, metrics=metrics)  # type: ignore[arg-type]
    return report.sections["observed_tiers"]


def test_vllm_counts_by_source_are_its_own_per_request_hits() -> None:
    """vLLM's `prompt_tokens_cached_by_source` from its stat logger: device and host are the
    sums of the same run's per-request PrefillStats, and the replay agrees with both."""
    fed = json.loads((HERE / "vllm_offload_mixed.json").read_text())
    found = tier_sources(read_metrics(HERE / "vllm_offload_mixed.metrics.txt"))
    assert found is not None and found.source == "vllm:prompt_tokens_cached_by_source_total"
    assert found.tokens["device"] == fed["gpu_hit_tokens"] == 24_816
    assert found.tokens["host"] == fed["cpu_hit_tokens"] == 25_168
    assert found.prompt_tokens == fed["prompt_tokens"]
    section = _observed(HERE / "vllm_offload_mixed.metrics.txt", preset="vllm",
                        block_size_tokens=16, capacity="66", tiers=("cpu=176blocks",))
    rows = {t["name"]: t for t in section["tiers"]}
    assert (rows["gpu"]["observed_hit_tokens"], rows["gpu"]["replayed_hit_tokens"]) == (
        24_816, 24_816)
    assert (rows["cpu"]["observed_hit_tokens"], rows["cpu"]["replayed_hit_tokens"]) == (
        25_168, 25_168)
    assert {t["verdict"] for t in section["tiers"]} == {AGREES}
    # The sources no replayed tier stands for are named with their tokens, not dropped.
    assert section["uncompared_sources"] == {"external_unspecified": 0.0, "p2p": 0.0}


def test_vllm_counts_host_and_disk_as_its_fs_tier_served_them() -> None:
    """vLLM's `prompt_tokens_cached_by_source` with its fs tier below a 64-chunk CPU tier:
    host and disk are the sums of the same run's per-request split, and the replay, with a
    disk that never evicts (as vLLM's), agrees with every source."""
    fed = json.loads((HERE / "vllm_offload_mixed_fs.json").read_text())
    found = tier_sources(read_metrics(HERE / "vllm_offload_mixed_fs.metrics.txt"))
    assert found is not None
    assert found.tokens["device"] == fed["gpu_hit_tokens"] == 24_816
    assert found.tokens["host"] == fed["cpu_hit_tokens"] == 240
    assert found.tokens["disk"] == fed["disk_hit_tokens"] == 32_768
    section = _observed(HERE / "vllm_offload_mixed_fs.metrics.txt", preset="vllm",
                        block_size_tokens=16, capacity="66",
                        tiers=("cpu=64blocks", "disk=unlimited"))
    rows = {t["name"]: (t["observed_hit_tokens"], t["replayed_hit_tokens"], t["verdict"])
            for t in section["tiers"]}
    assert rows == {"gpu": (24_816, 24_816, AGREES), "cpu": (240, 240, AGREES),
                    "disk": (32_768, 32_768, AGREES)}


def test_sglang_cached_tokens_by_cache_source_come_out_as_fed() -> None:
    device, host, storage, prompt = _sums(HERE / "sglang_hicache_mixed.requests.csv",
                                          "gpu_hit_tokens", "cpu_hit_tokens", "disk_hit_tokens",
                                          "prompt_tokens")
    found = tier_sources(read_metrics(HERE / "sglang_hicache_mixed.metrics.txt"))
    assert found is not None and found.source == "sglang:cached_tokens_total"
    assert found.tokens == {"device": device, "host": host, "storage": storage}
    assert found.prompt_tokens == prompt
    section = _observed(HERE / "sglang_hicache_mixed.metrics.txt", preset="sglang",
                        capacity="1200", tiers=("cpu=2400tokens", "disk=20000tokens"))
    rows = {t["name"]: (t["observed_hit_tokens"], t["replayed_hit_tokens"], t["verdict"])
            for t in section["tiers"]}
    assert rows == {"gpu": (device, device, AGREES), "cpu": (host, host, AGREES),
                    "disk": (storage, storage, AGREES)}
    # and the series the reader did not use are named beside the comparison, not dropped
    assert any("are not used: " in n and "sglang:num_requests_total" in n
               for n in section["notes"])


def test_lmcache_lookup_lines_come_out_as_fed(tmp_path: Path) -> None:
    gpu, cpu, prompt = _sums(HERE / "lmcache_mixed.requests.csv", "gpu_hit_tokens",
                             "cpu_hit_tokens", "prompt_tokens")
    found = tier_sources(read_metrics(HERE / "lmcache_mixed.log"))
    assert found is not None
    assert found.tokens == {"engine": gpu, "lmcache": cpu}
    assert found.prompt_tokens == prompt
    # A request looked up again (the scheduler retried it) counts once: its last line.
    lines = (HERE / "lmcache_mixed.log").read_text().splitlines(keepends=True)
    hit = next(line for line in lines if "need to load: 0" not in line)
    again = hit.replace("need to load: ", "need to load: 9").replace(
        "LMCache hit tokens: ", "LMCache hit tokens: 9")
    log = tmp_path / "retried.log"
    log.write_text("".join([again, *lines]))
    retried = tier_sources(read_metrics(log))
    assert retried is not None and retried.tokens == found.tokens
    section = _observed(HERE / "lmcache_mixed.log", preset="vllm", capacity="66",
                        tiers=("cpu=4096tokens",), tier_policy="lmcache")
    assert [(t["name"], t["observed_hit_tokens"], t["replayed_hit_tokens"], t["verdict"])
            for t in section["tiers"]] == [("gpu", gpu, gpu, AGREES), ("cpu", cpu, cpu, AGREES)]


def test_a_source_label_no_engine_writes_is_counted_and_named(tmp_path: Path) -> None:
    text = (HERE / "vllm_offload_mixed.metrics.txt").read_text()
    extra = ('vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiers-mixed",'
             'source="nvme"} 512.0\n')
    path = tmp_path / "metrics.txt"
    path.write_text(text.replace("# TYPE vllm:prompt_tokens_cached_by_source_total counter\n",
                                 "# TYPE vllm:prompt_tokens_cached_by_source_total counter\n"
                                 + extra))
    section = _observed(path, preset="vllm", block_size_tokens=16, capacity="66",
                        tiers=("cpu=176blocks",))
    assert section["unknown_sources"] == {"nvme": 512.0}
    assert any("nvme (512 tokens)" in note for note in section["notes"])


def _tiers(gpu: int, cpu: int, prompt: int = 10_000) -> dict:
    return {"prompt_tokens": prompt, "gpu_hit_tokens": gpu,
            "tiers": [{"name": "cpu", "hit_tokens": cpu}]}


@pytest.mark.parametrize(("observed_cpu", "verdict"), [
    (2_000, AGREES),  # equal
    (1_850, AGREES),  # 1.5 points short: under the 2-point margin
    (1_700, BELOW),  # 3 points and 15 % short
    (2_300, ABOVE),  # 3 points and 15 % over
])
def test_a_tier_disagrees_beyond_both_margins(observed_cpu: int, verdict: str) -> None:
    found = TierSources(tokens={"device": 3_000.0, "host": float(observed_cpu)},
                        prompt_tokens=10_000.0, source="s")
    rows = {t.name: t for t in compare_tiers(found, _tiers(3_000, 2_000)).tiers}
    assert rows["gpu"].verdict == AGREES
    assert rows["cpu"].verdict == verdict


def test_a_large_relative_gap_of_few_tokens_agrees() -> None:
    """50 % over on a tier that serves 1 % of the prompt is under the points margin."""
    found = TierSources(tokens={"host": 150.0}, prompt_tokens=10_000.0, source="s")
    rows = {t.name: t for t in compare_tiers(found, _tiers(0, 100)).tiers}
    assert rows["cpu"].verdict == AGREES
    assert rows["gpu"].verdict is None  # the engine did not say


def test_shares_are_compared_when_the_telemetry_covers_other_traffic() -> None:
    """Telemetry over twice the trace's prompt tokens, same shares: agrees."""
    found = TierSources(tokens={"device": 6_000.0, "host": 4_000.0}, prompt_tokens=20_000.0,
                        source="s")
    assert {t.verdict for t in compare_tiers(found, _tiers(3_000, 2_000)).tiers} == {AGREES}


def test_connector_loads_are_held_against_every_tier_below_the_gpu() -> None:
    found = TierSources(tokens={"local_cache_hit": 3_000.0, "external_kv_transfer": 2_500.0},
                        prompt_tokens=10_000.0, source="s")
    tiers = {"prompt_tokens": 10_000, "gpu_hit_tokens": 3_000,
             "tiers": [{"name": "cpu", "hit_tokens": 2_000}, {"name": "disk", "hit_tokens": 500}]}
    rows = {t.name: t for t in compare_tiers(found, tiers).tiers}
    assert rows["cpu+disk"].replayed_hit_tokens == 2_500
    assert rows["cpu+disk"].verdict == AGREES
    assert rows["cpu"].verdict is None


def test_metrics_without_tiers_or_residency_is_refused() -> None:
    with pytest.raises(ConfigError, match="add --residency or --tier"):
        replay(TRACE, ReplayOptions(preset="vllm", capacity="66"),
               metrics=HERE / "vllm_offload_mixed.metrics.txt")


def test_metrics_without_hits_by_tier_is_refused() -> None:
    with pytest.raises(ConfigError, match="no hits by tier"):
        replay(TRACE, ReplayOptions(preset="vllm", capacity="66", tiers=("cpu=176blocks",),
                                    block_size_tokens=16), waterfall=False,
               metrics=FIXTURES / "residency" / "vllm_mixed.metrics.txt")


def test_diagnose_holds_the_engines_hits_by_tier_against_its_tiers() -> None:
    from yaotu_trace.commands.diagnose import diagnose
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    report = diagnose(TRACE, DiagnosisOptions(
        preset="vllm", kv_capacity="66", metrics=str(HERE / "vllm_offload_mixed.metrics.txt")),
        tiers=ReplayOptions(tiers=("cpu=176blocks",)))
    rows = {t["name"]: t for t in report.sections["observed_tiers"]["tiers"]}
    assert rows["cpu"]["observed_hit_tokens"] == rows["cpu"]["replayed_hit_tokens"] == 25_168
    # what vLLM's scrape carries that the reader did not use is named beside the comparison
    assert any("are not used: vllm:admission_rejections_total" in n
               for n in report.sections["observed_tiers"]["notes"])
    # Without telemetry split by tier there is no such section, and no refusal.
    plain = diagnose(TRACE, DiagnosisOptions(preset="vllm", kv_capacity="66"),
                     tiers=ReplayOptions(tiers=("cpu=176blocks",)))
    assert "observed_tiers" not in plain.sections


def test_check_gates_on_a_tiers_gap_to_the_engine(tmp_path: Path) -> None:
    from yaotu_trace import check
    from yaotu_trace.commands.load import TraceInput
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    def gate(op: str, value: float) -> bool:
        config = tmp_path / "gap.toml"
        config.write_text('[[check]]\npath = "observed_tiers.tiers.cpu.gap_points"\n'
                          f'op = "{op}"\nvalue = {value}\n')
        report = check(TraceInput(path=TRACE), DiagnosisOptions(
            preset="vllm", kv_capacity="66",
            metrics=str(HERE / "vllm_offload_mixed.metrics.txt")), config=config,
            tiers=ReplayOptions(tiers=("cpu=176blocks",)))
        assert any("are not used: " in n for n in report.sections["observed_tiers"]["notes"])
        return bool(report.sections["checks"].failed)

    assert not gate("<=", 0.02)  # vLLM and the replay agree exactly
    assert gate(">=", 0.02)


def test_counters_of_another_run_are_refused() -> None:
    """vLLM's counters from the fixture's run (87,584 prompt tokens) against a replay of the
    Mooncake conversation trace's 144,793,823: they cannot have counted its traffic."""
    from yaotu_trace.commands.shared.tiers import observed_tiers
    from yaotu_trace.errors import TraceReadError

    metrics = read_metrics(HERE / "vllm_offload_mixed.metrics.txt")
    mooncake = {"prompt_tokens": 144_793_823, "gpu_hit_tokens": 9_310_720,
                "tiers": [{"name": "cpu", "hit_tokens": 37_821_440}]}
    with pytest.raises(TraceReadError, match="87,584 prompt tokens, under 1% of the trace's "
                                             "144,793,823"):
        observed_tiers(metrics, mooncake)
    # at a hundredth of the trace's tokens (one instance of a hundred) they are compared
    hundredth = {**mooncake, "prompt_tokens": 8_758_400}
    assert observed_tiers(metrics, hundredth) is not None


def test_counters_of_more_traffic_than_the_trace_are_refused() -> None:
    """The same counters (87,584 prompt tokens, the engine fixture's `mixed` run) against a
    replay of the 300 requests of `trace_blocks4` (about 15,349 prompt tokens): they counted
    5.7 times the trace's traffic, so their shares by tier are another mix's, and no verdict
    is given; within a warm-up's worth above the trace they are compared."""
    from yaotu_trace.commands.shared.tiers import observed_tiers
    from yaotu_trace.errors import TraceReadError

    metrics = read_metrics(HERE / "vllm_offload_mixed.metrics.txt")
    blocks4 = {"prompt_tokens": 15_349, "gpu_hit_tokens": 8_304,
               "tiers": [{"name": "cpu", "hit_tokens": 640}]}
    with pytest.raises(TraceReadError, match=r"87,584 prompt tokens, 5\.7 times the trace's "
                                             r"15,349: they counted traffic the trace does not"):
        observed_tiers(metrics, blocks4)
    warm = {**blocks4, "prompt_tokens": 60_000}  # 1.46 times
    assert observed_tiers(metrics, warm) is not None


def test_an_lmcache_log_of_another_run_is_refused(tmp_path: Path) -> None:
    """LMCache's lookup lines name each request and its tokens: the log LMCache's logger wrote
    for the engine fixture's 400 requests, held against the bundled chat sample (1,000 other
    requests, whose prompt tokens are 16 times the log's), is refused in one line instead of
    giving 'observed above replayed' verdicts."""
    from yaotu_trace.errors import TraceReadError

    chat = FIXTURES.parents[1] / "sample_traces" / "chat.parquet"
    options = ReplayOptions(preset="vllm", capacity="200", tiers=("cpu=2048tokens",),
                            tier_policy="lmcache")
    with pytest.raises(TraceReadError, match=r"400 LMCache lookups are of another run: 0% of "
                                             r"their request ids and \d+% of their token"):
        replay(chat, options, waterfall=False, metrics=HERE / "lmcache_mixed.log")
    # the same run's log whose request ids are written otherwise (vLLM's own ids, say) is
    # recognised by its requests' token counts, and compared
    renamed = tmp_path / "renamed.log"
    renamed.write_text((HERE / "lmcache_mixed.log").read_text().replace("Reqid: mixed-",
                                                                        "Reqid: cmpl-"))
    section = _observed(renamed, preset="vllm", capacity="66", tiers=("cpu=4096tokens",),
                        tier_policy="lmcache")
    assert {t["verdict"] for t in section["tiers"]} == {AGREES}


def test_a_replay_refuses_the_metrics_of_another_run_in_one_line() -> None:
    path = shared_trace("mooncake/conversation_trace.jsonl")
    from yaotu_trace.errors import TraceReadError

    with pytest.raises(TraceReadError, match="did not count this trace's traffic"):
        replay(path, ReplayOptions(preset="vllm", capacity="2700", tiers=("cpu=26000blocks",)),
               waterfall=False, metrics=HERE / "vllm_offload_mixed.metrics.txt")


def test_a_replayed_cpu_tier_other_than_the_engines_is_refused() -> None:
    """vLLM's scrape states its CPU tier (`vllm:kv_offload_config_info`: 176 chunks, 2,816
    tokens); a replay of another size is not the run the counters counted."""
    options = {"preset": "vllm", "block_size_tokens": 16, "capacity": "66"}
    with pytest.raises(ConfigError, match=r"the engine's CPU tier held 2,816 tokens "
                                          r"\(vllm:kv_offload_config_info\), the replayed one 640"):
        _observed(HERE / "vllm_offload_mixed.metrics.txt", tiers=("cpu=40blocks",), **options)
    # the same size given in tokens is the engine's tier, and is held against it
    section = _observed(HERE / "vllm_offload_mixed.metrics.txt", tiers=("cpu=2816tok",),
                        **options)
    assert {t["verdict"] for t in section["tiers"]} == {AGREES}


@pytest.mark.parametrize(("name", "tiers"), [
    ("vllm_offload_mixed", ("cpu=176blocks",)),
    ("vllm_offload_mixed_fs", ("cpu=64blocks", "disk=unlimited")),
])
def test_vllm_vcrs_sidecar_of_the_same_run_gives_the_same_hits_by_tier(
        name: str, tiers: tuple[str, ...]) -> None:
    """The same run's `SchedulerStats`, as vllm-vcr's step-stats sidecar holds them, read as
    --metrics: the hits by source vLLM's logger counts from them (device from the prefix cache,
    the connector's by tier) are the scrape's, and held against the replay alike."""
    fed = json.loads((HERE / f"{name}.json").read_text())
    sidecar = HERE / f"{name}.step-stats.jsonl.gz"
    found = tier_sources(read_metrics(sidecar))
    assert found is not None
    assert found.tokens["device"] == fed["gpu_hit_tokens"]
    assert found.tokens["host"] == fed["cpu_hit_tokens"]
    assert found.tokens.get("disk", 0) == fed.get("disk_hit_tokens", 0)
    options = {"preset": "vllm", "block_size_tokens": 16, "capacity": "66", "tiers": tiers}
    from_sidecar = _observed(sidecar, **options)["tiers"]
    from_scrape = _observed(HERE / f"{name}.metrics.txt", **options)["tiers"]
    assert [(t["name"], t["observed_hit_tokens"], t["verdict"]) for t in from_sidecar] == \
        [(t["name"], t["observed_hit_tokens"], t["verdict"]) for t in from_scrape]
    assert {t["verdict"] for t in from_sidecar} == {AGREES}
