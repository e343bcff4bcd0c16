"""`--residency`: every capacity miss explained, reuse distances, the TTL view and vLLM's
residency histograms.

Checked against vLLM itself (the eviction events of its `KVCacheMetricsCollector`, recorded by
`benchmarks/engines/golden_vllm_residency.py` into `tests/fixtures/residency/`), against an
OrderedDict LRU that names its evictions, and against the replay's own hits (distances give
the LRU hits at every capacity; the lost tokens are the waterfall's capacity losses).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES
from helpers import chains_of

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.residency import (
    bucket_counts,
    bucket_quantile,
    cache_codes,
    distances,
    follow,
    ttl_rows,
)
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.trace import replay_trace_with_requests

DATA = FIXTURES / "residency"
ENGINES = FIXTURES / "engines"
GOLDEN = sorted(DATA.glob("vllm_*.json"))


def _trace(name: str):  # type: ignore[no-untyped-def]
    return read_trace(ENGINES / f"trace_{name}.parquet")


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_vllm_eviction_events_are_vllms_own(path: Path) -> None:
    document = json.loads(path.read_text())
    trace = _trace(document["trace"].removeprefix("trace_").removesuffix(".parquet"))
    prepared = prepare(trace)
    for config in document["configs"]:
        rules = rules_for("vllm", block_size_tokens=config["block_size_tokens"],
                          capacity_blocks=config["num_gpu_blocks"])
        chains = prepared.chains(rules)
        result = replay(chains, rules)
        assert result.hit_tokens.tolist() == config["hit_tokens"]
        codes, k = cache_codes(prepared, rules, result)
        followed = follow(chains, rules, codes, k, prepared.arrival_s)
        assert followed is not None
        np.testing.assert_allclose(followed.life, config["lifetime_s"], atol=1e-9)
        np.testing.assert_allclose(followed.idle, config["idle_s"], atol=1e-9)
        gaps = [g for event in config["reuse_gaps_s"] for g in event]
        np.testing.assert_allclose(followed.gaps, gaps, atol=1e-9)
        assert len(followed.life) > 100 and len(gaps) > 100


def _lru_reference(chains, capacity: int, arrival: np.ndarray):  # type: ignore[no-untyped-def]
    """An OrderedDict LRU (tail-first touches) naming each eviction: per request, the
    (evicted at, idle then, evicting request) of the block that stopped its hit."""
    cache: OrderedDict[int, None] = OrderedDict()
    last_use: dict[int, float] = {}
    gone: dict[int, tuple[float, float, int]] = {}
    out = []
    for i in range(chains.num_requests):
        ids = chains.ids[chains.offsets[i]:chains.offsets[i + 1]].tolist()
        cap = int(chains.max_hit_blocks[i])
        h = 0
        while h < cap and ids[h] in cache:
            h += 1
        out.append(gone.get(ids[h]) if h < cap else None)
        t = float(arrival[i])
        for x in reversed(ids):
            if x in cache:
                cache.move_to_end(x)
            else:
                if len(cache) >= capacity:
                    victim, _ = cache.popitem(last=False)
                    gone[victim] = (t, t - last_use[victim], i)
                cache[x] = None
            last_use[x] = t
    return out


@pytest.mark.parametrize("capacity", [3, 8, 20, 60])
def test_each_miss_names_the_eviction_of_the_block_that_stopped_it(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    stems = [rng.integers(0, 50, size=int(rng.integers(4, 40))).tolist() for _ in range(6)]
    prompts = [stems[int(rng.integers(0, 6))] + rng.integers(0, 50, size=int(
        rng.integers(0, 30))).tolist() for _ in range(150)]
    rules = rules_for("lmcache", block_size_tokens=4, capacity_blocks=capacity)
    chains = chains_of(prompts, rules)
    arrival = np.cumsum(rng.exponential(1.0, size=len(prompts)))
    result = replay(chains, rules)
    codes = np.zeros(len(prompts), dtype=np.int64)
    followed = follow(chains, rules, codes, 1, arrival)
    assert followed is not None
    assert followed.hit_blocks.tolist() == result.hit_blocks.tolist()
    expected = _lru_reference(chains, capacity, arrival)
    named = 0
    for i, want in enumerate(expected):
        if want is None:
            assert followed.miss_by[i] == -1
            continue
        named += 1
        assert (followed.miss_s[i], followed.miss_idle[i], followed.miss_by[i]) == pytest.approx(
            want)
    assert named > 10


@pytest.mark.parametrize("head_first", [False, True])
def test_distinct_block_distances_give_the_lru_hits_at_every_capacity(head_first: bool) -> None:
    rng = np.random.default_rng(5)
    stems = [rng.integers(0, 30, size=int(rng.integers(4, 50))).tolist() for _ in range(8)]
    prompts = [stems[int(rng.integers(0, 8))] + rng.integers(0, 30, size=int(
        rng.integers(0, 20))).tolist() for _ in range(200)]
    order = "head-first" if head_first else "tail-first"
    rules = rules_for("lmcache", block_size_tokens=4, touch_order=order)
    chains = chains_of(prompts, rules)
    codes = np.zeros(len(prompts), dtype=np.int64)
    gap, dist = distances(chains, rules, codes, 1, np.arange(len(prompts), dtype=float))
    starts = chains.offsets[:-1]
    for capacity in (1, 4, 15, 40, 120):
        want = replay(chains, rules.with_(capacity_blocks=capacity)).hit_blocks
        for i in range(len(prompts)):
            d = dist[starts[i]:starts[i] + chains.max_hit_blocks[i]]
            d = np.where(d < 0, np.iinfo(np.int64).max, d)
            run = np.maximum.accumulate(d) <= capacity if d.size else d.astype(bool)
            got = int(np.argmin(run)) if not run.all() else int(run.size)
            assert got == want[i], (capacity, i)
    held = ~np.isnan(gap)
    assert held.sum() > 100


def _table(prompts: list[list[int]], arrival: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"request_id": [f"r{i}" for i in range(len(prompts))],
                         "arrival_s": arrival, "prompt_len": [len(p) for p in prompts],
                         "output_len": 1, "prompt_tokens": prompts})


def test_ttl_keeps_the_blocks_used_within_it() -> None:
    a = list(range(32))
    prompts = [a, a + [99] * 4, a, a]
    trace = normalize(RawTrace(requests=_table(prompts, [0.0, 10.0, 400.0, 1000.0]),
                               format_name="canonical"), "generated")
    summary, _ = replay_trace_with_requests(trace, rules_for("lmcache", block_size_tokens=8),
                                            explain=True, waterfall=False)
    section = summary.residency
    assert section is not None
    # Request 1 reuses 4 blocks 10 s later; request 2, 390 s later; request 3, 600 s later
    # (cap: 3 blocks for the 32-token prompts, 4 for the 36-token one).
    by_ttl = {r.ttl_s: r.kept_tokens for r in section.ttl}
    assert by_ttl[60.0] == 32
    assert by_ttl[300.0] == 32
    assert by_ttl[900.0] == 32 + 24 + 24
    assert section.reusable_tokens == 32 + 24 + 24
    gap = np.array([5.0, np.nan, 50.0])
    rows = ttl_rows(gap, np.array([10, 10, 10]), 20, 100, (1.0, 10.0, 100.0))
    assert [r.kept_tokens for r in rows] == [0, 10, 20]


@pytest.mark.parametrize(("preset", "capacity"), [("vllm", 66), ("vllm", 200), ("lmcache", 80),
                                                  ("mooncake", 40)])
def test_lost_tokens_are_the_waterfalls_capacity_losses(preset: str, capacity: int) -> None:
    trace = _trace("mixed")
    rules = rules_for(preset, block_size_tokens=16, capacity_blocks=capacity)
    summary, requests = replay_trace_with_requests(trace, rules, explain=True)
    columns = requests.to_columns()
    lost = columns["loss_capacity_tokens"] + columns["loss_eviction_policy_tokens"]
    assert columns["capacity_miss_tokens"].tolist() == lost.tolist()
    named = columns["capacity_miss_tokens"] > 0
    assert named.sum() > 20
    assert set(columns["evicted_from"][named]) == {"gpu"}
    assert (columns["evicted_at_s"][named] <= np.asarray(trace.requests["arrival_s"])[named]).all()
    assert (columns["evicted_idle_s"][named] >= 0).all()
    assert summary.residency is not None
    assert summary.residency.capacity_miss_tokens == int(lost.sum())


def test_the_engines_histograms_are_held_against_the_replays() -> None:
    document = json.loads((DATA / "vllm_mixed.json").read_text())
    config = document["configs"][0]
    rules = rules_for("vllm", block_size_tokens=16, capacity_blocks=config["num_gpu_blocks"])
    metrics = read_metrics(DATA / "vllm_mixed.metrics.txt")
    summary, _ = replay_trace_with_requests(_trace("mixed"), rules, explain=True,
                                            metrics=metrics, waterfall=False)
    assert summary.residency is not None
    for h in summary.residency.histograms:
        assert h.engine is not None
        assert h.engine["count"] == h.count
        assert h.engine["mean_s"] == pytest.approx(h.sum_s / h.count)
        for q in ("p50", "p90", "p99"):
            assert h.engine[f"{q}_s"] == pytest.approx(h.engine[f"replay_{q}_s"])


def test_bucket_quantile_is_prometheus_histogram_quantile() -> None:
    buckets = bucket_counts(np.array([0.3, 0.7, 1.5, 1.5, 4.0]), (0.5, 1.0, 2.0, 5.0))
    assert buckets == ((0.5, 1), (1.0, 2), (2.0, 4), (5.0, 5), (float("inf"), 5))
    # rank 2.5 of 5 lies in (1, 2], which holds ranks 2..4: 1 + 1 * 0.5/2
    assert bucket_quantile(0.5, buckets) == pytest.approx(1.25)
    assert bucket_quantile(0.1, buckets) == pytest.approx(0.25)


def test_unfollowed_policies_still_count_their_misses() -> None:
    rules = rules_for("lmcache", block_size_tokens=16, capacity_blocks=60, eviction="lfu")
    summary, requests = replay_trace_with_requests(_trace("mixed"), rules, explain=True)
    assert summary.residency is not None and summary.residency.histograms == ()
    # Nobody was followed, so nobody is counted as explained: not 0, unknown.
    assert summary.residency.explained_requests is None
    assert any("no pass follows the evictions of lfu eviction" in note
               for note in summary.residency.notes)
    columns = requests.to_columns()
    assert "evicted_from" not in columns
    assert columns["capacity_miss_tokens"].sum() > 0


def test_with_a_cpu_tier_a_miss_is_what_no_tier_served_and_names_the_tiers_eviction() -> None:
    # GIVEN vLLM's pool of 5 blocks (4 usable) and a CPU tier of 3 one-block chunks, 4-token
    # blocks: A (2 blocks) is stored; B (3 blocks) takes A's tail block on the GPU and, to
    # store its 3 chunks, both of A's in the CPU tier; C comes back for A
    from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSetup, TierSpec

    a, b = list(range(100, 108)), list(range(200, 212))
    prompts = [a, b, [*a, 300, 301, 302, 303]]
    trace = normalize(RawTrace(requests=_table(prompts, [0.0, 5.0, 9.0]),
                               format_name="canonical"), "generated")
    rules = rules_for("vllm", block_size_tokens=4, capacity_blocks=5)

    def explained(cpu_chunks: int):  # type: ignore[no-untyped-def]
        tiers = TierSetup(tiers=(TierSpec(name=TierName.CPU, capacity_chunks=cpu_chunks,
                                          chunk_tokens=4),), policy=TierPolicy.VLLM)
        summary, table = replay_trace_with_requests(trace, rules, explain=True,
                                                    waterfall=False, tiers=tiers)
        return summary, table.to_columns()

    # WHEN replayed with --residency, and again with the tier large enough to keep A
    summary, columns = explained(3)
    # THEN C hits A's head on the GPU and loses its tail's 4 tokens: the GPU pool let it go,
    # and so did the CPU tier, by B's store at 5 s, 5 s after A's last use
    assert (columns["gpu_hit_tokens"][2], columns["cpu_hit_tokens"][2]) == (4, 0)
    assert columns["capacity_miss_tokens"].tolist() == [0, 0, 4]
    assert columns["evicted_from"].tolist()[2] == "cpu"
    assert columns["evicted_by_request"].tolist()[2] == "r1"
    assert columns["evicted_at_s"][2] == 5.0 and columns["evicted_idle_s"][2] == 5.0
    assert summary.residency is not None and summary.residency.tier == "gpu+cpu"
    # AND a tier that keeps A serves C: no capacity miss is left to explain
    summary, columns = explained(8)
    assert (columns["gpu_hit_tokens"][2], columns["cpu_hit_tokens"][2]) == (4, 4)
    assert columns["capacity_miss_tokens"].tolist() == [0, 0, 0]
    assert summary.residency is not None and summary.residency.capacity_miss_tokens == 0


@pytest.mark.parametrize(("preset", "policy", "sizes"), [
    ("vllm", "vllm-native", (("cpu", 100), ("disk", 300))),
    ("vllm", "lmcache", (("cpu", 40),)),
    ("sglang", "write_through", (("cpu", 4000),)),
])
def test_tier_losses_name_an_earlier_eviction_of_what_no_tier_served(
        preset: str, policy: str, sizes: tuple[tuple[str, int], ...]) -> None:
    # GIVEN the mixed trace with tiers below a pool that loses prompts to capacity
    from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSetup, TierSpec

    trace = _trace("mixed")
    block = 16 if preset == "vllm" else 1
    rules = rules_for(preset, block_size_tokens=block,
                      capacity_blocks=66 if preset == "vllm" else 3000)
    chunk = 64 if policy == "lmcache" else block
    tiers = TierSetup(tiers=tuple(TierSpec(name=TierName(name), capacity_chunks=size,
                                           chunk_tokens=chunk) for name, size in sizes),
                      policy=TierPolicy(policy))
    # WHEN replayed with --residency
    summary, table = replay_trace_with_requests(trace, rules, explain=True, waterfall=False,
                                                tiers=tiers)
    columns = table.to_columns()
    arrival = np.asarray(trace.requests["arrival_s"])
    ids = list(np.asarray(trace.requests["request_id"]))
    # THEN no request both hits and loses more than its prompt, every tier-named miss was
    # evicted by an earlier request, before it arrived, after a non-negative idle time
    lost = columns["capacity_miss_tokens"]
    assert (columns["hit_tokens"] + lost <= columns["prompt_tokens"]).all()
    named = np.array([s in {"cpu", "disk"} for s in columns["evicted_from"]])
    assert named.sum() >= 5
    for i in np.flatnonzero(named):
        assert lost[i] > 0
        assert ids.index(columns["evicted_by_request"][i]) < i
        assert columns["evicted_at_s"][i] <= arrival[i]
        assert not columns["evicted_idle_s"][i] < 0
    assert summary.residency is not None
    assert summary.residency.hit_tokens == int(columns["hit_tokens"].sum())
    assert summary.residency.capacity_miss_tokens == int(lost.sum())
