"""The public Mooncake traces: unlimited-capacity results follow from their id counts."""

from __future__ import annotations

import json

import pytest
from conftest import shared_trace

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import replay_trace, rules_for

# (file, total block references, distinct ids) from mooncake-traces.md §2.2
FILES = [
    ("mooncake/conversation_trace.jsonl", 288_500, 182_790),
    ("mooncake/synthetic_trace.jsonl", 121_877, 43_924),
]


def _expected_hit_tokens(path) -> int:
    """Ids are prefix-consistent: a block hits iff its id appeared in an earlier row."""
    seen: set[int] = set()
    total = 0
    with path.open() as lines:
        rows = [json.loads(line) for line in lines]
    for row in rows:
        ids, n = row["hash_ids"], row["input_length"]
        for k, block_id in enumerate(ids):
            if block_id not in seen:
                break
            total += min(512, n - 512 * k)
        seen.update(ids)
    return total


@pytest.mark.parametrize(("name", "references", "distinct"), FILES)
def test_unlimited_hits_follow_from_id_counts(name: str, references: int, distinct: int):
    path = shared_trace(name)
    summary = replay_trace(read_trace(path), rules_for("mooncake"))
    assert summary.cacheable_blocks == references
    assert summary.distinct_blocks == distinct
    # Every reference after an id's first is a hit: hit blocks = references − distinct.
    hit_blocks = round(summary.cacheable_block_hit_ratio * references)
    assert hit_blocks == references - distinct
    assert summary.saved_prefill_tokens == _expected_hit_tokens(path)
    # One namespace, block = source block, no last-token rule: the ideal is achieved.
    assert summary.ideal_hit_tokens == summary.saved_prefill_tokens


def test_capacity_curve_points_are_monotone_on_conversation() -> None:
    trace = read_trace(shared_trace("mooncake/conversation_trace.jsonl"))
    ratios = [replay_trace(trace, rules_for("mooncake", capacity_blocks=c), waterfall=False)
              .hit_ratio for c in (1000, 10_000, 100_000)]
    unlimited = replay_trace(trace, rules_for("mooncake"), waterfall=False).hit_ratio
    assert ratios == sorted(ratios)
    assert ratios[-1] <= unlimited


def test_vllm_rules_on_mooncake_lose_partial_blocks_and_last_token() -> None:
    trace = read_trace(shared_trace("mooncake/synthetic_trace.jsonl"))
    summary = replay_trace(trace, rules_for("vllm", block_size_tokens=1024))
    steps = {s.step: s.loss_tokens for s in summary.waterfall}
    assert steps["block_granularity"] > 0
    assert steps["last_token_rule"] >= 0
    assert sum(steps.values()) == (summary.ideal_hit_tokens
                                   - summary.saved_prefill_tokens)
