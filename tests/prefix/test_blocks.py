"""Block chains: dense ids, dtypes, partial blocks, hit caps, and collision handling."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import chains_of

from yaotu_trace.errors import YaotuError
from yaotu_trace.prefix.kernels import blocks
from yaotu_trace.prefix.kernels.chains import hash_keys
from yaotu_trace.prefix.rules import rules_for


def test_ids_are_dense_in_first_appearance_order_and_dtypes_are_pinned() -> None:
    chains = chains_of([[5, 5, 6, 6], [5, 5, 7, 7], [8, 8]], rules_for("none",
                                                                      block_size_tokens=2))
    assert chains.ids.tolist() == [0, 1, 0, 2, 3]
    assert chains.num_distinct == 4
    assert chains.offsets.tolist() == [0, 2, 4, 5]
    assert chains.offsets.dtype == np.int64
    assert chains.ids.dtype == np.int32
    assert chains.block_tokens.dtype == np.int32
    assert chains.max_hit_blocks.dtype == np.int64
    assert chains.request_of_block().tolist() == [0, 0, 1, 1, 2]


def test_same_block_content_at_another_depth_is_another_block() -> None:
    chains = chains_of([[1, 1, 1, 1]], rules_for("none", block_size_tokens=2))
    assert chains.ids.tolist() == [0, 1]


def test_max_hit_blocks_and_with_hit_cap() -> None:
    rules = rules_for("vllm", block_size_tokens=2)
    chains = chains_of([[1, 2, 3, 4], [1, 2, 3, 4, 5], [1]], rules)
    assert chains.max_hit_blocks.tolist() == [1, 2, 0]
    assert chains.with_hit_cap(False).max_hit_blocks.tolist() == [2, 2, 0]
    assert chains.with_hit_cap(True).max_hit_blocks.tolist() == [1, 2, 0]


def test_partial_block_weight_and_cap() -> None:
    rules = rules_for("none", block_size_tokens=4, cache_partial_blocks=True)
    chains = chains_of([[1, 2, 3, 4, 5, 6]], rules)
    assert chains.block_tokens.tolist() == [4, 2]
    assert chains.max_hit_blocks.tolist() == [2]
    ltr = rules.with_(last_token_rule=True)
    assert chains_of([[1, 2, 3, 4, 5, 6]], ltr).max_hit_blocks.tolist() == [1]


def test_block_ids_with_fewer_ids_than_tokens_need() -> None:
    # floor(n/S) ids: no id for the trailing tokens, nothing partial to cache.
    rules = rules_for("mooncake", block_size_tokens=4)
    chains = chains_of([[1, 2]], rules, source_block_size=4, prompt_len=[10])
    assert chains.block_tokens.tolist() == [4, 4]


def test_dense_ids_detects_a_lane_a_collision() -> None:
    hash_a = np.array([7, 7, 9, 7], dtype=np.uint64)
    hash_b = np.array([1, 1, 2, 3], dtype=np.uint64)  # the last entry is a different chain
    ids, distinct, collisions = blocks._dense_ids(hash_a, hash_b, np.int64(4))
    assert ids.tolist() == [0, 0, 1, 0]
    assert distinct == 2
    assert collisions == 1


def test_the_streamed_build_detects_a_lane_a_collision_by_the_high_half_of_lane_b() -> None:
    # The streamed build keeps 4 bytes of lane B per id (its high half) to check lane A by.
    table = blocks._IdTable(16)
    ids = np.empty(4, dtype=np.int32)
    hash_a = np.array([7, 7, 9, 7], dtype=np.uint64)
    same, other = 5 << 32, 6 << 32
    hash_b = np.array([same, same + 1, 1, other], dtype=np.uint64)  # the last: another chain
    table.reserve(4)
    distinct, collisions, last = blocks._dense_ids_into(
        hash_a, hash_b, table.table, table.lane_a, table.lane_b, ids, np.int64(0),
        np.int64(0), np.int64(-1))
    assert ids.tolist() == [0, 0, 1, 0]
    assert (distinct, last) == (2, 0)
    # The second entry differs in the low half only: unseen (odds 2^-32 for a real one).
    assert collisions == 1


def test_a_detected_collision_reruns_with_new_keys(monkeypatch) -> None:
    real = blocks._dense_ids
    calls = []

    def first_collides(hash_a, hash_b, bits):
        ids, distinct, collisions = real(hash_a, hash_b, bits)
        calls.append(1)
        return ids, distinct, (1 if len(calls) == 1 else collisions)

    monkeypatch.setattr(blocks, "_dense_ids", first_collides)
    chains = chains_of([[1, 2], [1, 2]], rules_for("none", block_size_tokens=1))
    assert len(calls) == 2
    assert chains.ids.tolist() == [0, 1, 0, 1]


def test_repeated_collisions_raise(monkeypatch) -> None:
    real = blocks._dense_ids
    monkeypatch.setattr(blocks, "_dense_ids",
                        lambda a, b, bits: (*real(a, b, bits)[:2], 1))
    with pytest.raises(YaotuError, match="collided"):
        chains_of([[1, 2]], rules_for("none", block_size_tokens=1))


def test_keys_differ_by_seed_and_attempt_and_multipliers_are_odd() -> None:
    a = hash_keys(0, 0)
    assert not np.array_equal(a, hash_keys(1, 0))
    assert not np.array_equal(a, hash_keys(0, 1))
    assert all(int(k) % 2 == 1 for k in a[[1, 2, 4, 5]])
