"""Partitioned replay, --grid and the Dask runner give exactly the single-process results."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.errors import ConfigError, ExitCode, WorkerLostError
from yaotu_trace.prefix import Parallelism, effective_rules, partition, replay_trace
from yaotu_trace.prefix.grid import GridCapacity, replay_grid
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.compact import CompactChains, IdRuns
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.partition import (
    SERIAL_RUNNER,
    ReplayJob,
    cache_partitions,
    open_runner,
    replay_many,
    with_namespaces,
)
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rates import leading_seen_blocks
from yaotu_trace.prefix.rules import Scope
from yaotu_trace.prefix.waterfall import compute_waterfall


def shared_prefix_trace(n: int = 240, seed: int = 7, *, outputs: bool = False,
                        repeats: float = 0.0) -> Trace:
    """Tenants sharing system prompts, sessions growing turn by turn, an instance column; with
    `repeats`, that share of the requests sends an earlier prompt again, whole."""
    rng = np.random.default_rng(seed)
    systems = [list(rng.integers(0, 50, size=int(rng.integers(20, 70)))) for _ in range(4)]
    sessions: dict[int, list[int]] = {}
    prompts, tenants, instances, outs = [], [], [], []
    for _ in range(n):
        s = int(rng.integers(0, 30))
        history = sessions.setdefault(s, list(systems[s % 4]))
        history += list(rng.integers(0, 50, size=int(rng.integers(1, 40))))
        if repeats and prompts and rng.random() < repeats:
            prompts.append(list(prompts[int(rng.integers(0, len(prompts)))]))
        else:
            prompts.append(list(history))
        tenants.append(f"t{s % 5}")
        instances.append(f"i{int(rng.integers(0, 3))}")
        outs.append(list(rng.integers(0, 50, size=int(rng.integers(1, 20)))))
    data: dict[str, object] = {
        "arrival_s": np.arange(n, dtype=float),
        "prompt_len": [len(p) for p in prompts],
        "output_len": [len(o) for o in outs],
        "prompt_tokens": prompts,
        "tenant": tenants,
        "instance": instances,
        "finish_s": np.arange(n, dtype=float) + rng.uniform(0.5, 5.0, size=n),
    }
    if outputs:
        data["output_tokens"] = outs
    return normalize(RawTrace(requests=pd.DataFrame(data), format_name="test"), "test.parquet")


def _without_notes(summary: object) -> dict[str, object]:
    d = summary.to_dict()  # type: ignore[attr-defined]
    d.pop("notes")
    return d


CASES = [
    {"scope": "instance", "capacity_blocks": 12},
    {"scope": "instance", "route": "round-robin", "instances": 4, "capacity_blocks": 9,
     "eviction": "fifo"},
    {"scope": "instance", "route": "random", "instances": 3, "capacity_blocks": 7,
     "eviction": "lfu", "touch_order": "head-first"},
    {"scope": "instance", "route": "least-loaded", "instances": 3, "capacity_blocks": 10},
    {"scope": "instance", "route": "prefix-affinity", "instances": 3, "capacity_blocks": 10},
    {"capacity_blocks": 6, "capacity_per_tenant": True},
    {"scope": "instance", "capacity_blocks": 5, "capacity_per_tenant": True, "eviction": "lfu"},
    {"capacity_blocks": 20},
]


@pytest.mark.parametrize("overrides", CASES)
def test_partitioned_replay_equals_one_process(overrides: dict[str, object]) -> None:
    # GIVEN a trace whose caches split (instances, tenants) or do not (global, affinity)
    trace = shared_prefix_trace()
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, **overrides)
    # WHEN it is replayed in one process and in two worker processes
    one = replay_trace(trace, rules)
    two = replay_trace(trace, rules, parallel=Parallelism(jobs=2))
    # THEN every number (waterfall, per tenant, per instance, evictions) is the same
    assert _without_notes(one) == _without_notes(two)
    assert any("in parallel" in n or "cannot be split" in n for n in two.notes)


@pytest.mark.parametrize("overrides", [c for c in CASES if not c.get("capacity_per_tenant")])
def test_partitions_merge_to_the_engine_result(overrides: dict[str, object]) -> None:
    trace = shared_prefix_trace(outputs=True)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, cache_outputs=True,
                                  **overrides)
    p = prepare(trace, with_outputs=True)
    chains = p.chains(rules)
    direct = replay(chains, rules, p.instance_codes, arrival_s=p.arrival_s, finish_s=p.finish_s)
    parts = cache_partitions(rules, p.num_requests, instance_codes=p.instance_codes,
                             tenant_codes=p.tenant_codes, arrival_s=p.arrival_s,
                             finish_s=p.finish_s, chains=chains)
    merged = replay_many([ReplayJob(chains=chains, rules=rules, instance_codes=p.instance_codes,
                                    arrival_s=p.arrival_s, finish_s=p.finish_s,
                                    partitions=parts)], SERIAL_RUNNER)[0]
    np.testing.assert_array_equal(direct.hit_tokens, merged.hit_tokens)
    assert (direct.evicted_blocks, direct.inserted_blocks) == (merged.evicted_blocks,
                                                              merged.inserted_blocks)
    if direct.instance is not None:
        np.testing.assert_array_equal(direct.instance, merged.instance)


def test_per_tenant_capacity_is_each_tenant_replayed_alone() -> None:
    trace = shared_prefix_trace()
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, capacity_blocks=6,
                                  capacity_per_tenant=True)
    summary = replay_trace(trace, rules, waterfall=False)
    hits = 0
    for tenant in sorted(set(trace.requests["tenant"])):
        rows = trace.requests[trace.requests["tenant"] == tenant].reset_index(drop=True)
        alone = normalize(RawTrace(requests=rows, format_name="test"), "t.parquet")
        hits += replay_trace(alone, rules.with_(capacity_per_tenant=False),
                             waterfall=False).saved_prefill_tokens
    assert summary.saved_prefill_tokens == hits


def test_per_tenant_capacity_needs_tenant_isolation() -> None:
    with pytest.raises(ConfigError, match="tenant-isolation"):
        effective_rules(shared_prefix_trace(), "none", capacity_per_tenant=True)


def test_with_namespaces_equals_hashing_the_tenant_in() -> None:
    trace = shared_prefix_trace(outputs=True)
    p = prepare(trace, with_outputs=True)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, cache_outputs=True)
    derived = with_namespaces(p.chains(rules.with_(tenant_isolation=False)), p.tenant_codes)
    hashed = p.chains(rules)
    assert derived.num_distinct == hashed.num_distinct
    np.testing.assert_array_equal(derived.ids, hashed.ids)
    np.testing.assert_array_equal(derived.output_ids, hashed.output_ids)


def test_compiled_namespacing_equals_hashing_the_tenant_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the compiled relabelling a large trace takes (forced here on a small one)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)
    trace = shared_prefix_trace()
    p = prepare(trace)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4)
    # WHEN the tenant is added to ids hashed without it
    derived = with_namespaces(p.chains(rules.with_(tenant_isolation=False)), p.tenant_codes)
    # THEN the ids are those of hashing the tenant into every block
    hashed = p.chains(rules)
    assert derived.num_distinct == hashed.num_distinct
    np.testing.assert_array_equal(derived.ids, hashed.ids)


def test_one_namespace_leaves_the_chains_as_they_are() -> None:
    trace = shared_prefix_trace()
    p = prepare(trace)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, tenant_isolation=False)
    chains = p.chains(rules)
    same = with_namespaces(chains, np.full(p.num_requests, 3, dtype=np.int64))
    assert same is chains
    # and that is what renumbering the pairs in numpy gives
    np.testing.assert_array_equal(partition._first_appearance_ids(chains.ids), chains.ids)


def _waterfall_jobs() -> tuple[Any, BlockChains, Any, list[ReplayJob]]:
    """A waterfall's two jobs splitting the same chains by instance and tenant: (the prepared
    trace, its chains, the partitions, the jobs)."""
    trace = shared_prefix_trace()
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, scope="instance",
                                  capacity_blocks=5, capacity_per_tenant=True)
    p = prepare(trace)
    chains = p.chains(rules)
    parts = cache_partitions(rules, p.num_requests, instance_codes=p.instance_codes,
                             tenant_codes=p.tenant_codes, chains=chains)
    jobs = [ReplayJob(chains=chains, rules=r, instance_codes=p.instance_codes, partitions=parts)
            for r in (rules, rules.with_(capacity_blocks=9))]
    return p, chains, parts, jobs


def _count_live_partitions(monkeypatch: pytest.MonkeyPatch) -> Callable[[], tuple[int, int]]:
    """Count the partitions built and the most alive at once in this process; the returned
    call gives (built, most alive)."""
    live: list[weakref.ref[np.ndarray]] = []
    most = 0
    real = partition.sub_chains

    def counted(c: object, rows: np.ndarray) -> object:
        nonlocal most
        gc.collect()
        most = max(most, sum(ref() is not None for ref in live) + 1)
        sub = real(c, rows)  # type: ignore[arg-type]
        live.append(weakref.ref(sub.ids))  # its own array, alive as long as it is
        return sub

    monkeypatch.setattr(partition, "sub_chains", counted)
    return lambda: (len(live), most)


def test_in_process_partitions_are_built_one_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a waterfall's two jobs splitting the same chains by instance and tenant
    p, chains, parts, jobs = _waterfall_jobs()
    counts = _count_live_partitions(monkeypatch)
    # WHEN they run in this process
    here = replay_many(jobs, SERIAL_RUNNER)
    # THEN each partition was built once, alone, and the results are the engine's
    groups = len(np.unique(parts.codes))
    assert counts() == (groups, 1)
    for job, result in zip(jobs, here, strict=True):
        direct = replay(chains, job.rules, p.instance_codes)
        np.testing.assert_array_equal(direct.hit_tokens, result.hit_tokens)
        assert direct.evicted_blocks == result.evicted_blocks


def test_dask_gets_the_partitions_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dask.distributed", reason="the optional dask extra is not installed")
    # GIVEN a waterfall's two jobs splitting the same chains by instance and tenant
    _, _, parts, jobs = _waterfall_jobs()
    counts = _count_live_partitions(monkeypatch)
    made: list[int] = []
    real_task = partition._partition_task

    def task(*args: Any) -> tuple[Any, ...]:
        made.append(len(made))
        return real_task(*args)

    monkeypatch.setattr(partition, "_partition_task", task)
    # WHEN they go to a local Dask cluster
    with open_runner(Parallelism(dask="local")) as runner:
        shipped = replay_many(jobs, runner)
    # THEN each partition's task was made as it was shipped, with no partition's flat ids
    # made in this process (the workers renumber them), and the results are those of this
    # process
    groups = len(np.unique(parts.codes))
    assert groups > 2 and len(made) == 2 * groups and counts() == (0, 0)
    for here, there in zip(replay_many(jobs, SERIAL_RUNNER), shipped, strict=True):
        np.testing.assert_array_equal(here.hit_tokens, there.hit_tokens)
        assert here.evicted_blocks == there.evicted_blocks


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
def test_grid_rows_equal_single_replays(eviction: str) -> None:
    # GIVEN a grid of block sizes, isolation and capacities
    trace = shared_prefix_trace()
    base, _, _ = effective_rules(trace, "vllm", eviction=eviction)
    caps = [GridCapacity(label=label, blocks_by_block_size=dict.fromkeys((4, 8), blocks))
            for label, blocks in (("5", 5), ("40", 40), ("unlimited", None))]
    # WHEN it runs in one batch
    grid = replay_grid(trace, base, block_sizes=[4, 8], isolations=[True, False],
                       capacities=caps, runner=SERIAL_RUNNER)
    # THEN each row is the replay under its own rules
    assert len(grid.rows) == 12
    for row in grid.rows:
        rules = base.with_(block_size_tokens=row.block_size_tokens,
                           tenant_isolation=row.tenant_isolation,
                           capacity_blocks=row.capacity_blocks)
        assert row.saved_prefill_tokens == replay_trace(
            trace, rules, waterfall=False).saved_prefill_tokens, row


def test_grid_with_instances_and_workers_equals_serial() -> None:
    trace = shared_prefix_trace()
    base, _, _ = effective_rules(trace, "vllm", scope="instance")
    caps = [GridCapacity(label=str(c), blocks_by_block_size={4: c, 16: c}) for c in (3, 30)]
    kwargs = {"block_sizes": [4, 16], "isolations": [True], "capacities": caps}
    serial = replay_grid(trace, base, runner=SERIAL_RUNNER, **kwargs)
    with open_runner(Parallelism(jobs=2)) as runner:
        pooled = replay_grid(trace, base, runner=runner, **kwargs)
    assert serial == pooled


def test_dask_local_cluster_equals_one_process() -> None:
    pytest.importorskip("dask.distributed", reason="the optional dask extra is not installed")
    # GIVEN per-instance caches and per-tenant capacity
    trace = shared_prefix_trace()
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, scope="instance",
                                  capacity_blocks=8, capacity_per_tenant=True)
    # WHEN the partitions run on a local cluster of 2 worker processes
    one = replay_trace(trace, rules)
    on_dask = replay_trace(trace, rules, parallel=Parallelism(dask="local"))
    # THEN the report's numbers are identical
    assert _without_notes(one) == _without_notes(on_dask)
    assert any("Dask" in n for n in on_dask.notes)


def _total(values: np.ndarray) -> int:
    return int(values.sum())


def test_dask_ships_large_partitions_as_data_without_a_warning() -> None:
    pytest.importorskip("dask.distributed", reason="the optional dask extra is not installed")
    # GIVEN partitions of 16 MB each, above the size at which Dask warns of a large task graph
    parts = [(np.full(2_000_000, k, dtype=np.int64),) for k in (1, 2)]
    # WHEN they run on a local cluster
    with warnings.catch_warnings(record=True) as caught, \
            open_runner(Parallelism(dask="local")) as runner:
        warnings.simplefilter("always")
        totals = runner.map(_total, parts)
    # THEN the results come back in order and stderr gets no warning about the graph's size
    assert totals == [2_000_000, 4_000_000]
    assert not [w for w in caught if "large graph" in str(w.message)]


def test_a_local_cluster_starts_quietly_beside_another_on_dasks_port() -> None:
    pytest.importorskip("dask.distributed", reason="the optional dask extra is not installed")
    import socket

    # GIVEN Dask's default port 8787 held, as a user's own cluster or another run holds it
    held = socket.socket()
    try:
        held.bind(("0.0.0.0", 8787))
    except OSError:
        held.close()
        pytest.skip("port 8787 is in use here already")
    held.listen()
    # WHEN --dask local starts its cluster (warnings are errors in this suite)
    try:
        with open_runner(Parallelism(dask="local")) as runner:
            totals = runner.map(_total, [(np.arange(4),)])
    finally:
        held.close()
    # THEN it runs, with no "Port 8787 is already in use" on stderr
    assert totals == [6]


def test_dask_missing_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(ConfigError, match=r"yaotu-trace\[dask\]"), \
            open_runner(Parallelism(dask="local")):
        pass


def _fails(n: int) -> int:
    raise ValueError(f"partition {n} is bad")


def _dies(n: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return n


def test_a_worker_error_is_raised_here_and_the_workers_are_stopped() -> None:
    with pytest.raises(ValueError, match=r"partition [12] is bad"), \
            open_runner(Parallelism(jobs=2)) as runner:
        runner.map(_fails, [(1,), (2,)])


def test_a_worker_killed_mid_task_is_an_error_not_a_wait() -> None:
    """The out-of-memory killer's SIGKILL: the run stops with a line that says so, instead of
    waiting for a result that cannot come."""
    with pytest.raises(WorkerLostError, match=r"killed by SIGKILL.*fewer --jobs") as lost, \
            open_runner(Parallelism(jobs=2)) as runner:
        runner.map(_dies, [(1,), (2,), (3,)])
    assert lost.value.exit_code == ExitCode.IO  # the machine, not a file


_ORPHAN = """
import os, signal, sys, time
from yaotu_trace.prefix.partition import Parallelism, open_runner
from test_partition import _nap

