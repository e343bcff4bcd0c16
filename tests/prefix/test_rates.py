"""Every hit-rate definition (prefix/rates.py): hand-checked small cases, and AIPerf's own
numbers on the Mooncake traces (tests/fixtures/aiperf_analyze_trace.json)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, shared_trace

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import rates, replay_trace, rules_for

AIPERF = json.loads((FIXTURES / "aiperf_analyze_trace.json").read_text(encoding="utf-8"))
KEYS = [d.key for d in rates.DEFINITIONS]


def _token_trace() -> object:
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 9], [1, 2, 7, 8], [6]]
    return normalize(RawTrace(requests=pd.DataFrame({
        "arrival_s": [0.0, 1.0, 2.0, 3.0], "prompt_len": [len(p) for p in prompts],
        "output_len": [1, 1, 1, 1], "prompt_tokens": prompts}), format_name="test"), "t.jsonl")


def test_every_definition_on_a_hand_checked_token_trace() -> None:
    """B = 2, preset none (no last-token rule, partial blocks not cached), worked by hand:
    hits 0, 2, 1, 0 blocks (0, 4, 2, 0 tokens) of 5, 5, 4, 1 tokens.
    token-weighted 6/15; request-averaged (0 + 4/5 + 2/4 + 0)/4; cacheable blocks 3/6; full
    blocks 3/6; AIPerf (0 + 2/3 + 1/2 + 0/1)/4 = 7/24 (the partial block counts as a block)."""
    summary = replay_trace(_token_trace(), rules_for("none", block_size_tokens=2),
                           waterfall=False)
    values = {k: v["value"] for k, v in summary.hit_rates.items()}
    assert list(values) == KEYS
    assert values == pytest.approx({
        "token_weighted": 6 / 15, "request_averaged_tokens": 0.325,
        "cacheable_blocks": 0.5, "full_blocks": 0.5,
        "aiperf_request_averaged_blocks": 7 / 24})
    # The old fields are the same functions' values.
    assert summary.hit_ratio == values["token_weighted"]
    assert summary.request_averaged_hit_ratio == values["request_averaged_tokens"]
    assert summary.cacheable_block_hit_ratio == values["cacheable_blocks"]


def test_aiperf_ignores_capacity_and_the_last_token_rule() -> None:
    """With a 1-block cache and the last-token rule on, the achieved replay hits less, but
    AIPerf's definition is about what was seen before at all: still 7/24 (hand-checked above)."""
    rules = rules_for("none", block_size_tokens=2, last_token_rule=True, capacity_blocks=1)
    summary = replay_trace(_token_trace(), rules, waterfall=False)
    aiperf = summary.hit_rates["aiperf_request_averaged_blocks"]
    assert aiperf["value"] == pytest.approx(7 / 24)
    assert aiperf["capacity"] == "unlimited, one cache"
    assert summary.hit_rates["token_weighted"]["capacity"] == "1 blocks"
    assert summary.hit_rates["token_weighted"]["value"] < 6 / 15


def test_tiny_mooncake_trace_equals_aiperf() -> None:
    """tests/fixtures/aiperf_tiny_mooncake.jsonl, 512-token hash ids, mooncake preset. By hand, and
    as aiperf 0.13.0 analyze-trace printed it: requests see 0/2, 2/2, 1/3, 0/1 leading blocks,
    mean 1/3. The partial block (488 tokens) is cached and worth its length: token-weighted
    (1000 + 512) / 3836; full blocks 3 / (1 + 1 + 3 + 0)."""
    path = FIXTURES / "aiperf_tiny_mooncake.jsonl"
    summary = replay_trace(read_trace(path))
    values = {k: v["value"] for k, v in summary.hit_rates.items()}
    expected = AIPERF["traces"]["tests/fixtures/aiperf_tiny_mooncake.jsonl"]["cache_hit_rate"]
    assert values["aiperf_request_averaged_blocks"] == pytest.approx(1 / 3)
    assert values["aiperf_request_averaged_blocks"] == pytest.approx(expected, abs=1e-12)
    assert values["token_weighted"] == pytest.approx(1512 / 3836)
    assert values["full_blocks"] == pytest.approx(3 / 5)
    assert values["cacheable_blocks"] == pytest.approx(3 / 8)


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_aiperf_definition_equals_aiperf_on_mooncake(name: str) -> None:
    """Our AIPerf-definition rate equals aiperf 0.13.0 `analyze-trace`'s `cache_hit_rate` on the
    public Mooncake traces (38.4 % conversation, 42.3 % synthetic; the fixture has the command),
    and so do the distinct blocks (its `unique_prefixes`)."""
    relative = f"mooncake/{name}_trace.jsonl"
    theirs = AIPERF["traces"][relative]
    summary = replay_trace(read_trace(shared_trace(relative)), waterfall=False)
    assert summary.preset == "mooncake"
    assert summary.requests == theirs["total_requests"]
    assert summary.distinct_blocks == theirs["unique_prefixes"]
    ours = summary.hit_rates["aiperf_request_averaged_blocks"]["value"]
    assert ours == pytest.approx(theirs["cache_hit_rate"], abs=1e-12)


def test_functions_on_empty_and_zero_inputs() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert rates.token_weighted(empty, empty) == 0.0
    assert rates.request_averaged_tokens(empty, empty) == 0.0
    assert rates.cacheable_blocks(empty, empty) == 0.0
    assert rates.full_blocks(empty, empty, 16) == 0.0
    assert rates.aiperf_request_averaged_blocks(empty, empty, 16) == 0.0
    # A request with no token is left out of AIPerf's mean, as AIPerf skips empty hash_ids.
    assert rates.aiperf_request_averaged_blocks(np.array([1, 0]), np.array([16, 0]), 16) == 1.0


def test_every_definition_has_a_label_and_a_tool() -> None:
    assert len(set(KEYS)) == len(KEYS)
    for d in rates.DEFINITIONS:
        assert d.label and d.formula and d.used_by
