"""The streamed Parquet path gives exactly what the in-memory path gives, and fails as clearly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import ResourceLimitError, TraceSchemaError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import effective_rules, memory, replay_trace_with_requests
from yaotu_trace.prefix.chain_cache import holding_streamed_chains
from yaotu_trace.prefix.kernels import blocks, stream
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace

CHAT = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"


def _token_trace(path: Path, seed: int, n: int = 300, nulls: bool = False,
                 instances: int = 0) -> Path:
    """A small token trace with shared prefixes, written as canonical Parquet (with an
    instance column when `instances` is given)."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 50, int(rng.integers(0, 70))).tolist() for _ in range(6)]
    prompts = [heads[int(rng.integers(0, 6))] + rng.integers(0, 50, int(rng.integers(0, 40)))
               .tolist() for _ in range(n)]
    frame = pd.DataFrame({
        "request_id": [f"q{i}" for i in range(n)],
        "arrival_s": np.arange(n, dtype=float),
        "tenant": [f"t{i % 3}" for i in range(n)],
        "prompt_len": [len(p) for p in prompts],
        "output_len": 1,
        "prompt_tokens": [None if nulls and i % 17 == 5 else p for i, p in enumerate(prompts)],
    })
    if instances:
        frame["instance"] = [f"i{i % instances}" for i in range(n)]
    write_trace(frame, path)
    return path


def _both(path: Path, preset: str | None = None, **overrides: object) -> list[str]:
    """Replay and sweep reports of the eager and the streamed load, as JSON text."""
    out = []
    for lazy in (False, True):
        trace = read_trace(path, lazy_content=lazy)
        assert (trace.lazy is not None) is lazy
        rules, name, notes = effective_rules(trace, preset, **overrides)
        summary, requests = replay_trace_with_requests(trace, rules, preset=name, notes=notes)
        section, _ = sweep_trace(trace, rules, CurveSectionSpec(preset=name, notes=notes))
        columns = {k: np.asarray(v).tolist() for k, v in requests.to_columns().items()}
        out.append(json.dumps([summary.to_dict(), columns, repr(section)], default=str))
    return out


@pytest.mark.parametrize("overrides", [
    {}, {"capacity_blocks": 40}, {"block_size_tokens": 1}, {"block_size_tokens": 4},
    {"cache_partial_blocks": True, "capacity_blocks": 7}, {"touch_order": "head-first"},
    {"scope": "instance", "instances": 3}, {"cache_outputs": True},
])
def test_streamed_sample_trace_reports_equal_the_in_memory_ones(overrides: dict) -> None:
    eager, streamed = _both(CHAT, **overrides)
    assert streamed == eager


@pytest.mark.parametrize(("seed", "flat"), [(1, False), (2, False), (3, False), (1, True),
                                          (3, True)])
