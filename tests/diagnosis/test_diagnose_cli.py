"""`trace diagnose` end to end: public trace without timing, a full trace, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, run_cli, shared_trace

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import ExitCode


def test_diagnose_mooncake_without_timing(capsys) -> None:
    path = shared_trace("mooncake/conversation_trace.jsonl")
    code, out, err = run_cli(["diagnose", str(path), "--format", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert [a["name"] for a in doc["axes"]] == ["queueing", "kv_memory", "prefix_reuse",
                                                "pd_interference"]
    axes = {a["name"]: a for a in doc["axes"]}
    for name in ("queueing", "kv_memory", "pd_interference"):
        assert axes[name]["status"] == "insufficient_data"
        assert axes[name]["missing"]
    assert any("scheduled_s" in m for m in axes["queueing"]["missing"])
    assert any("token_times_s" in m for m in axes["pd_interference"]["missing"])
    reuse = axes["prefix_reuse"]
    assert reuse["status"] != "insufficient_data"
    assert reuse["metrics"]["preset"] == "mooncake"
    assert 0.3 < reuse["metrics"]["achievable_hit_rate"] < 0.5
    assert doc["principal"] is None
    assert doc["verdict"]["principal_axis"] is None
    assert set(doc["verdict"]["insufficient_data"]) == {"queueing", "kv_memory",
                                                         "pd_interference"}


@pytest.fixture()
def full_trace(tmp_path: Path) -> tuple[Path, Path]:
    first = [0.02 * i for i in range(10)]
    tokens = first + [first[-1] + 0.5 + 0.02 * i for i in range(10)]
    trace = tmp_path / "requests.jsonl"
    write_trace(pd.DataFrame({
        "request_id": ["a", "b", "c"],
        "arrival_s": [0.0, 0.1, 0.2],
        "scheduled_s": [0.0, 0.3, 0.2],
        "first_token_s": [0.0, 0.4, 0.25],
        "finish_s": [tokens[-1], 0.4, 0.3],
        "prompt_len": [64, 4000, 64],
        "output_len": [20, 1, 1],
        "instance": ["x", "x", "y"],
        "num_preemptions": [0, 0, 0],
        "cached_tokens": [0, 0, 0],
        "prompt_tokens": [list(range(64)), list(range(4000)), list(range(64))],
        "token_times_s": [tokens, [0.4], [0.25]],
    }), trace)
    steps = tmp_path / "steps.csv"
    pd.DataFrame({
        "instance": ["x", "x", "x"], "start_s": [0.0, 0.2, 0.4], "end_s": [0.02, 0.4, 0.42],
        "prefill_tokens": [64, 4000, 0], "decode_tokens": [0, 1, 1], "num_running": [1, 2, 2],
        "num_waiting": [0, 0, 0], "kv_blocks_used": [4, 260, 260],
        "kv_blocks_total": [1000, 1000, 1000], "num_preempted": [0, 0, 0],
    }).to_csv(steps, index=False)
    return trace, steps


def test_diagnose_full_trace_all_sources_and_formats(full_trace, tmp_path: Path, capsys) -> None:
    trace, steps = full_trace
    base = ["diagnose", str(trace), "--steps", str(steps), "--metrics",
            str(FIXTURES / "prom_vllm_small.json"), "--model", "Llama-3.1-8B", "--link-gbps", "400",
            "-t", "stall_factor=5"]
    code, out, err = run_cli([*base, "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    axes = {a["name"]: a for a in doc["axes"]}
    assert "steps" in axes["queueing"]["sources"]
    assert axes["kv_memory"]["status"] == "ok"
    assert axes["prefix_reuse"]["metrics"]["observed_source"] == "cached_tokens"
    assert axes["pd_interference"]["status"] == "bottleneck"
    assert doc["principal"] in ("pd_interference", "prefix_reuse")
    assert doc["principal"] == doc["verdict"]["principal_axis"]
    remedies = {e["remedy"]: e for e in doc["ledger"]}
    pd_adds = {q["name"]: q["value"] for q in remedies["pd_disaggregation"]["adds"]}
    assert pd_adds["network_bytes"] == (64 + 4000 + 64) * 131072  # Llama-3.1-8B: 128 KiB/token
    assert doc["config"]["settings"]["model"] == "Llama-3.1-8B"
    assert doc["config"]["metrics"]["path"].endswith("prom_vllm_small.json")
    for f in doc["findings"]:
        assert {"id", "severity", "axis", "title", "message", "evidence"} <= set(f)
    code, out, err = run_cli([*base, "-f", "table"], capsys)
    assert code == ExitCode.OK, err
    assert "Remedy ledger" in out and "pd_disaggregation" in out
    assert out.splitlines()[0].startswith("verdict: ")
    target = tmp_path / "diag.md"
    code, out, err = run_cli([*base, "-f", "markdown", "-o", str(target)], capsys)
    assert code == ExitCode.OK and out == ""
    assert "### Findings" in target.read_text()


@pytest.mark.parametrize(
    ("extra", "code", "expected"),
    [
        (["--threshold", "nope=1"], ExitCode.USAGE, "unknown threshold 'nope'; valid names: "
         "window_s"),
        (["--threshold", "stall_factor=abc"], ExitCode.USAGE, "'abc' is not a number"),
        (["--metrics", str(FIXTURES / "prom_bad_value.csv")], ExitCode.INPUT,
         "line 3, field 'value'"),
        (["--model", "no-such-model"], ExitCode.USAGE, "unknown model 'no-such-model'"),
        (["--kv-capacity", "12 parsecs"], ExitCode.USAGE, "unknown unit in capacity"),
        (["--kv-capacity", "1e30"], ExitCode.USAGE, "capacity '1e30' is beyond 1e+15 blocks"),
        (["--kv-capacity", "1e20GiB"], ExitCode.USAGE, "is beyond 1.15e+18 bytes"),
        (["--preset", "nonsense"], ExitCode.USAGE, "'nonsense' is not one of"),
    ],
)
def test_diagnose_errors_are_one_line(full_trace, capsys, extra, code, expected) -> None:
    """A bad option value is a usage error (2), a bad file an input error (3): one line each."""
    trace, _ = full_trace
    got, out, err = run_cli(["diagnose", str(trace), *extra], capsys)
    assert got == code, err
    assert out == ""
    assert err.startswith("error: ") and expected in err
    assert err.count("\n") == 1
