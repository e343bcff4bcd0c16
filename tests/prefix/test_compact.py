"""Chains held as runs of consecutive ids give back exactly the flat ids, and every pass that
reads them that way (the ideal pass, the relabelling in place, the hot prefixes) gives what it
gives on the flat ids."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import chains_of, flatten, prompts_with_reuse

from yaotu_trace.prefix import partition
from yaotu_trace.prefix.kernels import compact
from yaotu_trace.prefix.kernels.compact import CompactChains, IdRuns
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.kernels.ideal import ideal_hit_tokens
from yaotu_trace.prefix.rules import rules_for


def random_ids(rng: np.random.Generator, runs: int) -> np.ndarray:
    """Runs of consecutive ids of random starts and lengths (some empty, some adjacent)."""
    starts = rng.integers(0, 60, size=runs)
    lengths = rng.integers(0, 9, size=runs)
    parts = [np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)]
    return np.concatenate(parts or [np.zeros(0)]).astype(np.int32)


@pytest.mark.parametrize("slice_ids", [3, 7, 1 << 24])
def test_runs_give_back_every_slice_and_position(monkeypatch: pytest.MonkeyPatch,
                                                 slice_ids: int) -> None:
    # GIVEN slices small enough that compaction and expansion cross many slice edges
    monkeypatch.setattr(compact, "SLICE", slice_ids)
    rng = np.random.default_rng(7)
    for _ in range(100):
        ids = random_ids(rng, int(rng.integers(0, 40)))
        runs = IdRuns.of(ids)
        # THEN the whole array, any range and any positions come back as they were
        np.testing.assert_array_equal(runs.expand(), ids)
        assert runs.size == ids.size
        for _ in range(5):
            lo = int(rng.integers(0, ids.size + 1))
            hi = int(rng.integers(lo, ids.size + 1))
            np.testing.assert_array_equal(runs.range(lo, hi), ids[lo:hi])
        if ids.size:
            pos = rng.integers(0, ids.size, size=12)
            np.testing.assert_array_equal(runs.at(pos), ids[pos])


@pytest.mark.parametrize("flat", [False, True])
def test_segments_are_the_runs_of_the_ids_gathered(monkeypatch: pytest.MonkeyPatch,
                                                   flat: bool) -> None:
    # GIVEN ids held as runs (or flat, as ids that do not run are) and segments of them, some
    # empty, some inside one run, some across several
    if flat:  # every array of two ids or more held flat
        monkeypatch.setattr(compact, "RUN_SLACK", 0)
        monkeypatch.setattr(compact, "FLAT_BELOW", 10**9)
    rng = np.random.default_rng(11)
    for _ in range(50):
        ids = random_ids(rng, 30)
        runs = IdRuns.of(ids)
        assert (runs.flat is not None) == (flat and ids.size > 1)
        lo = np.sort(rng.integers(0, ids.size + 1, size=8))
        hi = np.minimum(lo + rng.integers(0, 12, size=8), ids.size)
        # WHEN the segments are cut from the runs
        cut = runs.segments(lo, hi)
        # THEN they expand to the ids gathered segment by segment
        gathered = np.concatenate([ids[a:b] for a, b in zip(lo, hi, strict=True)])
        np.testing.assert_array_equal(cut.expand(), gathered)


def test_a_run_breaks_only_where_the_next_id_is_not_one_more() -> None:
    runs = IdRuns.of(np.array([0, 1, 2, 0, 1, 2, 3, 5, 9, 10], dtype=np.int32))
    assert runs.starts.tolist() == [0, 3, 7, 8, 10]
    assert runs.first_ids.tolist() == [0, 0, 5, 9]


@pytest.mark.parametrize("block", [2, 7, 16])
def test_the_ideal_pass_reads_runs_as_it_reads_flat_ids(block: int) -> None:
    prompts = prompts_with_reuse(np.random.default_rng(block), 300)
    rules = rules_for("none", block_size_tokens=block)
    chains = chains_of(prompts, rules)
    offsets, values, _ = flatten(prompts)
    hits = replay(chains, rules).hit_blocks
    flat = ideal_hit_tokens(offsets, values, chains, hits)
    runs = CompactChains.of(chains)
    assert runs.runs.first_ids.size < chains.ids.size  # the prompts repeat: runs are fewer
    np.testing.assert_array_equal(ideal_hit_tokens(offsets, values, runs, hits), flat)


def test_relabelling_in_place_gives_the_ids_of_a_new_array(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the compiled relabelling a large trace takes (forced on a small one)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)
    prompts = prompts_with_reuse(np.random.default_rng(3), 200)
    rules = rules_for("none", block_size_tokens=4)
    chains = chains_of(prompts, rules)
    codes = np.random.default_rng(4).integers(0, 3, size=len(prompts))
    apart = partition.with_namespaces(chains, codes)
    # WHEN ids expanded from runs are relabelled in their own array
    expanded = CompactChains.of(chains).expand()
    inside = partition.with_namespaces(expanded, codes, in_place=True)
    # THEN the ids are the same, and no second array was made
    np.testing.assert_array_equal(inside.ids, apart.ids)
    assert inside.num_distinct == apart.num_distinct
    assert np.shares_memory(inside.ids, expanded.ids)
    # and chains whose ids are read-only (as every build's are) are never written
    frozen = chains.ids.copy()
    frozen.flags.writeable = False
    again = partition.with_namespaces(replace(chains, ids=frozen), codes, in_place=True)
    np.testing.assert_array_equal(frozen, chains.ids)
    np.testing.assert_array_equal(again.ids, apart.ids)


def test_ids_that_do_not_run_are_held_flat() -> None:
    # GIVEN ids with no two consecutive (every block new under a shuffled numbering)
    ids = np.random.default_rng(2).permutation(20_000).astype(np.int32)
    runs = IdRuns.of(ids)
    # THEN they are held as they are (runs would take three times the bytes), and read back
    assert runs.flat is not None and runs.nbytes == ids.nbytes
    np.testing.assert_array_equal(runs.expand(), ids)
    np.testing.assert_array_equal(runs.range(10, 20), ids[10:20])
    np.testing.assert_array_equal(runs.at(np.array([5, 19_999])), ids[[5, 19_999]])
    assert not runs.expand().flags.writeable  # never relabelled in place