def test_streamed_chains_equal_in_memory_chains_over_many_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, flat: bool) -> None:
    from yaotu_trace.prefix import prepare as prepare_module

    monkeypatch.setattr(stream, "BATCH_VALUES", 50)  # a handful of requests per batch
    monkeypatch.setattr(stream, "WHOLE_GROUP_VALUES", 0)  # (the row group cut into batches)
    monkeypatch.setattr(prepare_module, "SMALL_CHAIN_WORK", 0)  # the compiled, streamed build
    if flat:  # the ids held flat from the first batch on, as a trace whose ids do not run
        monkeypatch.setattr(blocks, "RUN_SLACK", -2**40)
    path = _token_trace(tmp_path / "t.parquet", seed, nulls=seed == 3)
    eager_trace = read_trace(path)
    lazy_trace = read_trace(path, lazy_content=True)
    for rules in (rules_for("vllm"), rules_for("sglang"),
                  rules_for("none", block_size_tokens=3, cache_partial_blocks=True)):
        a = prepare(eager_trace).chains(rules)
        b = prepare(lazy_trace, stream=True).chains(rules)
        for field in ("offsets", "ids", "block_tokens", "last_block_tokens", "max_hit_blocks",
                      "prompt_tokens"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert a.num_distinct == b.num_distinct
    eager, streamed = _both(path, capacity_blocks=25)
    assert streamed == eager
    eager, streamed = _both(path, cache_outputs=True)  # no output ids: nothing to cache
    assert streamed == eager


@pytest.mark.parametrize("runs_per_id", [0.01, 0.2, 0.9])
def test_run_held_ids_come_out_as_added(monkeypatch: pytest.MonkeyPatch,
                                        runs_per_id: float) -> None:
    # GIVEN ids in batches, as runs of consecutive ids (a new run with the given odds per id)
    monkeypatch.setattr(blocks, "RUN_SLACK", 100)
    rng = np.random.default_rng(5)
    steps = np.where(rng.random(40_000) < runs_per_id, rng.integers(0, 5_000, 40_000), 1)
    ids = (np.cumsum(steps) % 2**31).astype(np.int32)
    held = blocks._RunIds(ids.size + 7)
    # WHEN added batch by batch (some batches continuing the run the one before ended)
    for part in np.array_split(ids, 37):
        held.add(part)
    # THEN the ids come out as they went in; a trace whose ids run is held as runs (8 bytes a
    # run, about 1 % of them here), one whose ids run less than one in four is held flat
    np.testing.assert_array_equal(held.ids(), ids)
    assert (held.flat is None) == (runs_per_id < 0.25)
    if held.flat is None:
        assert held.count <= 2 * runs_per_id * ids.size + 37


def test_streamed_block_id_trace_equals_in_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    ids = [rng.integers(-5, 30, int(rng.integers(1, 9))).tolist() for _ in range(200)]
    frame = pd.DataFrame({
        "arrival_s": np.arange(200, dtype=float),
        "prompt_len": [len(b) * 16 - int(rng.integers(0, 16)) for b in ids],
        "output_len": 1,
        "prompt_block_ids": ids,
    })
    path = tmp_path / "ids.parquet"
    write_trace(frame, path, source_block_size=16)
    for preset in ("mooncake", "vllm"):
        eager, streamed = _both(path, preset)
        assert streamed == eager


def test_unsorted_arrivals_load_eagerly(tmp_path: Path) -> None:
    path = _token_trace(tmp_path / "t.parquet", 4, n=20)
    frame = pd.read_parquet(path)
    frame["arrival_s"] = frame["arrival_s"].to_numpy()[::-1]
    write_trace(frame, path)
    assert read_trace(path, lazy_content=True).lazy is None


def test_a_length_mismatch_names_the_row(tmp_path: Path) -> None:
    path = _token_trace(tmp_path / "t.parquet", 5, n=30)
    frame = pd.read_parquet(path)
    frame.loc[12, "prompt_len"] = frame.loc[12, "prompt_len"] + 1
    write_trace(frame, path)
    trace = read_trace(path, lazy_content=True)
    with pytest.raises(TraceSchemaError, match=r"row 13, column 'prompt_len'"):
        prepare(trace, stream=True).chains(rules_for("vllm"))


def test_negative_tokens_are_refused_while_streaming(tmp_path: Path) -> None:
    path = _token_trace(tmp_path / "t.parquet", 6, n=30)
    frame = pd.read_parquet(path)
    tokens = [list(t) for t in frame["prompt_tokens"]]
    row = next(i for i in range(20, 30) if tokens[i])
    tokens[row][0] = -3
    frame["prompt_tokens"] = tokens
    write_trace(frame, path)
    trace = read_trace(path, lazy_content=True)
    with pytest.raises(TraceSchemaError, match=rf"row {row + 1}, .*token ids must be >= 0"):
        prepare(trace, stream=True).chains(rules_for("vllm"))


def test_too_little_memory_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 1000)
    trace = read_trace(CHAT, lazy_content=True)
    with pytest.raises(ResourceLimitError, match=r"needs about .* GiB of memory but only .* "
                                                 r"GiB is available"):
        prepare(trace, stream=True).chains(rules_for("sglang"))
    with pytest.raises(ResourceLimitError, match="needs about"):
        prepare(read_trace(CHAT)).chains(rules_for("sglang"))


def test_available_memory_is_known_on_linux() -> None:
    avail = memory.available_bytes()
    assert avail is None or avail > 0


def test_a_second_prepare_of_the_same_file_reads_it_no_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a streamed trace, and the file's passes counted
    from yaotu_trace.prefix import partition
    from yaotu_trace.prefix import prepare as prepare_module

    monkeypatch.setattr(stream, "BATCH_VALUES", 50)
    monkeypatch.setattr(prepare_module, "SMALL_CHAIN_WORK", 0)  # the compiled, streamed build
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)  # and the compiled namespacing
    path = _token_trace(tmp_path / "t.parquet", 7)
    builds = []
    real = blocks.build_block_chains_streaming
    monkeypatch.setattr(blocks, "build_block_chains_streaming",
                        lambda *a, **k: builds.append(1) or real(*a, **k))
    named = []
    real_named = partition.with_namespaces
    monkeypatch.setattr(partition, "with_namespaces",
                        lambda *a, **k: named.append(1) or real_named(*a, **k))
    reads = []
    real_read = stream.ParquetPrompts._read
    monkeypatch.setattr(stream.ParquetPrompts, "_read",
                        lambda self: reads.append(1) or real_read(self))
    trace = read_trace(path, lazy_content=True)
    eager = prepare(read_trace(path))
    rules = rules_for("vllm")
    # WHEN three analyses of one command (which holds the chains) prepare it anew: without
    # namespaces, with them, and asking for the ids per request
    with holding_streamed_chains():
        first = prepare(trace, stream=True).chains(rules, namespaces=False)
        again = prepare(trace, stream=True)
        tenants = again.chains(rules)
        offsets = again.unit_offsets()
        tenants_again = prepare(trace, stream=True).chains(rules.with_(last_token_rule=False))
    # THEN the file was hashed and read once, the tenants added once, and each answer is the
    # one a build of its own gives (the tenants hashed in)
    assert (len(builds), len(reads), len(named)) == (1, 1, 1)
    np.testing.assert_array_equal(tenants_again.ids, tenants.ids)
    assert tenants_again.max_hit_blocks.tolist() != tenants.max_hit_blocks.tolist()  # its cap
    for got, want in ((first, eager.chains(rules, namespaces=False)),
                      (tenants, eager.chains(rules))):
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.max_hit_blocks, want.max_hit_blocks)
        assert got.num_distinct == want.num_distinct
    np.testing.assert_array_equal(offsets, eager.unit_offsets())
    # and a file written again is read again
    _token_trace(path, 8)
    trace = read_trace(path, lazy_content=True)
    with holding_streamed_chains():
        prepare(trace, stream=True).chains(rules)
        assert len(builds) == 2
    # and outside a hold (a replay alone) nothing is kept: each build is used once, with the
    # tenants hashed in rather than added after (no relabelling table), to the same ids
    alone = prepare(trace, stream=True).chains(rules)
    prepare(trace, stream=True).chains(rules)
    assert len(builds) == 4 and len(named) == 2
    want = prepare(read_trace(path)).chains(rules)
    np.testing.assert_array_equal(alone.ids, want.ids)
    np.testing.assert_array_equal(alone.max_hit_blocks, want.max_hit_blocks)
    assert alone.num_distinct == want.num_distinct


