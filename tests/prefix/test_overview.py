"""`trace analyze`'s prefix-reuse overview agrees with the full replay and the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_trace

from yaotu_trace.cli import main
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import replay_trace, rules_for
from yaotu_trace.prefix.overview import reuse_overview

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"


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
