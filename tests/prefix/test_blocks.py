"""Block chains: dense ids, dtypes, partial blocks, hit caps, and collision handling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace
from helpers import chains_of

from yaotu_trace.errors import YaotuError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels import blocks
from yaotu_trace.prefix.kernels.chains import BlockChains, hash_keys
from yaotu_trace.prefix.kernels.numpy_passes import build_block_chains
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


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


def _same_chains(a: BlockChains, b: BlockChains) -> None:
    for name in ("offsets", "ids", "last_block_tokens", "max_hit_blocks", "prompt_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (a.num_distinct, a.block_size_tokens, a.seed) == (b.num_distinct,
                                                             b.block_size_tokens, b.seed)


def test_full_blocks_cut_from_a_build_with_partial_blocks_are_that_build_hand_checked() -> None:
    """Block 2: [1 2 | 3] and [1 2 | 4] and [5]: with partial blocks cached the ids are
    A P3 | A P4 | P5 (0 1 | 0 2 | 3); without, A | A | (none): 0 | 0, one distinct id."""
    prompts = [[1, 2, 3], [1, 2, 4], [5]]
    with_partial = chains_of(prompts, rules_for("none", block_size_tokens=2,
                                                cache_partial_blocks=True))
    assert with_partial.ids.tolist() == [0, 1, 0, 2, 3]
    cut = with_partial.full_blocks_only()
    assert cut.ids.tolist() == [0, 0] and cut.offsets.tolist() == [0, 1, 2, 2]
    assert cut.num_distinct == 1 and cut.last_block_tokens.tolist() == [2, 2, 2]
    _same_chains(cut, chains_of(prompts, rules_for("none", block_size_tokens=2)))


@pytest.mark.parametrize(("trace", "block"), [("chat.parquet", 16), ("chat.parquet", 64),
                                               ("multitenant.csv", 16), ("mooncake", 512)])
def test_full_blocks_cut_from_a_build_with_partial_blocks_are_that_build(trace: str,
                                                                         block: int) -> None:
    """What `PreparedTrace` keeps one build for (a diagnosis' KV axis reads the prefix
    replay's chains): the cut equals the numpy build without partial blocks, ids and all, on
    bundled samples and the public Mooncake conversation trace (512-token block ids)."""
    path = (shared_trace("mooncake/conversation_trace.jsonl") if trace == "mooncake"
            else SAMPLES / trace)
    prepared = prepare(read_trace(path))
    content = prepared.whole_content()
    plain = rules_for("none", block_size_tokens=block)
    with_partial = build_block_chains(content, None, plain.with_(cache_partial_blocks=True))
    assert int((with_partial.last_block_tokens < block).sum()) > 0  # some partial blocks
    _same_chains(with_partial.full_blocks_only(), build_block_chains(content, None, plain))
    # and a prepared trace answers the plain rules from its kept build
    assert prepared.chains(plain.with_(cache_partial_blocks=True), namespaces=False)
    _same_chains(prepared.chains(plain, namespaces=False),
                 build_block_chains(content, None, plain))
