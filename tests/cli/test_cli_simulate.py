"""`trace simulate` and `trace compare` end to end on small traces and the public ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.ingest import read_trace


def small_trace(tmp_path: Path, n: int = 40) -> Path:
    rng = np.random.default_rng(0)
    system = list(range(1000, 1064))
    lines = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.2))
        prompt = system + [int(x) for x in rng.integers(0, 500, int(rng.integers(1, 200)))]
        lines.append(json.dumps({"request_id": f"q{i}", "arrival_s": t, "prompt_tokens": prompt,
                                 "output_len": int(rng.integers(1, 30))}))
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_simulate_writes_timing_columns_and_step_log(tmp_path, capsys):
    trace = small_trace(tmp_path)
    out, steps = tmp_path / "sim.parquet", tmp_path / "steps.csv"
    code = main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--out", str(out), "--steps-out", str(steps), "--format", "json"])
    assert code == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "simulate"
    assert doc["simulation"]["finished"] == 40
    assert doc["simulation"]["hit_ratio"] > 0
    loaded = read_trace(out, steps_path=steps)
    df = loaded.requests
    for column in ("scheduled_s", "first_token_s", "finish_s", "token_times_s",
                   "num_preemptions", "cached_tokens", "instance", "prompt_tokens"):
        assert loaded.has(column), column
    assert (df["finish_s"] >= df["first_token_s"]).all()
    lengths = df["token_times_s"].map(len).to_numpy()
    np.testing.assert_array_equal(lengths, df["output_len"].to_numpy())
    assert loaded.steps is not None and loaded.steps.num_rows > 0
    steps = loaded.steps.frame()
    assert (steps["kv_blocks_used"] <= steps["kv_blocks_total"]).all()


def test_cli_simulate_scenario_file_and_flags_override(tmp_path, capsys):
    trace = small_trace(tmp_path)
    scenario = tmp_path / "pd.toml"
    scenario.write_text('model = "Llama-3.1-8B"\ngpu = "H100"\npd = "1:1"\nkv-blocks = 500\n'
                        "link-gbps = 100\n")
    out = tmp_path / "sim.csv"
    code = main(["simulate", str(trace), "--scenario", str(scenario), "--kv-blocks", "900",
                 "--out", str(out), "--format", "json"])
    assert code == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["simulation"]["kv_blocks_per_instance"] == 900
    assert doc["simulation"]["instances"] == "1 prefill + 1 decode"
    assert doc["simulation"]["work"]["kv_transfer_bytes"] > 0
    df = read_trace(out).requests
    assert set(df["prefill_instance"].dropna()) == {"p0"}


def test_cli_simulate_errors_are_one_line(tmp_path, capsys):
    trace = small_trace(tmp_path)
    code = main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "Z9000",
                 "--out", str(tmp_path / "x.parquet")])
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: unknown GPU") and err.count("\n") == 1
    code = main(["simulate", str(trace), "--model", "Llama-3.1-405B", "--gpu", "H100",
                 "--out", str(tmp_path / "x.parquet")])
    assert code == ExitCode.USAGE
    assert "leaves no KV memory" in capsys.readouterr().err
    code = main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--out", str(tmp_path / "x.txt")])
    assert code == ExitCode.USAGE


def test_cli_compare_shows_both_ledgers(tmp_path, capsys):
    trace = small_trace(tmp_path, n=80)
    a = tmp_path / "chunked.toml"
    a.write_text("instances = 2\nmax-batched-tokens = 256\nroute = \"least-loaded\"\n")
    b = tmp_path / "pd.toml"
    b.write_text("pd = [1, 1]\n")
    code = main(["compare", str(trace), "--scenario", str(a), "--scenario", str(b),
                 "--model", "Llama-3.1-8B", "--gpu", "H100", "--format", "json"])
    assert code == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    section = doc["comparison"]
    assert [s["scenario"] for s in section["scenarios"]] == ["chunked", "pd"]
    ledger = section["ledgers"][0]
    added = {e["metric"] for e in ledger["added"]}
    assert "KV bytes over the P/D link" in added
    code = main(["compare", str(trace), "--scenario", str(a), "--scenario", str(b),
                 "--model", "Llama-3.1-8B", "--gpu", "H100"])
    text = capsys.readouterr().out
    assert "pd against chunked: work saved" in text and "work added" in text


@pytest.mark.slow
def test_cli_simulate_public_traces_then_diagnose_inputs(tmp_path, capsys):
    for rel, content in (("mooncake/conversation_trace.jsonl", True),
                         ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", False)):
        path = shared_trace(rel)
        out = tmp_path / "sim.parquet"
        code = main(["simulate", str(path), "--model", "Llama-3.1-8B", "--gpu", "H100",
                     "--out", str(out), "--format", "json"])
        assert code == ExitCode.OK
        doc = json.loads(capsys.readouterr().out)
        sim = doc["simulation"]
        assert sim["finished"] + sim["rejected"] == sim["requests"]
        assert (sim["hit_ratio"] > 0) is content
        if not content:
            assert any("no prompt content" in n for n in sim["notes"])


def test_cli_simulate_then_diagnose_verdict_follows_the_kv_pool(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("yaotu_trace.cli.diagnose") is None:
        pytest.skip("trace diagnose is not available")
    rng = np.random.default_rng(0)
    t, lines = 0.0, []
    for i in range(600):
        t += float(rng.exponential(0.05))
        lines.append(json.dumps({"request_id": f"q{i}", "arrival_s": t,
                                 "prompt_len": int(rng.integers(200, 2000)),
                                 "output_len": int(rng.integers(100, 400))}))
    trace = tmp_path / "lengths.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    status = {}
    for kv_blocks in (600, 20_000):
        out, steps = tmp_path / f"sim{kv_blocks}.parquet", tmp_path / f"steps{kv_blocks}.parquet"
        assert main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                     "--kv-blocks", str(kv_blocks), "--out", str(out), "--steps-out", str(steps),
                     "--format", "json"]) == ExitCode.OK
        simulation = json.loads(capsys.readouterr().out)["simulation"]
        main(["diagnose", str(out), "--steps", str(steps), "--format", "json"])
        doc = json.loads(capsys.readouterr().out)
        kv = {a["name"]: a for a in doc["axes"]}["kv_memory"]
        status[kv_blocks] = (simulation["preemptions"], kv["status"])
        # the recompute the diagnosis reads from the step log is the simulator's own count
        assert kv["metrics"]["recomputed_tokens"] == simulation["work"]["recomputed_tokens"]
    # a small pool preempts and the KV-memory axis says so; a large one does neither
    assert status[600][0] > 50 and status[600][1] in ("warning", "bottleneck")
    assert status[20_000] == (0, "ok")
