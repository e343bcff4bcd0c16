"""The tiered replay under SGLang's HiCache policies (`prefix.tiers`, `write_through`,
`write_through_selective`, `write_back`) against SGLang 0.5.23 itself.

The fixtures `tests/fixtures/tiers_sglang/sglang_hicache_*.json` were recorded from SGLang's own
`UnifiedRadixCache` (pure-Python tree core) with HiCache on, driven on CPU by
`benchmarks/engines/golden_tiers_sglang.py`: per request, the device prefix
(`cached_tokens_total{cache_source="device"}`) and the host tokens loaded back
(`cache_source="host"`), at three GPU pools, host pools of 0.5 to 4 times the GPU pool and the
three write policies, pages of 1 to 64 tokens. No SGLang is needed here.

The replay follows SGLang's one radix tree of GPU and host KV (`prefix/tiers/sglang_tree.py`):
every request's GPU and host hits are SGLang's, in every configuration.

`sglang_storage_*.json` add SGLang's storage tier (L3), driven by
`benchmarks/engines/golden_tiers_sglang_storage.py`: the same tree with SGLang's `HiCacheFile`
backend (`mem_cache/hicache_storage.py`, bounded by its `LRUFileEvictor`) attached, SGLang's
controller deciding what is written (`UnifiedRadixCache.write_backup_storage` on each backup
acknowledgement) and what is prefetched (`prefetch_from_storage`, `check_prefetch_progress`,
its storage threads), and each request's storage hit as SGLang splits the cached prefix
(`schedule_batch.split_cached_prefix_by_tier`, `cache_source="storage"`).
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
from conftest import FIXTURES, golden_cases, golden_document

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import ReplayRules, rules_for
from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers

DATA = FIXTURES / "tiers_sglang"
GOLDEN = sorted(DATA.glob("sglang_hicache_*.json"))
STORAGE = sorted(DATA.glob("sglang_storage_*.json"))

@cache
def _chains(trace: str, page: int, pool_pages: int) -> tuple[BlockChains, ReplayRules]:
    rules = rules_for("sglang", block_size_tokens=page, capacity_blocks=pool_pages)
    return prepare(read_trace(FIXTURES / _fixture_path(trace))).chains(rules), rules


def _case(fixture: str, index: int) -> tuple[dict, BlockChains, ReplayRules, TierSpec]:
    """One recorded configuration: its record, the chains and rules of SGLang's pool, and the
    host tier it ran."""
    document = golden_document(DATA / fixture)
    config = document["configs"][index]
    page = config["page_size"]
    chains, rules = _chains(document["trace"], page, config["pool_tokens"] // page)
    host = TierSpec(name=TierName.CPU, capacity_chunks=config["host_tokens"] // page,
                    chunk_tokens=page)
    return config, chains, rules, host


def _fixture_path(trace: str) -> str:
    """Fixtures name their trace from tests/fixtures (older ones by file name alone)."""
    return trace if "/" in trace else f"engines/{trace}"


def test_tiers_sglang_golden_fixtures_cover_policies_and_sizes() -> None:
    # GIVEN the recorded fixtures WHEN counted THEN they span policies, pages, pools and hosts
    configs = [c for p in GOLDEN for c in json.loads(p.read_text())["configs"]]
    assert len(GOLDEN) == 5 and len(configs) == 207
    assert {c["write_policy"] for c in configs} == {
        "write_through", "write_through_selective", "write_back"}
    assert {c["page_size"] for c in configs} == {1, 4, 8, 16, 64}
    assert {c["hicache_ratio"] for c in configs} == {0.5, 1.0, 2.0, 3.0, 4.0}
    assert sum(1 for c in configs if sum(c["cpu_hit_tokens"]) > 0) >= 180


@pytest.mark.parametrize(("fixture", "index"), golden_cases(GOLDEN))
def test_tiers_sglang_equals_hicache_per_request(fixture: str, index: int) -> None:
    # GIVEN one configuration SGLang's HiCache replayed
    config, chains, rules, host = _case(fixture, index)
    # WHEN the tiered replay runs it under the same write policy
    result = replay_tiers(chains, rules, (host,), TierPolicy(config["write_policy"]))
    # THEN it refuses what SGLang refuses
    assert np.flatnonzero(result.refused).tolist() == config["refused"]
    # and every request's GPU hit and host load-back are SGLang's
    assert result.gpu_hit_tokens.tolist() == config["gpu_hit_tokens"]
    assert result.tier_hit_tokens[0].tolist() == config["cpu_hit_tokens"]


def test_tiers_sglang_host_moves_gpu_hits_as_sglang_does() -> None:
    # GIVEN a configuration where SGLang's GPU hits with HiCache differ from its GPU pool
    # alone (a load-back evicts before the request's own allocation)
    moved = 0
    for path in GOLDEN:
        document = golden_document(path)
        for config in document["configs"]:
            page = config["page_size"]
            chains, rules = _chains(document["trace"], page, config["pool_tokens"] // page)
            from yaotu_trace.prefix.tiers.replay import gpu_replay

            alone = np.asarray(gpu_replay(chains, rules).hit_tokens)
            moved += int((alone != np.asarray(config["gpu_hit_tokens"])).sum())
    # THEN such requests exist in the recorded runs, so the one-tree replay is what matches
    assert moved > 0


def test_tiers_sglang_storage_fixtures_cover_policies_hosts_and_stores() -> None:
    # GIVEN the runs recorded with SGLang's file storage backend WHEN counted
    configs = [c for p in STORAGE for c in json.loads(p.read_text())["configs"]]
    # THEN they span the write policies, hosts and store sizes, and storage serves in many
    assert len(STORAGE) == 3 and len(configs) == 120
    assert {c["write_policy"] for c in configs} == {
        "write_through", "write_through_selective", "write_back"}
    assert {c["page_size"] for c in configs} == {1, 16}
    assert {c["storage_pages"] for c in configs} == {64, 256, 600, 1024, 8192, 20000, 65536}
    served = [c for c in configs if sum(c["storage_hit_tokens"]) > 0]
    assert len(served) >= 40
    # and the store's size matters: the same run with a smaller store is served less
    by_run: dict[tuple[str, int, int, int, str], dict[int, int]] = {}
    for path in STORAGE:
        for c in json.loads(path.read_text())["configs"]:
            run = (path.name, c["page_size"], c["pool_tokens"], c["host_tokens"],
                   c["write_policy"])
            by_run.setdefault(run, {})[c["storage_pages"]] = sum(c["storage_hit_tokens"])
    assert any(min(sizes.values()) < max(sizes.values()) for sizes in by_run.values())


@pytest.mark.parametrize(("fixture", "index"), golden_cases(STORAGE))
def test_tiers_sglang_storage_equals_hicache_per_request(fixture: str, index: int) -> None:
    # GIVEN one configuration SGLang's HiCache ran with its file storage backend below the host
    config, chains, rules, host = _case(fixture, index)
    tiers = (host, TierSpec(name=TierName.DISK, capacity_chunks=config["storage_pages"],
                            chunk_tokens=config["page_size"]))
    # WHEN the tiered replay runs it with the store as its disk tier, under the same policy
    result = replay_tiers(chains, rules, tiers, TierPolicy(config["write_policy"]))
    # THEN every request's refusal, GPU hit, host load-back and storage hit are SGLang's
    assert np.flatnonzero(result.refused).tolist() == config["refused"]
    assert result.gpu_hit_tokens.tolist() == config["gpu_hit_tokens"]
    assert result.tier_hit_tokens[0].tolist() == config["cpu_hit_tokens"]
    assert result.tier_hit_tokens[1].tolist() == config["storage_hit_tokens"]


OUT_OF_MEMORY = DATA / "sglang_out_of_memory.json"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "reference"])
@pytest.mark.parametrize("index", range(3))
def test_tiers_sglang_stops_where_sglang_runs_out_of_memory(index: int, compiled: bool) -> None:
    """`benchmarks/engines/golden_tiers_sglang_oom.py`: under write_back, a host of half the
    device pool and a store below, SGLang 0.5.23's allocation raised "Prefill out of memory"
    (one-token pages: "Out of memory") at a request; each trace ends there."""
    from yaotu_trace.prefix.tiers.replay import refused_requests
    from yaotu_trace.prefix.tiers.sglang_tree import PrefillOutOfMemory, replay_hicache_tree

    config = golden_document(OUT_OF_MEMORY)["configs"][index]
    page = config["page_size"]
    chains, rules = _chains(config["trace"], page, config["pool_tokens"] // page)
    tiers = (TierSpec(name=TierName.CPU, capacity_chunks=config["host_tokens"] // page,
                      chunk_tokens=page),
             TierSpec(name=TierName.DISK, capacity_chunks=config["storage_pages"],
                      chunk_tokens=page))
    refused = refused_requests(chains, rules)
    # WHEN the one tree replays it THEN it stops at the request SGLang stopped at, short of
    # pages with every GPU leaf it may evict gone
    with pytest.raises(PrefillOutOfMemory) as stopped:
        replay_hicache_tree(chains, refused, tiers, TierPolicy.SGLANG_WRITE_BACK,
                            config["pool_tokens"] // page, compiled=compiled)
    assert stopped.value.request == config["stopped_at"]
    assert stopped.value.free_pages < stopped.value.needed_pages
    # AND the requests before it run: the same replay without the last one stops nowhere
    before = np.ones(chains.num_requests, dtype=bool)
    before[:config["stopped_at"]] = False
    replay_hicache_tree(chains, refused | before, tiers, TierPolicy.SGLANG_WRITE_BACK,
                        config["pool_tokens"] // page, compiled=compiled)


def test_tiers_sglang_out_of_memory_is_one_line_naming_the_request(tmp_path, capsys) -> None:
    from yaotu_trace.cli import main

    config = golden_document(OUT_OF_MEMORY)["configs"][0]
    args = ["replay", str(FIXTURES / config["trace"]), "--preset", "sglang", "--block-size",
            str(config["page_size"]), "--capacity",
            str(config["pool_tokens"] // config["page_size"]), "--tier",
            f"cpu={config['host_tokens']}tok", "--tier", f"disk={config['storage_pages']}blocks",
            "--tier-policy", "write_back", "-o", str(tmp_path / "r.txt")]
    assert main(args) == 2
    assert not (tmp_path / "r.txt").exists()
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("error: request fuzz5012-0013 cannot be")
    assert "SGLang raises 'Prefill out of memory'" in said