@pytest.mark.parametrize("command", ["diagnose", "replay"])
def test_a_command_hashes_its_streamed_trace_once_and_keeps_nothing_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    # GIVEN a streamed trace whose chains are built by the compiled, streamed pass, counted
    from yaotu_trace.commands.diagnose import diagnose
    from yaotu_trace.prefix import chain_cache, partition, waterfall
    from yaotu_trace.prefix import prepare as prepare_module

    monkeypatch.setattr(prepare_module, "SMALL_CHAIN_WORK", 0)
    path = _token_trace(tmp_path / "t.parquet", 9, instances=2)  # diagnose's routing what-if
    builds = []
    real = blocks.build_block_chains_streaming
    monkeypatch.setattr(blocks, "build_block_chains_streaming",
                        lambda *a, **k: builds.append(1) or real(*a, **k))
    named = []
    real_named = partition.with_namespaces
    for module in (partition, waterfall):  # wherever the tenants could be added
        monkeypatch.setattr(module, "with_namespaces",
                            lambda *a, **k: named.append(1) or real_named(*a, **k),
                            raising=False)
    # WHEN the command runs (diagnose prepares the trace several times; replay's waterfall
    # replays it under every rule step)
    if command == "replay":
        trace = read_trace(path, lazy_content=True)
        rules, name, notes = effective_rules(trace, "vllm")
        replay_trace_with_requests(trace, rules, preset=name, notes=notes)
    else:
        diagnose(path)
    # THEN the file was hashed once, its tenants added once (the waterfall's namespaced
    # chains are the ones diagnose's routing what-if replays again), and nothing is kept once
    # the command is done
    assert len(builds) == 1 and len(named) == 1
    assert not chain_cache._KEPT


def test_row_groups_decoded_side_by_side_come_out_in_file_order() -> None:
    # GIVEN jobs that finish out of order (later ones faster), run on two threads
    import threading
    import time

    def job(j: int) -> list[int]:
        time.sleep(0.002 * (8 - j))
        return [10 * j, 10 * j + 1]

    # WHEN their batches are consumed
    got = list(stream._in_order(job, 8, workers=2, ahead=3))  # type: ignore[arg-type]
    # THEN they come in job order, and no reader is left running
    assert got == [v for j in range(8) for v in (10 * j, 10 * j + 1)]
    assert not [t for t in threading.enumerate() if t.name.startswith("parquet-reader-")]


def test_a_failed_row_group_raises_after_the_ones_before_it_and_stops_the_readers() -> None:
    import threading

    started = []

    def job(j: int) -> list[int]:
        started.append(j)
        if j == 3:
            raise TraceSchemaError(f"row group {j + 1} is damaged")
        return [j]

    got = []
    with pytest.raises(TraceSchemaError, match="row group 4"):
        got.extend(stream._in_order(job, 100, workers=2, ahead=2))  # type: ignore[arg-type]
    assert got == [0, 1, 2]
    assert max(started) < 3 + 2 + 2  # no further ahead than asked
    assert not [t for t in threading.enumerate() if t.name.startswith("parquet-reader-")]


def test_two_readers_give_the_batches_of_one(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a file of many row groups, read by two reader threads and by one
    path = tmp_path / "t.parquet"
    frame = pd.read_parquet(_token_trace(tmp_path / "src.parquet", 11, n=400))
    frame.to_parquet(path, row_group_size=7)
    trace = read_trace(path, lazy_content=True)
    monkeypatch.setattr(stream, "BATCH_VALUES", 50)
    prompts = prepare(trace, stream=True).stream
    assert prompts is not None
    both = []
    for readers in (2, 1):
        monkeypatch.setattr(stream, "READERS", readers)
        both.append([(b.row0, b.offsets.tolist(), b.values.tolist()) for b in prompts.batches()])
    # THEN the batches are the same, in the same order
    assert both[0] == both[1]
    assert len(both[0]) > 10
