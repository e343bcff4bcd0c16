"""The tiered replay under vLLM's native offload (`prefix.tiers`, policy `vllm-native`) against
vLLM 0.33.0 itself.

The fixtures `tests/fixtures/tiers_vllm/vllm_offload_*.json` were recorded from vLLM's own v1
`Scheduler` with the `OffloadingConnector` (`CPUOffloadingSpec`, `CPUOffloadingManager`, lru)
by `benchmarks/engines/golden_tiers_vllm.py`: per request, the tokens vLLM's `PrefillStats`
counts as `local_cache_hit` (GPU) and `external_kv_transfer` (CPU), at several GPU pool sizes,
CPU tier sizes and blocks per chunk, on five small traces (one a slice of Mooncake's
conversation trace as token ids, two with blocks of 4 and 8 tokens). `vllm_offload_*_arc.json`
are the same runs with the manager's `eviction_policy: arc` (policy `vllm-native-arc`),
`vllm_offload_*_threshold2.json` with its `store_threshold: 2` (a chunk stored from its second
offer on). `vllm_offload_*_fs.json` (and `*_arc_fs.json`) put vLLM's file-system tier below
the CPU (`TieringOffloadingSpec`, a secondary tier of type `fs`), the external hit split by
where each chunk came from, as `vllm:prompt_tokens_cached_by_source` splits it. No vLLM is
needed here.
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
from yaotu_trace.prefix.tiers.vllm_native import StalledLookup

DATA = FIXTURES / "tiers_vllm"
GOLDEN = sorted(p for p in DATA.glob("vllm_offload_*.json")
                if not p.stem.endswith(("_arc", "_threshold2", "_fs")))
ARC = sorted(DATA.glob("vllm_offload_*_arc.json"))
DISK = sorted(DATA.glob("vllm_offload_*_fs.json"))  # a secondary fs tier below the CPU
THRESHOLD = sorted(DATA.glob("vllm_offload_*_threshold2.json"))
TRACE_DIRS = (FIXTURES / "engines", DATA)


@cache
def _chains(trace: str, block: int, gpu_blocks: int) -> tuple[BlockChains, ReplayRules]:
    path = next(d / trace for d in TRACE_DIRS if (d / trace).exists())
    rules = rules_for("vllm", block_size_tokens=block, capacity_blocks=gpu_blocks)
    return prepare(read_trace(path)).chains(rules), rules


def test_tiers_vllm_golden_fixtures_cover_sizes_and_chunks() -> None:
    # GIVEN the recorded fixtures WHEN counted THEN they span traces, pools, tiers, blocks of
    # 4, 8 and 16 tokens and chunks of 1 to 5 blocks
    assert len(GOLDEN) == 5
    configs = [c for p in GOLDEN for c in json.loads(p.read_text())["configs"]]
    assert {c["block_size_tokens"] for c in configs} == {4, 8, 16}
    assert {c["blocks_per_chunk"] for c in configs} == {1, 2, 3, 4, 5}
    assert len({c["num_gpu_blocks"] for c in configs}) >= 8
    assert any(c["refused"] for c in configs)
    assert sum(1 for c in configs if sum(c["cpu_hit_tokens"]) > 0) >= 70


@pytest.mark.parametrize(("variant", "suffix"), [("arc", "_arc"),
                                                 ("threshold", "_threshold2")])
def test_variant_fixtures_are_the_same_runs_and_move_the_cpu_hits(variant: str,
                                                                 suffix: str) -> None:
    # GIVEN the ARC (or store threshold) fixtures beside the plain LRU ones of the same traces
    # and configurations
    files = ARC if variant == "arc" else THRESHOLD
    assert [p.name.replace(suffix, "") for p in files] == [p.name for p in GOLDEN]
    moved = 0
    for arc, lru in zip(files, GOLDEN, strict=True):
        arc_configs = json.loads(arc.read_text())["configs"]
        lru_configs = json.loads(lru.read_text())["configs"]
        shape = ("block_size_tokens", "num_gpu_blocks", "cpu_chunks", "blocks_per_chunk")
        assert [[c[k] for k in shape] for c in arc_configs] == \
            [[c[k] for k in shape] for c in lru_configs]
        # THEN the GPU hits are the pool's either way, and the CPU tier's hits move
        for a, b in zip(arc_configs, lru_configs, strict=True):
            assert a["gpu_hit_tokens"] == b["gpu_hit_tokens"]
            moved += a["cpu_hit_tokens"] != b["cpu_hit_tokens"]
    assert moved >= 60


@pytest.mark.parametrize(("fixture", "index"), golden_cases(GOLDEN + ARC + THRESHOLD))
def test_tiers_vllm_matches_vllm_scheduler_per_request(fixture: str, index: int) -> None:
    # GIVEN one configuration vLLM's scheduler and offload connector replayed (LRU, ARC, or
    # LRU storing a chunk from its second offer on)
    document = golden_document(DATA / fixture)
    config = document["configs"][index]
    block = config["block_size_tokens"]
    chains, rules = _chains(document["trace"], block, config["num_gpu_blocks"])
    tier = TierSpec(name=TierName.CPU, capacity_chunks=config["cpu_chunks"],
                    chunk_tokens=block * config["blocks_per_chunk"],
                    store_threshold=2 if fixture.endswith("_threshold2.json") else 0)
    policy = TierPolicy.VLLM_ARC if fixture.endswith("_arc.json") else TierPolicy.VLLM
    # WHEN the tiered replay runs it
    result = replay_tiers(chains, rules, (tier,), policy)
    # THEN every request's GPU and CPU hit is vLLM's, and so is every refusal
    np.testing.assert_array_equal(result.gpu_hit_tokens, config["gpu_hit_tokens"])
    np.testing.assert_array_equal(result.tier_hit_tokens[0], config["cpu_hit_tokens"])
    assert np.flatnonzero(result.refused).tolist() == config["refused"]


def test_disk_fixtures_cover_both_policies_and_hit_the_disk() -> None:
    # GIVEN the fs-tier fixtures WHEN counted THEN each trace has them under LRU and ARC, and
    # the disk served requests in most configurations and the CPU in many
    assert [p.name for p in DISK] == sorted(
        [p.name.replace(".json", "_fs.json") for p in GOLDEN]
        + [p.name.replace(".json", "_fs.json") for p in ARC])
    configs = [c for p in DISK for c in json.loads(p.read_text())["configs"]]
    assert len(configs) >= 300
    assert sum(1 for c in configs if sum(c["disk_hit_tokens"]) > 0) >= 200
    assert sum(1 for c in configs if sum(c["cpu_hit_tokens"]) > 0) >= 100


@pytest.mark.parametrize(("fixture", "index"), golden_cases(DISK))
def test_tiers_vllm_with_an_fs_tier_matches_vllm_per_request(fixture: str, index: int) -> None:
    # GIVEN one configuration vLLM replayed with its fs tier below the CPU tier (LRU or ARC):
    # chunks found on disk are promoted into the CPU one at a time, a step after the tier
    # answers, each promotion free to evict another chunk of the same run
    document = golden_document(DATA / fixture)
    config = document["configs"][index]
    block = config["block_size_tokens"]
    chains, rules = _chains(document["trace"], block, config["num_gpu_blocks"])
    chunk = block * config["blocks_per_chunk"]
    cpu = TierSpec(name=TierName.CPU, capacity_chunks=config["cpu_chunks"], chunk_tokens=chunk)
    # vLLM's fs tier has no size and never evicts: an unlimited disk (`--tier disk=unlimited`)
    disk = TierSpec(name=TierName.DISK, capacity_chunks=1, chunk_tokens=chunk, unlimited=True)
    policy = TierPolicy.VLLM_ARC if fixture.endswith("_arc_fs.json") else TierPolicy.VLLM
    # WHEN the tiered replay runs it
    result = replay_tiers(chains, rules, (cpu, disk), policy)
    # THEN every request's GPU, CPU and disk hit is vLLM's, and the disk evicted nothing
    assert result.counters[1].evicted_chunks == 0
    np.testing.assert_array_equal(result.gpu_hit_tokens, config["gpu_hit_tokens"])
    np.testing.assert_array_equal(result.tier_hit_tokens[0], config["cpu_hit_tokens"])
    np.testing.assert_array_equal(result.tier_hit_tokens[1], config["disk_hit_tokens"])
    assert np.flatnonzero(result.refused).tolist() == config["refused"]


STALLS = DATA / "vllm_stalls_arc_first9.json"


@pytest.mark.parametrize("index", range(len(json.loads(STALLS.read_text())["configs"])))
def test_a_request_vllm_never_starts_under_arc_is_refused_at_the_same_cpu_sizes(
        index: int) -> None:
    # GIVEN nine requests vLLM replayed under ARC with its fs tier at eight CPU sizes: at 19,
    # 25, 30 and 31 chunks it never finished request 8 (20,000 steps), at 20, 21, 32 and 40 it
    # did: under ARC the stall follows the CPU tier's history, not its size alone
    # (`benchmarks/engines/golden_tiers_vllm_stalls.py`)
    document = golden_document(STALLS)
    config = document["configs"][index]
    chains, rules = _chains(document["trace"], config["block_size_tokens"],
                            config["num_gpu_blocks"])
    chunk = config["block_size_tokens"]
    cpu = TierSpec(name=TierName.CPU, capacity_chunks=config["cpu_chunks"], chunk_tokens=chunk)
    disk = TierSpec(name=TierName.DISK, capacity_chunks=1, chunk_tokens=chunk, unlimited=True)
    # WHEN the tiered replay runs it
    if "never_finished" in config:
        # THEN it refuses the same request, and says whether the tier could hold its run
        with pytest.raises(StalledLookup) as stalled:
            replay_tiers(chains, rules, (cpu, disk), TierPolicy.VLLM_ARC)
        assert stalled.value.request == config["never_finished"]
        holds = config["cpu_chunks"] >= stalled.value.chunks
        assert ("could hold them all" in str(stalled.value)) == holds
        assert ("at least its" in str(stalled.value)) != holds
        return
    # THEN every request's hits are vLLM's
    result = replay_tiers(chains, rules, (cpu, disk), TierPolicy.VLLM_ARC)
    np.testing.assert_array_equal(result.gpu_hit_tokens, config["gpu_hit_tokens"])
    np.testing.assert_array_equal(result.tier_hit_tokens[0], config["cpu_hit_tokens"])
    np.testing.assert_array_equal(result.tier_hit_tokens[1], config["disk_hit_tokens"])


def test_the_arc_stall_fixture_has_both_outcomes_on_both_sides_of_the_run() -> None:
    # GIVEN the stall fixture WHEN read THEN vLLM stalled with a CPU tier smaller than the run
    # and with larger ones, and started the request at sizes between and above them
    configs = json.loads(STALLS.read_text())["configs"]
    stalled = [c["cpu_chunks"] for c in configs if "never_finished" in c]
    started = [c["cpu_chunks"] for c in configs if "never_finished" not in c]
    assert min(stalled) < min(started) < max(stalled) < max(started)
