"""`trace simulate --pd`: the per-request KV transfer and decode start it writes, and the
placement findings `trace diagnose` draws from a disaggregated run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.cli import main
from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.errors import ExitCode
from yaotu_trace.sim import RequestArrays, SimConfig, StepCost, simulate_requests
from yaotu_trace.sim.generate import GenerateOptions, generate_requests
from yaotu_trace.sim.scenario import Scenario as SimScenario
from yaotu_trace.sim.summary import run_scenario
from yaotu_trace.sim.workloads import WorkloadKind

LLAMA_8B_KV_BYTES = 131072  # 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes


def one_request(layerwise: bool) -> Any:
    cfg = SimConfig(kv_blocks=100, block_size_tokens=4, max_num_seqs=8, max_batched_tokens=16,
                    pd=(1, 1), link_bytes_per_s=1000.0, link_latency_s=0.5,
                    layerwise_overlap=layerwise, layers=32,
                    step_cost=StepCost.fixed(1.0, 0.0, kv_bytes_per_token=100.0))
    requests = RequestArrays(arrival_s=np.array([0.0]), prompt_tokens=np.array([10]),
                             output_tokens=np.array([3]))
    return simulate_requests(requests, cfg)


def test_transfer_and_decode_start_without_layerwise_overlap() -> None:
    # prefill on p0 [0, 1]; 10 tokens × 100 B / 1000 B/s + α 0.5 s = 1.5 s; on d0 at 2.5 s
    r = one_request(layerwise=False)
    assert r.kv_transfer_s[0] == pytest.approx(1.5)
    assert r.decode_start_s[0] == pytest.approx(2.5)
    assert r.first_token_s[0] == pytest.approx(1.0)


def test_layerwise_overlap_counts_only_the_transfer_left_after_the_prefill() -> None:
    # ready = max(1 + 0.5 + 1/32, 0 + 0.5 + 1) = 1.53125: 0.53125 s after the first token
    r = one_request(layerwise=True)
    assert r.kv_transfer_s[0] == pytest.approx(0.53125)
    assert r.decode_start_s[0] == pytest.approx(1.53125)


def long_prefill_trace(requests: int = 60) -> Trace:
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.LONG_PREFILL, seed=2,
                                              requests=requests))
    return normalize(RawTrace(requests=table, format_name="canonical"), "long-prefill")


def run(trace: Trace, **options: Any) -> Trace:
    from dataclasses import replace

    sim = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100", **options))
    out = normalize(RawTrace(requests=sim.requests, format_name="canonical"), "sim")
    return replace(out, steps=StepLog.from_frame(sim.steps, "steps"))


def diagnosed(sim: Trace, link_gbps: float) -> dict[str, Any]:
    settings = EngineSettings(kv_bytes_per_token=LLAMA_8B_KV_BYTES, link_gbps=link_gbps)
    doc: dict[str, Any] = diagnose_trace(sim, settings=settings).to_dict()
    return doc


def placement_axis(sim: Trace, link_gbps: float) -> dict[str, Any]:
    doc = diagnosed(sim, link_gbps)
    axis: dict[str, Any] = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    return axis


@pytest.fixture(scope="module")
def trace() -> Trace:
    return long_prefill_trace()


def test_simulated_transfer_is_alpha_plus_bytes_over_the_link(trace: Trace) -> None:
    sim = run(trace, pd="1:1", link_gbps=1.0, layerwise_overlap=False)
    df = sim.requests
    handed = df["decode_instance"].notna().to_numpy()
    assert handed.sum() > 0
    prompt = df["prompt_len"].to_numpy(dtype=float)[handed]
    # α = 0.57 ms; bytes × 8 / (1 Gb/s × 1e9)
    expected = 0.00057 + prompt * LLAMA_8B_KV_BYTES * 8 / 1e9
    np.testing.assert_allclose(df["kv_transfer_s"].to_numpy()[handed], expected, rtol=1e-9)
    # the decode instance starts no earlier than the KV arrives
    ready = df["first_token_s"].to_numpy()[handed] + expected
    assert (df["decode_start_s"].to_numpy()[handed] >= ready - 1e-9).all()


def test_slow_link_is_a_kv_transfer_finding_and_a_fast_one_is_not(trace: Trace) -> None:
    doc = diagnosed(run(trace, pd="1:1", link_gbps=1.0), 1.0)
    slow = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    ids = {f["id"] for f in slow["findings"]}
    assert {"D007", "D008"} <= ids and slow["cause"] == "kv_transfer"
    summary = doc["verdict"]["summary"]
    assert summary.startswith("verdict: pd_interference (kv_transfer): ")
    assert summary.endswith("of TTFT spent moving KV")
    assert "the KV link sets TTFT" in doc["verdict"]["reason"]
    assert slow["metrics"]["placement"]["transfer_ttft_share"] > 0.5
    fast = placement_axis(run(trace, pd="1:1", link_gbps=400.0), 400.0)
    assert not {"D007", "D008"} & {f["id"] for f in fast["findings"]}
    assert fast["metrics"]["placement"]["transfer_ttft_share"] < 0.1


def test_prefill_heavy_load_on_one_prefill_and_three_decode_instances_is_pd_ratio(
    trace: Trace,
) -> None:
    axis = placement_axis(run(trace, pd="1:3", link_gbps=400.0), 400.0)
    hit = next(f for f in axis["findings"] if f["id"] == "D009")
    move = next(e for e in hit["evidence"] if e["name"] == "move_instances")
    assert move["value"] == "decode → prefill"
    assert axis["cause"] == "pd_ratio"


def test_decode_heavy_load_on_three_prefill_and_one_decode_instance_is_pd_ratio() -> None:
    # Short chat prompts at 20 req/s: three prefill instances idle while the one decode
    # instance, capped at 16 running requests, makes the handed-off requests wait.
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.CHAT, seed=1, requests=200,
                                     rate_per_s=20.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "chat")
    axis = placement_axis(run(trace, pd="3:1", max_num_seqs=16), 400.0)
    pm = axis["metrics"]["placement"]
    assert pm["decode_wait_share"] > 0.5 and pm["prefill_busy_share"] < 0.5
    hit = next(f for f in axis["findings"] if f["id"] == "D009")
    move = next(e for e in hit["evidence"] if e["name"] == "move_instances")
    assert move["value"] == "prefill → decode"


def test_the_step_log_of_both_pools_belongs_to_the_trace(
    trace: Trace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The prefill instances are named in prefill_instance only: no "never names" note.
    sim = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100", pd="1:1"))
    write_trace(sim.requests, tmp_path / "sim.parquet")
    write_trace(sim.steps, tmp_path / "steps.parquet")
    code = main(["diagnose", str(tmp_path / "sim.parquet"), "--steps",
                 str(tmp_path / "steps.parquet"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    notes = json.loads(out)["input"]["notes"]
    assert not any("never names" in n for n in notes)
