"""`trace analyze`'s prefix-reuse overview agrees with the full replay and the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli, run_json, shared_trace

from yaotu_trace.cli import main
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ExitCode
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import replay_trace, rules_for
from yaotu_trace.prefix.overview import reuse_overview

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"
# Llama-3.1-8B in the catalog: 32 layers × 8 KV heads × 128 head_dim × 2 (K and V) × 2 bytes
# (bf16) = 131,072 KV bytes per token, worked out by hand here rather than asked of the catalog.
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
NO_BYTES = "capacities in bytes need --model or --kv-bytes-per-token"


def test_overview_worked_example_token_level() -> None:
    # GIVEN the spec's worked example at B = 1 under vLLM rules (last-token rule on)
    trace = normalize(
        RawTrace(
            requests=pd.DataFrame(
                {
                    "arrival_s": [0.0, 1.0, 2.0],
                    "prompt_len": [4, 4, 4],
                    "output_len": [1, 1, 1],
                    "prompt_tokens": [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]],
                }
            ),
            format_name="test",
        ),
        "t.jsonl",
    )
    # WHEN the overview runs (vLLM preset: B = 16, so nothing is cacheable in 4 tokens)
    overview = reuse_overview(trace)
    # THEN no full block exists and nothing hits
    assert overview.available
    assert overview.block_size_tokens == 16
    assert overview.saved_prefill_tokens == 0
    assert overview.remaining_prefill_tokens == 12


def test_overview_equals_unlimited_replay_on_mooncake() -> None:
    trace = read_trace(shared_trace("mooncake/conversation_trace.jsonl"))
    overview = reuse_overview(trace, preset="vllm")
    rules = rules_for("vllm", block_size_tokens=512)
    summary = replay_trace(trace, rules, waterfall=False)
    assert overview.saved_prefill_tokens == summary.saved_prefill_tokens
    assert overview.hit_ratio == pytest.approx(summary.hit_ratio)
    # 50/90/99 % capacities are ordered and the 99 % point reaches 99 % of the reuse.
    caps = [p.capacity_blocks for p in overview.shares]
    assert caps == sorted(caps) and len(caps) == 3
    assert overview.shares[-1].share_of_unlimited >= 0.99


def test_analyze_json_has_prefix_reuse_or_says_why_not(capsys) -> None:
    assert main(["analyze", str(SAMPLE), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefix_reuse"]["available"] is True
    assert 0 < doc["prefix_reuse"]["hit_ratio"] < 1
    path = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    assert main(["analyze", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefix_reuse"]["available"] is False
    assert "no prompt content" in doc["prefix_reuse"]["reason"]


def test_analyze_with_a_model_gives_the_capacities_in_bytes(capsys) -> None:
    # GIVEN chat.parquet and a catalog model
    assert LLAMA_8B_KV_BYTES_PER_TOKEN == 131_072
    # WHEN analyze runs with --model
    code, out, err = run_cli(["analyze", str(SAMPLE), "--model", "llama-3.1-8b", "--no-charts"],
                             capsys)
    # THEN the overview has no note asking for the model, and each capacity shows its bytes:
    # the knee's 5,313 blocks × 16 tokens = 85,008 tokens × 131,072 B = 11,142,168,576 B
    # = 10.38 GiB
    assert code == ExitCode.OK, err
    assert NO_BYTES not in out
    assert "LRU capacity for knee" in out and "5,313 blocks (85k tok, 10.4 GiB) → 66.0 %" in out
    # AND the JSON points carry those bytes: tokens × the model's KV bytes per token
    doc = run_json(["analyze", str(SAMPLE), "--model", "llama-3.1-8b", "-f", "json"], capsys)
    reuse = doc["prefix_reuse"]
    assert isinstance(reuse, dict)
    assert reuse["knee"]["capacity_tokens"] == 85_008
    assert reuse["knee"]["capacity_bytes"] == 11_142_168_576
    for point in (reuse["knee"], *reuse["shares"]):
        assert point["capacity_bytes"] == point["capacity_tokens"] * LLAMA_8B_KV_BYTES_PER_TOKEN
    assert NO_BYTES not in reuse["notes"]
    assert doc["config"] == {"model": "Llama-3.1-8B",
                             "kv_bytes_per_token": LLAMA_8B_KV_BYTES_PER_TOKEN}


def test_analyze_without_a_model_keeps_the_note_and_no_bytes(capsys) -> None:
    code, out, _ = run_cli(["analyze", str(SAMPLE), "--no-charts"], capsys)
    assert code == ExitCode.OK
    assert f"note: {NO_BYTES}" in out
    assert "5,313 blocks (85k tok) → 66.0 %" in out
    doc = run_json(["analyze", str(SAMPLE), "-f", "json"], capsys)
    reuse = doc["prefix_reuse"]
    assert isinstance(reuse, dict)
    assert reuse["knee"]["capacity_bytes"] is None
    assert NO_BYTES in reuse["notes"]
    assert doc["config"] == {}


def test_analyze_refuses_a_model_and_other_kv_bytes_in_one_line(capsys) -> None:
    code, out, err = run_cli(["analyze", str(SAMPLE), "--model", "llama-3.1-8b",
                              "--kv-bytes-per-token", "1000"], capsys)
    assert code == ExitCode.USAGE
    assert out == ""
    assert err == ("error: --model Llama-3.1-8B has 131072 KV bytes per token but "
                   "--kv-bytes-per-token says 1000; pass only one of them\n")


@pytest.mark.parametrize("warmup", [None, "10%"])
def test_overview_bytes_on_the_numpy_and_the_compiled_path(warmup: str | None) -> None:
    """A small trace without a window is swept in numpy (`prefix/small.py`), with one in the
    compiled sweep: both size the capacities at the KV bytes per token given."""
    trace = read_trace(SAMPLE)
    overview = reuse_overview(trace, warmup, kv_bytes_per_token=1000)
    assert overview.knee is not None and len(overview.shares) == 3
    for point in (overview.knee, *overview.shares):
        assert point.capacity_bytes == point.capacity_tokens * 1000
    assert NO_BYTES not in overview.notes
