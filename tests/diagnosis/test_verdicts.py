"""`trace diagnose` names the right principal axis and cause on traces with one problem each.

The sample traces `sample_traces/diag-*.parquet` (and their step logs) come from `trace generate`
(see sample_traces/README.md); the public traces without engine timing (Mooncake, Azure) must
leave the timing axes undecided, name the missing columns and still decide what they can.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import shared_trace
from diag_factories import make_trace

from yaotu_trace.cli import main
from yaotu_trace.commands.diagnose import diagnose_trace as diagnose
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ExitCode
from yaotu_trace.sim.generate import GenerateOptions, generate_requests
from yaotu_trace.sim.scenario import Scenario as SimScenario
from yaotu_trace.sim.summary import run_scenario
from yaotu_trace.sim.workloads import WorkloadKind

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TIMING_AXES = ("queueing", "kv_memory", "pd_interference")


def diagnose_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["diagnose", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def sample(name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    return diagnose_json([str(SAMPLES / f"{name}.parquet"), "--steps",
                          str(SAMPLES / f"{name}.steps.parquet"), *extra], capsys)


def axes_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in doc["axes"]}


@pytest.mark.parametrize(
    ("name", "principal", "cause"),
    [
        ("diag-burst", "queueing", "arrival_burst"),
        ("diag-dispatch", "queueing", "dispatch_overhead"),
        ("diag-kv-churn", "kv_memory", "kv_capacity"),
        ("diag-long-prefill", "pd_interference", "prefill_interference"),
        ("diag-prefix-recompute", "prefix_reuse", "prefix_recompute"),
    ],
)
def test_sample_with_one_problem_names_its_principal_axis_and_cause(
    name: str, principal: str, cause: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a trace with one dominant problem and its step log
    # WHEN it is diagnosed
    doc = sample(name, capsys)
    # THEN the verdict names that axis and cause, and the axis itself says bottleneck
    assert doc["principal"] == principal
    assert doc["verdict"]["principal_axis"] == principal
    assert doc["verdict"]["principal_cause"] == cause
    assert doc["verdict"]["summary"].startswith(f"verdict: {principal} ({cause})")
    assert axes_of(doc)[principal]["status"] == "bottleneck"
    # AND the engine's step log passes the Little's-law consistency check
    assert "Q000" not in [f["id"] for f in doc["findings"]]


def test_healthy_sample_names_no_principal(capsys: pytest.CaptureFixture[str]) -> None:
    doc = sample("diag-healthy", capsys)
    assert doc["principal"] is None
    assert doc["verdict"]["summary"].startswith("verdict: no principal bottleneck")
    assert all(a["status"] == "ok" for a in doc["axes"])
    assert [e for e in doc["ledger"] if e["recommended"]] == []


def test_symptoms_follow_their_cause(capsys: pytest.CaptureFixture[str]) -> None:
    # Preemption churn also makes a queue and decode stalls: the verdict follows the cause.
    churn = sample("diag-kv-churn", capsys)
    axes = axes_of(churn)
    assert axes["queueing"]["status"] == "bottleneck"
    assert churn["principal"] == "kv_memory"
    assert "causes queueing, pd_interference" in churn["verdict"]["summary"]
    # Stalls while a shared prefix is prefilled again and again are prefix_reuse.
    prefix = sample("diag-prefix-recompute", capsys)
    assert axes_of(prefix)["pd_interference"]["status"] == "bottleneck"
    assert prefix["principal"] == "prefix_reuse"
    assert "pd_interference" in prefix["verdict"]["summary"]


@pytest.mark.parametrize("name", ["diag-kv-churn", "diag-prefix-recompute"])
def test_disaggregation_waits_until_preemption_and_recompute_are_ruled_out(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = sample(name, capsys, "--model", "Llama-3.1-8B")
    split = next(e for e in doc["ledger"] if e["remedy"] == "pd_disaggregation")
    assert split["recommended"] is False and split["withheld_because"]


def test_long_prefill_ledger_in_bytes_and_seconds_with_model_gpu_and_link(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the long-prefill sample and the model, GPU and link
    doc = sample("diag-long-prefill", capsys, "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--link-gbps", "400")
    ledger = {e["remedy"]: e for e in doc["ledger"]}
    requests = pd.read_parquet(SAMPLES / "diag-long-prefill.parquet")
    prompt = requests["prompt_len"].to_numpy(dtype=np.float64)
    # THEN disaggregation is recommended and moves Σ prompt × KV bytes per token
    split = ledger["pd_disaggregation"]
    assert split["recommended"] is True
    adds = {q["name"]: q["value"] for q in split["adds"]}
    assert adds["network_bytes"] == pytest.approx(prompt.sum() * 131072)
    span_s = float(requests["arrival_s"].max() - requests["arrival_s"].min())
    assert adds["kv_bytes_per_s_mean"] == pytest.approx(prompt.sum() * 131072 / span_s)
    b_eff = 400e9 / 8 * 0.7
    assert adds["transfer_s_mean"] == pytest.approx(0.00057 + prompt.mean() * 131072 / b_eff)
    # AND chunking adds m − 1 steps per prompt longer than the budget τ = 512
    chunk = {q["name"]: q["value"] for q in ledger["chunked_prefill"]["adds"]}
    long = prompt[prompt > 512]
    assert chunk["extra_steps"] == float((np.ceil(long / 512) - 1).sum())


def test_kv_churn_ledger_prices_the_pool_and_the_recompute(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = sample("diag-kv-churn", capsys, "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--kv-capacity", "319")
    pool = next(e for e in doc["ledger"] if e["remedy"] == "larger_kv_pool")
    saves = {q["name"]: q for q in pool["saves"]}
    adds = {q["name"]: q for q in pool["adds"]}
    recomputed = saves["recomputed_prefill_tokens"]["value"]
    assert recomputed > 0
    # GPU-seconds = 2 · N_active · tokens / (H100 bf16 peak × MFU 0.5)
    n_active = saves["prefill_flops"]["value"] / (2 * recomputed)
    assert saves["prefill_gpu_seconds"]["value"] == pytest.approx(
        2 * n_active * recomputed / (989e12 * 0.5))
    # (peak demand − capacity) in blocks × block bytes
    blocks = adds["extra_kv_blocks"]["value"]
    assert blocks > 0
    assert adds["extra_kv_bytes"]["value"] == blocks * 16 * 131072
    assert adds["fp8_kv_capacity_tokens"]["value"] == 2 * 319 * 16


def test_ledger_without_model_is_in_tokens_and_says_what_it_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = sample("diag-kv-churn", capsys)
    pool = next(e for e in doc["ledger"] if e["remedy"] == "larger_kv_pool")
    saves = {q["name"]: q for q in pool["saves"]}
    assert saves["recomputed_prefill_tokens"]["value"] > 0
    assert saves["prefill_flops"]["value"] is None
    assert "--model" in saves["prefill_flops"]["basis"]
    assert saves["prefill_gpu_seconds"]["value"] is None
    assert "--gpu" in saves["prefill_gpu_seconds"]["basis"]


def test_table_output_leads_with_the_verdict_then_a_panel_per_axis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["diagnose", str(SAMPLES / "diag-burst.parquet"), "--steps",
                 str(SAMPLES / "diag-burst.steps.parquet")])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].startswith("verdict: queueing (arrival_burst)")
    panels = [line for line in lines if line.startswith("╭─ ")]
    assert [p.split()[1].rstrip(":") for p in panels] == ["queueing", "kv_memory",
                                                          "prefix_reuse", "pd_interference"]


# --- public traces without engine timing -------------------------------------------------


def test_mooncake_timing_axes_undecided_prefix_reuse_decided(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = diagnose_json([str(shared_trace("mooncake/conversation_trace.jsonl"))], capsys)
    axes = axes_of(doc)
    for name in TIMING_AXES:
        assert axes[name]["status"] == "insufficient_data"
    assert any("scheduled_s" in m for m in axes["queueing"]["missing"])
    assert any("num_preemptions" in m for m in axes["kv_memory"]["missing"])
    assert any("token_times_s" in m for m in axes["pd_interference"]["missing"])
    reuse = axes["prefix_reuse"]
    assert reuse["status"] in ("ok", "warning", "bottleneck")
    assert reuse["evidence"] and reuse["metrics"]["achievable_hit_rate"] > 0.3
    assert doc["principal"] is None
    summary = doc["verdict"]["summary"]
    assert f"prefix_reuse {reuse['status']}" in summary
    assert "undecided: queueing, kv_memory, pd_interference" in summary
    assert "engine timing" in doc["verdict"]["reason"]


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv",
                                  "AzureLLMInferenceTrace_conv.csv"])
def test_azure_every_axis_undecided_with_reasons(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = diagnose_json([str(shared_trace(f"azure_llm_2023/{name}"))], capsys)
    axes = axes_of(doc)
    for axis in TIMING_AXES:
        assert axes[axis]["status"] == "insufficient_data" and axes[axis]["missing"]
    # Azure has no prompt content: prefix reuse cannot be replayed, and says why.
    assert axes["prefix_reuse"]["status"] == "insufficient_data"
    assert any("prompt_tokens or prompt_block_ids" in m for m in axes["prefix_reuse"]["missing"])
    assert doc["principal"] is None
    assert doc["verdict"]["summary"] == "verdict: undecided — no axis has the data it needs"


# --- Little's law on simulated step logs ---------------------------------------------------


def test_little_law_sums_a_cluster_and_allows_for_waiting_sampled_after_admission() -> None:
    # GIVEN requests run through a 4-instance round-robin cluster under a steady queue
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.CHAT, seed=3, requests=400,
                                     rate_per_s=40.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "chat")
    run = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100", instances=4,
                                          max_num_seqs=8))
    sim = make_trace_from(run.requests, run.steps)
    # WHEN it is diagnosed
    q = next(a for a in diagnose(sim).to_dict()["axes"] if a["name"] == "queueing")
    # THEN the mean waiting count of the cluster matches λ·W̄q, and Q000 stays quiet
    m = q["metrics"]
    assert m["waiting_mean"] > 1.0
    low = min(m["little_expected_waiting"], m["little_expected_sampled"])
    high = max(m["little_expected_waiting"], m["little_expected_sampled"])
    assert low * 0.95 <= m["waiting_mean"] <= high * 1.05
    assert m["little_mismatch"] < 0.05
    assert "Q000" not in [f["id"] for f in q["findings"]]


def make_trace_from(requests: pd.DataFrame, steps: pd.DataFrame) -> Any:
    from dataclasses import replace

    from yaotu_trace.data.steplog import StepLog

    trace = normalize(RawTrace(requests=requests, format_name="canonical"), "sim")
    return replace(trace, steps=StepLog.from_frame(steps, "steps"))


def test_a_seat_cap_that_binds_with_kv_to_spare_is_batch_shape() -> None:
    """60 chat requests at 30 req/s on one engine of 4 seats (the simulator's max_num_seqs):
    every seat is taken while the rest wait, KV holds ~2 % and the step budget is idle. The
    verdict names the seat cap (Q004), not 'admission blocked, reason not in the data'."""
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.CHAT, seed=2, requests=60,
                                              rate_per_s=30.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "chat")
    run = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100", max_num_seqs=4))
    doc = diagnose(make_trace_from(run.requests, run.steps)).to_dict()
    q = next(a for a in doc["axes"] if a["name"] == "queueing")
    assert (doc["principal"], q["cause"]) == ("queueing", "batch_shape")
    found = {f["id"]: {e["name"]: e for e in f["evidence"]} for f in q["findings"]}
    assert "Q011" not in found
    ev = found["Q004"]
    assert ev["running_fill_queued"]["value"] >= 0.9 and ev["seq_cap"]["value"] == 4
    assert ev["kv_usage_queued"]["value"] < 0.1
    assert any("the seat cap is taken as the most requests seen running (4)" in n
               for n in q["notes"])


def test_a_prefill_pool_overloaded_through_the_capture_is_not_put_down_to_kv() -> None:
    """300 agentic requests (~27k-token prompts) at 8 req/s on two prefill instances and one
    decode instance over a 1 Gb/s link: the queue is the prefill pool's (~50 waiting at 15 %
    KV, every step at its 8,192-token budget); the decode instance, full of KV with ~3
    waiting, runs ten times the steps. Counted step by step across instances, the decode
    instance made it 'kv_admission'; weighed by the queue each instance held, the prefill
    pool's budget is what binds, and as the queue grows in every window with arrivals the
    capture is one burst above capacity."""
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.AGENTIC, seed=5, requests=300,
                                              rate_per_s=8.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "agentic")
    run = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100", pd="2:1",
                                          link_gbps=1.0))
    doc = diagnose(make_trace_from(run.requests, run.steps)).to_dict()
    q = next(a for a in doc["axes"] if a["name"] == "queueing")
    m = q["metrics"]
    assert q["cause"] == "arrival_burst"
    assert m["kv_blocked_queued"] < 0.1 and m["kv_usage_queued"] < 0.3
    assert m["step_fill_queued"] >= 0.9
    assert m["burst_ratio"] is None
    assert any("the capture is one burst above capacity" in n for n in q["notes"])
    # the panel's rows docs/diagnose.md quotes for this run: the pooled P75s are the decode
    # instance's, the rows where queued the prefill pool's
    from yaotu_trace.render.views.axes import metric_rows

    rows = dict(metric_rows(q))
    assert (rows["P75 step tokens / budget"], rows["P75 KV usage"]) == ("0.2 %", "93.1 %")
    assert (rows["step tokens / budget where queued"], rows["KV usage where queued"]) == (
        "95.6 %", "14.8 %")


def test_a_queue_that_is_most_of_ttft_but_little_of_latency_is_ok_and_says_so() -> None:
    """200 chat requests at 20 req/s on a 256-token step budget: the wait to be admitted is
    ~90 % of TTFT but under a fifth of latency, so no rule fires (the axis scores latency);
    the panel says what the queue is to TTFT."""
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.CHAT, seed=4, requests=200,
                                              rate_per_s=20.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "chat")
    run = run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100",
                                          max_batched_tokens=256))
    q = next(a for a in diagnose(make_trace_from(run.requests, run.steps)).to_dict()["axes"]
             if a["name"] == "queueing")
    m = q["metrics"]
    assert q["status"] == "ok" and not q["findings"]
    assert m["queue_share_of_ttft"] >= 0.5 and m["queue_share_of_latency"] < 0.2
    said = [n for n in q["notes"] if n.startswith("the queue is")]
    assert len(said) == 1
    assert f"{100 * m['queue_share_of_ttft']:.1f} % of TTFT" in said[0]
    assert "against a TTFT objective" in said[0]
    # the numbers docs/axes.md quotes for this run
    assert "89.7 % of TTFT, 0.594 s on average, but 19.9 % of latency" in said[0]


def test_little_law_two_instances_each_waiting_one_is_two_waiting() -> None:
    # Two instances each hold one waiting request over [0, 10): the cluster has 2 waiting.
    columns = {"arrival_s": [0.0, 0.0], "scheduled_s": [10.0, 10.0],
               "first_token_s": [10.5, 10.5], "finish_s": [11.0, 11.0],
               "prompt_len": [100, 100], "output_len": [10, 10], "instance": ["a", "b"]}
    starts = [0.0, 5.0, 10.0]
    steps = {"instance": ["a"] * 3 + ["b"] * 3, "start_s": starts * 2,
             "end_s": [s + 1.0 for s in starts] * 2, "num_waiting": [1, 1, 0] * 2}
    doc = diagnose(make_trace(columns, steps=steps)).to_dict()
    m = next(a for a in doc["axes"] if a["name"] == "queueing")["metrics"]
    assert m["waiting_mean"] == pytest.approx(2 * 10.0 / 11.0)
    assert m["little_expected_waiting"] == pytest.approx(20.0 / 11.0)
    assert m["little_mismatch"] == 0.0


def test_little_law_tolerates_waits_shorter_than_a_step() -> None:
    # Each request arrives mid-step and is admitted at the next step start: the log, sampled
    # after admission, shows 0 waiting although every request waited part of a step.
    arrival = [0.5 + i for i in range(10)]
    columns = {"arrival_s": arrival, "scheduled_s": [a + 0.5 for a in arrival],
               "first_token_s": [a + 1.5 for a in arrival],
               "finish_s": [a + 1.5 for a in arrival],
               "prompt_len": [100] * 10, "output_len": [1] * 10}
    steps = {"start_s": [float(i) for i in range(12)],
             "end_s": [i + 1.0 for i in range(12)], "num_waiting": [0] * 12}
    doc = diagnose(make_trace(columns, steps=steps)).to_dict()
    q = next(a for a in doc["axes"] if a["name"] == "queueing")
    assert q["metrics"]["waiting_mean"] == 0.0
    assert q["metrics"]["little_expected_waiting"] > 0.3
    assert q["metrics"]["little_expected_sampled"] == 0.0
    assert "Q000" not in [f["id"] for f in q["findings"]]


def test_prefix_recompute_ledger_fixes_cache_keys(capsys: pytest.CaptureFixture[str]) -> None:
    doc = sample("diag-prefix-recompute", capsys, "--model", "Llama-3.1-8B")
    fix = next(e for e in doc["ledger"] if e["remedy"] == "fix_cache_keys")
    saves = {q["name"]: q["value"] for q in fix["saves"]}
    adds = {q["name"]: q["value"] for q in fix["adds"]}
    reuse = axes_of(doc)["prefix_reuse"]["metrics"]
    assert saves["prefill_tokens"] == reuse["recomputed_reusable_tokens"] > 0
    # the shared system prompt (3,904 tokens, whole blocks) is held once
    assert adds["cached_prefix_tokens"] == 3904
    assert adds["cached_prefix_bytes"] == 3904 * 131072


@pytest.mark.parametrize("name", ["diag-healthy", "diag-kv-churn", "diag-long-prefill",
                                  "diag-prefix-recompute"])
def test_verdict_is_one_line_of_the_table(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = sample(name, capsys)
    main(["diagnose", str(SAMPLES / f"{name}.parquet"), "--steps",
          str(SAMPLES / f"{name}.steps.parquet")])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.rstrip() == doc["verdict"]["summary"]


def test_disaggregation_waits_when_preemption_cannot_be_ruled_out() -> None:
    # GIVEN decode stalls during prefill but no preemption data at all
    from diag_factories import thresholds
    from test_diagnosis_verdict import interference_trace_columns

    from yaotu_trace.axes.base import EngineSettings

    trace = make_trace(interference_trace_columns())
    doc = diagnose(trace, settings=EngineSettings(kv_bytes_per_token=1000),
                   thresholds=thresholds(stall_factor=4)).to_dict()
    # THEN the split is listed but withheld until kv_memory can be decided
    split = next(e for e in doc["ledger"] if e["remedy"] == "pd_disaggregation")
    assert split["recommended"] is False
    assert any("preemption is not ruled out" in w for w in split["withheld_because"])


def test_a_queue_behind_a_busy_gpu_reads_as_the_steps_that_left_requests_waiting() -> None:
    """A step log and no request timing, every seat taken while requests wait and the GPU
    busy: the verdict says what the queue cost (the steps that left requests waiting), not
    "0.0 % of wall time the GPU idled while requests waited" (true, and why it is not
    dispatch overhead)."""
    from yaotu_trace.axes.base import EngineSettings

    start = [0.5 * k for k in range(40)]
    steps = {"start_s": start, "end_s": [s + 0.5 for s in start],
             "num_waiting": [3] * 40, "num_running": [4] * 40,
             "prefill_tokens": [60] * 40, "decode_tokens": [4] * 40,
             "kv_blocks_used": [30] * 40, "kv_blocks_total": [100] * 40}
    trace = make_trace({"arrival_s": [0.0, 1.0, 2.0, 3.0], "prompt_len": [10] * 4,
                        "output_len": [10] * 4}, steps=steps)
    verdict = diagnose(trace, settings=EngineSettings(max_num_seqs=4, max_batched_tokens=2048)
                       ).to_dict()["verdict"]
    assert verdict["summary"] == ("verdict: queueing (batch_shape): 100.0 % of steps left "
                                  "requests waiting")
