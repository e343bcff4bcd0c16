"""The numpy overview path (`prefix.small` on `kernels.numpy_passes`) gives the compiled
path's numbers bit for bit.

The reference is the compiled path itself (`blocks.build_block_chains`, `sweep.sweep`,
`sweep_trace.sweep_trace`), whose own tests compare it with brute-force LRU replays and the
spec's worked examples; the one hand-checked case here is the worked example of replay-spec §7.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import small
from yaotu_trace.prefix.kernels import blocks, numpy_passes
from yaotu_trace.prefix.kernels.chains import PromptContent
from yaotu_trace.prefix.kernels.curve import SweepBlocks
from yaotu_trace.prefix.kernels.sweep import stack_distance_histograms, sweep
from yaotu_trace.prefix.overview import reuse_overview
from yaotu_trace.prefix.rules import effective_rules, rules_for
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_traces").iterdir()
                 if p.suffix in (".parquet", ".jsonl", ".csv") and ".steps." not in p.name)
MOONCAKE = ["mooncake/conversation_trace.jsonl", "mooncake/synthetic_trace.jsonl"]


def _prompts(rng: np.random.Generator, n: int, vocab: int) -> list[list[int]]:
    """Prompts that share prefixes: a few heads, each continued by random tokens."""
    heads = [rng.integers(0, vocab, int(rng.integers(0, 40))).tolist() for _ in range(4)]
    return [heads[int(rng.integers(0, 4))][: int(rng.integers(0, 41))]
            + rng.integers(0, vocab, int(rng.integers(0, 12))).tolist() for _ in range(n)]


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.array([v for x in lists for v in x], dtype=np.int64)
    return offsets, values


def _assert_same_chains(a: blocks.BlockChains, b: blocks.BlockChains) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, field.name
            assert x.dtype == y.dtype and np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.parametrize("seed", range(40))
def test_chain_ids_equal_the_compiled_ones(seed: int, monkeypatch) -> None:
    # GIVEN random prompts with shared prefixes, tenants, and varied rules and content
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    prompts = _prompts(rng, n, vocab=int(rng.choice([3, 50, 2**40])))
    block = int(rng.choice([1, 4, 16]))
    source = None
    if seed % 4 == 3:  # source block ids of S tokens (B a multiple of S), negative ids too
        source = int(rng.choice([s for s in (1, 2, 4) if block % s == 0]))
        prompts = [[v - 2**39 for v in p] for p in prompts]
    rules = rules_for("none", block_size_tokens=block,
                      cache_partial_blocks=bool(rng.integers(0, 2)),
                      last_token_rule=bool(rng.integers(0, 2)),
                      cache_outputs=bool(rng.integers(0, 2)), seed=int(rng.integers(0, 5)))
    offsets, values = _flat(prompts)
    units = np.diff(offsets)
    prompt_len = units if source is None else units * source - rng.integers(0, source, n) * (
        units > 0)
    ns = rng.integers(0, 3, n) if seed % 3 else None
    outputs = [rng.integers(0, 50, int(rng.integers(0, 20))).tolist() for _ in range(n)]
    out_offsets, out_values = _flat(outputs)
    kw = {"output_offsets": out_offsets, "output_values": out_values} if seed % 2 else {}
    # WHEN both paths chain them (recording the two hash lanes each one numbers)
    lanes: dict[str, list[np.ndarray]] = {"compiled": [], "numpy": []}

    def recording(name, dense_ids):
        def record(hash_a, hash_b, bits):
            lanes[name] += [hash_a.copy(), hash_b.copy()]
            return dense_ids(hash_a, hash_b, bits)
        return record

    monkeypatch.setattr(blocks, "_dense_ids", recording("compiled", blocks._dense_ids))
    numpy_kernels = numpy_passes.NUMPY_KERNELS
    monkeypatch.setattr(numpy_passes, "NUMPY_KERNELS", dataclasses.replace(
        numpy_kernels, dense_ids=recording("numpy", numpy_kernels.dense_ids)))
    content = PromptContent(offsets=offsets, values=values, prompt_len=prompt_len,
                            source_block_size=source, **kw)
    compiled = blocks.build_block_chains(content, ns, rules)
    numpy_ = numpy_passes.build_block_chains(content, ns, rules)
    # THEN both hash every block alike, and every array is the same, ids included
    assert len(lanes["numpy"]) == len(lanes["compiled"]) == 2
    for mine, theirs in zip(lanes["numpy"], lanes["compiled"], strict=True):
        assert np.array_equal(mine, theirs)
    _assert_same_chains(numpy_, compiled)


def test_dense_ids_detect_a_lane_a_collision() -> None:
    # The hand-made case of test_blocks: the last entry is a different chain on lane B.
    hash_a = np.array([7, 7, 9, 7], dtype=np.uint64)
    hash_b = np.array([1, 1, 2, 3], dtype=np.uint64)
    ids, distinct, collisions = numpy_passes._dense_ids(hash_a, hash_b, np.int64(4))
    assert ids.tolist() == [0, 0, 1, 0]
    assert (distinct, collisions) == (2, 1)


def test_a_detected_collision_reruns_with_new_keys(monkeypatch) -> None:
    calls = []
    real = numpy_passes.NUMPY_KERNELS.dense_ids

    def first_collides(hash_a, hash_b, bits):
        ids, distinct, collisions = real(hash_a, hash_b, bits)
        calls.append(1)
        return ids, distinct, (1 if len(calls) == 1 else collisions)

    monkeypatch.setattr(numpy_passes, "NUMPY_KERNELS",
                        dataclasses.replace(numpy_passes.NUMPY_KERNELS, dense_ids=first_collides))
    offsets, values = _flat([[1, 2], [1, 2]])
    content = PromptContent(offsets=offsets, values=values, prompt_len=np.diff(offsets))
    chains = numpy_passes.build_block_chains(content, None, rules_for("none", block_size_tokens=1))
    assert len(calls) == 2
    assert chains.ids.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("seed", range(60))
def test_histograms_equal_the_compiled_ones(seed: int) -> None:
    # GIVEN arbitrary dense ids (repeats within a request too), caps, partitions and outputs
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 40))
    pool = int(rng.integers(1, 30))
    lengths = rng.integers(0, 12, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.integers(0, pool, int(offsets[-1]))
    if seed % 2:  # prefix-like: requests mostly repeat an earlier request's leading ids
        for r in range(1, n):
            src = int(rng.integers(0, r))
            k = min(lengths[r], lengths[src], int(rng.integers(0, 12)))
            ids[offsets[r]:offsets[r] + k] = ids[offsets[src]:offsets[src] + k]
    block = int(rng.integers(1, 17))
    last_tokens = rng.integers(1, block + 1, n)  # a partial last block, or a full one
    cap = rng.integers(-1, 14, n)
    kw = {}
    if seed % 3 == 1:
        out_len = rng.integers(0, 4, n)
        out_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(out_len, out=out_offsets[1:])
        kw = {"output_offsets": out_offsets,
              "output_ids": rng.integers(0, pool, int(out_offsets[-1]))}
    parts = rng.integers(0, 3, n) if seed % 4 == 2 else None
    for order in ("tail-first", "head-first"):
        blocks_ = SweepBlocks(offsets=offsets, ids=ids, block_size_tokens=block,
                              last_block_tokens=last_tokens, max_hit_blocks=cap, n_ids=pool,
                              **kw)
        # WHEN both passes measure the stack distances
        compiled = stack_distance_histograms(blocks_, touch_order=order, partitions=parts)
        numpy_ = numpy_passes.stack_distance_histograms(blocks_, touch_order=order,
                                                        partitions=parts)
        # THEN the histograms are identical
        assert np.array_equal(numpy_.hit_tokens, compiled.hit_tokens), order
        assert np.array_equal(numpy_.hit_blocks, compiled.hit_blocks), order


@pytest.mark.parametrize(("block", "expected"), [(1, 3), (2, 2)])
def test_worked_example_of_the_spec(block: int, expected: int) -> None:
    # replay-spec §7: B = 1 hits [0, 3, 0]; B = 2 hits [0, 2, 0]; unlimited, one namespace.
    offsets, values = _flat([[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]])
    rules = rules_for("none", block_size_tokens=block)
    content = PromptContent(offsets=offsets, values=values, prompt_len=np.diff(offsets))
    chains = numpy_passes.build_block_chains(content, None, rules)
    curve = numpy_passes.sweep(chains, touch_order="tail-first")
    assert curve.unlimited_hit_tokens == expected
    _assert_same_curve(curve, sweep(blocks.build_block_chains(content, None, rules),
                                    touch_order="tail-first"))


def _assert_same_curve(curve, ref_curve) -> None:
    for field in dataclasses.fields(curve):
        x, y = getattr(curve, field.name), getattr(ref_curve, field.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


def _both_sweeps(trace, preset: str) -> None:
    rules, name, notes = effective_rules(trace, preset)
    spec = CurveSectionSpec(preset=name, points=2, notes=notes)
    swept = small.sweep_trace(trace, rules, spec)
    assert swept is not None
    section, curve = swept
    ref_section, ref_curve = sweep_trace(trace, rules, spec)
    assert section == ref_section
    _assert_same_curve(curve, ref_curve)


def _compiled_overview(trace, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(small, "MAX_WORK", -1)
        return reuse_overview(trace)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("lazy", [True, False])
def test_overview_equals_the_compiled_one_on_the_samples(path: Path, lazy: bool,
                                                         monkeypatch) -> None:
    trace = read_trace(path, lazy_content=lazy)
    if trace.content_column is None:
        pytest.skip("no prompt content")
    assert reuse_overview(trace) == _compiled_overview(trace, monkeypatch)
    for preset in ("vllm", "mooncake", "none"):
        _both_sweeps(trace, preset)


@pytest.mark.parametrize("name", MOONCAKE)
def test_overview_equals_the_compiled_one_on_mooncake(name: str, monkeypatch) -> None:
    trace = read_trace(shared_trace(name))
    assert reuse_overview(trace) == _compiled_overview(trace, monkeypatch)
    for preset in ("vllm", "mooncake", "sglang"):
        _both_sweeps(trace, preset)


def test_large_traces_and_per_instance_caches_keep_the_compiled_path(monkeypatch) -> None:
    trace = read_trace(ROOT / "sample_traces" / "chat.parquet", lazy_content=True)
    rules, name, _ = effective_rules(trace, "vllm")
    spec = CurveSectionSpec(preset=name)
    assert small.sweep_trace(trace, rules, spec) is not None
    assert small.sweep_trace(trace, rules.with_(scope="instance", instances=2), spec) is None
    units, blocks = small.sweep_size(trace, rules)
    assert (units, blocks) == (1_433_300, 1_433_300 // 16)
    monkeypatch.setattr(small, "MAX_WORK", units + small.BLOCK_WORK * blocks - 1)
    assert small.sweep_trace(trace, rules, spec) is None


def test_analyze_of_the_chat_sample_does_not_import_numba() -> None:
    code = ("import sys\nfrom yaotu_trace.cli import main\n"
            f"assert main(['analyze', {str(ROOT / 'sample_traces' / 'chat.parquet')!r}, "
            "'--format', 'json']) == 0\n"
            "print('numba loaded' if 'numba' in sys.modules else 'numba absent', "
            "file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "numba absent"
    assert '"available": true' in done.stdout


@pytest.mark.parametrize("seed", range(20))
def test_histograms_of_chains_skip_the_search(seed: int, monkeypatch) -> None:
    # GIVEN chain-like ids (no request repeats a block), caps, partitions and outputs
    rng = np.random.default_rng(2000 + seed)
    n = int(rng.integers(1, 40))
    lengths = rng.integers(0, 12, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pool = 40
    ids = np.concatenate([rng.permutation(pool)[:k] for k in lengths]).astype(np.int64)
    for r in range(1, n):  # requests mostly repeat an earlier request's leading ids
        src = int(rng.integers(0, r))
        k = min(lengths[r], lengths[src], int(rng.integers(0, 12)))
        head = ids[offsets[src]:offsets[src] + k]
        rest = [i for i in rng.permutation(pool) if i not in head][:lengths[r] - k]
        ids[offsets[r]:offsets[r + 1]] = np.concatenate([head, rest])
    kw = {}
    if seed % 2:  # outputs: ids no prompt uses
        out_len = rng.integers(0, 4, n)
        out_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(out_len, out=out_offsets[1:])
        kw = {"output_offsets": out_offsets,
              "output_ids": pool + np.arange(int(out_offsets[-1]), dtype=np.int64)}
    parts = rng.integers(0, 3, n) if seed % 4 == 2 else None
    blocks_ = SweepBlocks(offsets=offsets, ids=ids, block_size_tokens=16,
                          last_block_tokens=rng.integers(1, 17, n),
                          max_hit_blocks=rng.integers(-1, 14, n), n_ids=pool + 100, **kw)

    def searched(*args: object) -> None:
        raise AssertionError("a chain's last touches are its own touches' previous ones")

    monkeypatch.setattr(numpy_passes, "_last_touch", searched)
    for order in ("tail-first", "head-first"):
        # WHEN both passes measure the stack distances
        compiled = stack_distance_histograms(blocks_, touch_order=order, partitions=parts)
        numpy_ = numpy_passes.stack_distance_histograms(blocks_, touch_order=order,
                                                        partitions=parts)
        # THEN the histograms are identical, without the search for the last touches
        assert np.array_equal(numpy_.hit_tokens, compiled.hit_tokens), order
        assert np.array_equal(numpy_.hit_blocks, compiled.hit_blocks), order