if __name__ == "__main__":
    with open_runner(Parallelism(jobs=2)) as runner:
        if os.fork() == 0:
            time.sleep(2.5)
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(0)
        runner.map(_nap, [(4.0,), (4.0,)])
"""


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_workers_whose_parent_was_killed_end_quietly(tmp_path: Path) -> None:
    """The parent killed outright (SIGKILL, the out-of-memory killer): each worker finds its
    pipe closed when it answers, and ends without a traceback on the terminal."""
    done = subprocess.run([sys.executable, "-c", _ORPHAN], capture_output=True, text=True,
                          cwd=Path(__file__).parent, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL
    assert done.stderr == ""


def test_no_more_workers_start_than_there_are_items() -> None:
    # `--jobs 8` on two partitions: two processes, each of which loads numpy and numba
    with open_runner(Parallelism(jobs=8)) as runner:
        assert runner.map(_nap, [(0.0,), (0.0,)]) == [0.0, 0.0]
        assert len(multiprocessing.active_children()) == 2
    assert multiprocessing.active_children() == []


def test_compiled_first_appearance_ids_equal_the_sorted_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = np.random.default_rng(3).integers(0, 1000, 50_000)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 10**9)  # numpy's sort
    sorted_ids = partition._first_appearance_ids(keys)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)  # the compiled table
    np.testing.assert_array_equal(partition._first_appearance_ids(keys), sorted_ids)
    assert sorted_ids[:3].tolist() == [0, 1, 2] and int(sorted_ids.max()) == 999


@pytest.mark.parametrize("seed", [1, 2])
def test_a_partition_relabelled_in_place_of_its_gathered_blocks_is_the_sorted_one(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN chains of 3,000 requests over 900 ids, and a partition of a third of the rows in
    # a shuffled order (a partition's rows need not be sorted)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 30, 3_000)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    ids = rng.integers(0, 900, int(offsets[-1])).astype(np.int32)
    chains = BlockChains(offsets=offsets, ids=ids,
                         last_block_tokens=np.full(3_000, 4, dtype=np.int32),
                         num_distinct=900, max_hit_blocks=lengths.astype(np.int64),
                         prompt_tokens=4 * lengths.astype(np.int64), block_size_tokens=4)
    rows = rng.permutation(3_000)[:1_000]
    # WHEN it is cut by gathering its blocks and sorting, and by the compiled pass over rows
    monkeypatch.setattr(partition, "SMALL_RELABEL", 10**9)
    gathered = partition.sub_chains(chains, rows)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)
    walked = partition.sub_chains(chains, rows)
    # THEN both give the same chains, ids numbered by first appearance in the partition
    np.testing.assert_array_equal(walked.ids, gathered.ids)
    np.testing.assert_array_equal(walked.offsets, gathered.offsets)
    assert walked.num_distinct == gathered.num_distinct == int(gathered.ids.max()) + 1
    first = ids[offsets[rows[0]]:offsets[rows[0] + 1]]
    assert walked.ids[:first.size].tolist() == [
        sorted(set(first.tolist()), key=first.tolist().index).index(v) for v in first.tolist()]
    np.testing.assert_array_equal(walked.prompt_tokens, chains.prompt_tokens[rows])


@pytest.mark.parametrize(("seed", "code_dtype"), [(1, np.int8), (2, np.int32)])
def test_compiled_namespacing_of_ids_many_namespaces_share_equals_the_sorted_one(
        seed: int, code_dtype: type) -> None:
    # GIVEN ids that recur under five namespaces (pairs past the first namespace of an id fill
    # the compiled pass's own table well beyond its first size, so it grows)
    from yaotu_trace.prefix.kernels.relabel import namespaced_first_appearance_ids

    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, 2_000)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    width = 3_000
    ids = rng.integers(0, width, int(offsets[-1])).astype(np.int32)
    codes = rng.integers(0, 5, lengths.size).astype(np.int64)
    # WHEN renumbered by first appearance of (namespace, id), compiled and by numpy's sort
    # (the first namespace of each id held as int8, as for up to 127 namespaces, or int32)
    got = namespaced_first_appearance_ids(offsets, ids, codes,
                                          np.full(width, -1, dtype=code_dtype), np.int64(5),
                                          np.empty(ids.size, dtype=np.int32))
    keys = np.repeat(codes, lengths) * width + ids
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    # THEN every id is the same, and more than 4,096 pairs met a second namespace
    np.testing.assert_array_equal(got, rank[inverse])
    firsts = np.unique(ids[np.unique(ids, return_index=True)[1]]).size
    assert int(got.max()) + 1 - firsts > 4_096


def test_a_partition_goes_to_dask_as_runs_of_ids_and_replays_the_same() -> None:
    # GIVEN one partition of a waterfall's job
    _, _, parts, jobs = _waterfall_jobs()
    job = jobs[0]
    rows = partition.partition_rows(parts.codes)[0]
    one = partition._one_cache(job.rules)
    sub = partition.sub_chains(job.chains, rows)
    for runs in (IdRuns.of(job.chains.ids), None):  # cut from the runs; renumbered here
        # WHEN its task is made for a Dask worker
        task = partition._partition_task(job.chains, runs, rows, one)
        # THEN its ids travel as runs (fewer than the ids), and the worker's replay of them is
        # the replay of the flat sub-chains
        assert isinstance(task[0], CompactChains)
        assert task[0].runs.first_ids.size < sub.ids.size
        there = partition._run_task(*task)
        here = replay(sub, one)
        np.testing.assert_array_equal(there.hit_tokens, here.hit_tokens)
        assert there.evicted_blocks == here.evicted_blocks


@pytest.mark.parametrize("outputs", [False, True])
@pytest.mark.parametrize("seed", [7, 8, 9])
def test_the_waterfall_derives_its_capped_unlimited_replays_exactly(outputs: bool,
                                                                    seed: int) -> None:
    # GIVEN a trace with tenants and the last-token rule on, with outputs cached or not
    trace = shared_prefix_trace(seed=seed, outputs=outputs, repeats=0.3)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, cache_outputs=outputs,
                                  scope="instance")
    assert rules.last_token_rule and rules.tenant_isolation
    p = prepare(trace, with_outputs=outputs)
    # WHEN the waterfall cuts its unlimited replays at the last-token cap instead of replaying
    wf = compute_waterfall(p, rules)
    flat = rules.with_(last_token_rule=False, capacity_blocks=None, scope=Scope.GLOBAL,
                       route=None)
    ltr = flat.with_(last_token_rule=True)
    shared = p.chains(flat, namespaces=False)
    named = p.chains(ltr)
    # THEN each step's hits are those of replaying it, and AIPerf's numerator is the
    # unlimited replay of the tenants' chains without the cap
    np.testing.assert_array_equal(wf.hit_blocks["last_token_rule"],
                                  replay(shared.with_hit_cap(True), ltr).hit_blocks)
    direct = replay(named, ltr)
    np.testing.assert_array_equal(wf.hit_blocks["tenant_isolation"], direct.hit_blocks)
    np.testing.assert_array_equal(wf.seen_blocks, leading_seen_blocks(named, rules))
    assert wf.seen_blocks.sum() > wf.hit_blocks["tenant_isolation"].sum()  # the cap bites


@pytest.mark.parametrize("namespaces", [3, 127, 128, 300])
def test_compiled_namespacing_holds_first_namespaces_narrow_or_wide(
        monkeypatch: pytest.MonkeyPatch, namespaces: int) -> None:
    # GIVEN chains and namespace codes on both sides of the int8 table's 127 namespaces
    trace = shared_prefix_trace(repeats=0.3)
    p = prepare(trace)
    rules, _, _ = effective_rules(trace, "vllm", block_size_tokens=4, tenant_isolation=False)
    chains = p.chains(rules)
    codes = np.random.default_rng(namespaces).integers(0, namespaces, size=p.num_requests)
    codes[0] = namespaces - 1
    # WHEN relabelled by numpy's sort and by the compiled pass
    monkeypatch.setattr(partition, "SMALL_RELABEL", 10**9)
    sorted_ids = partition.with_namespaces(chains, codes)
    monkeypatch.setattr(partition, "SMALL_RELABEL", 0)
    compiled = partition.with_namespaces(chains, codes)
    # THEN the ids are the same
    np.testing.assert_array_equal(compiled.ids, sorted_ids.ids)
    assert compiled.num_distinct == sorted_ids.num_distinct
