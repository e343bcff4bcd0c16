"""The tiered replay under LMCache's rules (`prefix.tiers`, policy `lmcache`) against LMCache
0.5.6's own engine.

The fixtures `tests/fixtures/tiers_lmcache/lmcache_*.json` were recorded by
`benchmarks/engines/golden_tiers_lmcache.py` from LMCache's `LMCacheEngine` on CPU (mock GPU
connector, a `LocalCPUBackend` and in some configurations a `LocalDiskBackend` or a
`RemoteBackend` on LMCache's mock remote store below it),
driven request by request with the calls vLLM's LMCache adapter makes (`lookup` with pins,
`retrieve`, `lookup_unpin`, `store` of the whole chunks beyond the hit): per request, the
tokens LMCache's lookup finds from token 0 (and how many of its chunks were on disk or in the
remote store), at several chunk, CPU, disk and remote sizes, on the four engine traces and
the Mooncake slice. LMCache's
loads do not reorder its CPU backend, so with the CPU alone that hit does not depend on the
GPU pool in front and the adapter's arithmetic puts it behind one
(`vllm_v1_adapter.py::get_num_new_matched_tokens`); with a disk or a remote store, the fixtures
hold the case of a GPU pool that hits nothing. No LMCache is needed here.
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
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers
from yaotu_trace.prefix.tiers.lmcache import replay_lmcache_model, replay_lmcache_tiers
from yaotu_trace.prefix.tiers.lmcache_kernel import lmcache_run_tokens

DATA = FIXTURES / "tiers_lmcache"
GOLDEN = sorted(DATA.glob("lmcache_*.json"))
BLOCK = 16


@cache
def _chains(trace: str, gpu_blocks: int | None = None) -> BlockChains:
    # LMCache keys chunks by their tokens alone (no tenant salt): one namespace.
    rules = rules_for("vllm", block_size_tokens=BLOCK, capacity_blocks=gpu_blocks,
                      tenant_isolation=False)
    return prepare(read_trace(FIXTURES.parent.parent / trace)).chains(rules)


def _config(fixture: str, index: int) -> tuple[str, dict]:
    document = golden_document(DATA / fixture)
    return document["trace"], document["configs"][index]


def _tiers(config: dict) -> tuple[TierSpec, ...]:
    chunk = config["chunk_tokens"]
    cpu = TierSpec(name=TierName.CPU, capacity_chunks=config["cpu_chunks"], chunk_tokens=chunk)
    if config.get("remote_chunks") is not None:
        return cpu, TierSpec(name=TierName.REMOTE, capacity_chunks=config["remote_chunks"],
                             chunk_tokens=chunk)
    if config["disk_chunks"] is None:
        return (cpu,)
    return cpu, TierSpec(name=TierName.DISK, capacity_chunks=config["disk_chunks"],
                         chunk_tokens=chunk)


def _below(config: dict) -> list[int] | None:
    """Per request, the chunks of LMCache's hit the backend below the CPU held (None: none)."""
    return config.get("disk_hit_chunks", config.get("remote_hit_chunks"))


def test_lmcache_golden_fixtures_cover_chunks_sizes_and_cut_saves() -> None:
    # GIVEN the recorded fixtures WHEN counted THEN they span traces, chunk sizes and CPU sizes
    # from saves LMCache cuts short (a prompt of more chunks than the backend) to no eviction,
    # and a disk or a remote store below the CPU that serves hits, the smaller ones full
    assert len(GOLDEN) == 5
    configs = [c for p in GOLDEN for c in json.loads(p.read_text())["configs"]]
    assert {c["chunk_tokens"] for c in configs} == {16, 32, 64, 256}
    assert len(configs) == 100 and sum(1 for c in configs if c["total_hit_tokens"] > 0) >= 95
    assert min(c["cpu_chunks"] for c in configs) == 2
    disk = [c for c in configs if c["disk_chunks"] is not None]
    assert len(disk) == 24 and all(sum(c["disk_hit_chunks"]) > 0 for c in disk)
    remote = [c for c in configs if c.get("remote_chunks") is not None]
    assert len(remote) == 25 and all(sum(c["remote_hit_chunks"]) > 0 for c in remote)
    # (a larger store of the same chunks serves more: the smaller ones evicted)
    by_size = {(c["chunk_tokens"], c["cpu_chunks"], c["remote_chunks"]): c["total_hit_tokens"]
               for c in remote}
    assert by_size[(16, 48, 64)] < by_size[(16, 48, 1024)]


@pytest.mark.parametrize(("fixture", "index"), golden_cases(GOLDEN))
def test_lmcache_hits_are_lmcache_engines_per_request(fixture: str, index: int) -> None:
    # GIVEN one configuration LMCache's engine replayed
    trace, config = _config(fixture, index)
    chains = _chains(trace)
    n = chains.num_requests
    refused = np.zeros(n, dtype=bool)
    no_gpu = np.zeros(n, dtype=np.int64)
    tiers = _tiers(config)
    gold = np.asarray(config["hit_tokens"])
    # WHEN the compiled pass and its Python model replay LMCache's backends with no GPU hit
    compiled, _, _ = replay_lmcache_tiers(chains, no_gpu, refused, tiers)
    model, _, _ = replay_lmcache_model(chains, no_gpu, refused, tiers)
    # THEN the backends serve every request what LMCache's lookup found, less the last token
    # of a whole-prompt hit, each backend its share
    whole = gold == chains.prompt_tokens
    for hits in (compiled, model):
        np.testing.assert_array_equal(sum(hits), gold - whole)
        if (below := _below(config)) is not None:
            served = np.asarray(below) * config["chunk_tokens"]
            last_below = whole & (served > 0)
            np.testing.assert_array_equal(hits[1], served - last_below)
    # AND with the CPU alone, the one pass every GPU size shares finds the same runs
    if len(tiers) == 1:
        runs = lmcache_run_tokens(chains, refused, config["cpu_chunks"],
                                  config["chunk_tokens"])
        np.testing.assert_array_equal(runs, gold)


@pytest.mark.parametrize("gpu_blocks", [48, 96])
def test_lmcache_behind_a_gpu_pool_loads_what_the_adapter_loads(gpu_blocks: int) -> None:
    # GIVEN LMCache's hits on the mixed trace (64-token chunks, 64 chunks of CPU), where its
    # backend evicts, and a vLLM GPU pool in front large enough to refuse no prompt
    document = golden_document(DATA / "lmcache_mixed.json")
    trace = document["trace"]
    config = next(c for c in document["configs"]
                  if (c["chunk_tokens"], c["cpu_chunks"], c["disk_chunks"]) == (64, 64, None))
    chains = _chains(trace, gpu_blocks)
    rules = rules_for("vllm", block_size_tokens=BLOCK, capacity_blocks=gpu_blocks,
                      tenant_isolation=False)
    tier = TierSpec(name=TierName.CPU, capacity_chunks=64, chunk_tokens=64)
    # WHEN the tiered replay runs
    result = replay_tiers(chains, rules, (tier,), TierPolicy.LMCACHE)
    assert not np.asarray(result.refused).any() and result.counters[0].evicted_chunks > 0
    # THEN each request loads LMCache's hit beyond the GPU's, one token less for a whole
    # prompt, as vLLM's adapter computes `need to load`
    hit = np.asarray(config["hit_tokens"])
    gpu = np.asarray(result.gpu_hit_tokens)
    need = hit - gpu - (hit == chains.prompt_tokens)
    np.testing.assert_array_equal(result.tier_hit_tokens[0], np.maximum(need, 0))
    assert int(np.asarray(result.tier_hit_tokens[0]).sum()) > 0


WAITS = DATA / "waits_for_room.json"


@pytest.mark.parametrize("index", range(5))
def test_lmcache_stops_where_a_load_outgrows_the_cpu(index: int) -> None:
    """`benchmarks/engines/golden_tiers_lmcache_waits.py`: a CPU backend smaller than a load,
    whose hit chunks in the CPU (pinned by the lookup) and chunks read from below LMCache 0.5.6
    must hold at once. With a disk below (the first three) its retrieve found nothing to evict
    and would have waited for ever; with a remote store (the last two) it loaded less than its
    lookup found. Each trace ends at that request."""
    from yaotu_trace.prefix.tiers.lmcache import LoadOutgrowsCpu, WaitsForCpuRoom

    config = golden_document(WAITS)["configs"][index]
    chains = _chains(config["trace"])
    n = chains.num_requests
    tiers = _tiers(config)
    no_gpu = np.zeros(n, dtype=np.int64)
    remote = config.get("remote_chunks") is not None
    # WHEN the compiled pass and its Python model replay it THEN both stop at that request,
    # holding more chunks than the CPU backend has
    for replay in (replay_lmcache_tiers, replay_lmcache_model):
        with pytest.raises(LoadOutgrowsCpu) as stopped:
            replay(chains, no_gpu, np.zeros(n, dtype=bool), tiers)
        assert type(stopped.value) is (LoadOutgrowsCpu if remote else WaitsForCpuRoom)
        assert stopped.value.request == config["outgrows_at" if remote else "waits_at"] == n - 1
        assert stopped.value.holding_chunks > config["cpu_chunks"]
    # AND every request before it was served as LMCache served it, the share from below too
    before = np.arange(n) == n - 1
    hits, _, _ = replay_lmcache_tiers(chains, no_gpu, before, tiers)
    gold = np.asarray(config["hit_tokens"])
    whole = gold == chains.prompt_tokens[:-1]
    np.testing.assert_array_equal(sum(hits)[:-1], gold - whole)
    served = np.asarray(config["disk_hit_chunks"]) * config["chunk_tokens"]
    np.testing.assert_array_equal(hits[1][:-1], served - (whole & (served > 0)))


def test_lmcache_waiting_for_room_is_one_line_naming_the_request(tmp_path, capsys) -> None:
    # (behind a GPU pool of 30 blocks, so that the loads read past its hits)
    from yaotu_trace.cli import main

    config = golden_document(WAITS)["configs"][0]
    chunk = config["chunk_tokens"]
    args = ["replay", str(FIXTURES.parent.parent / config["trace"]), "--preset", "vllm",
            "--block-size", str(BLOCK), "--capacity", "30", "--tier-policy", "lmcache",
            "--tier-chunk", str(chunk), "--tier", f"cpu={config['cpu_chunks'] * chunk}tok",
            "--tier", f"disk={config['disk_chunks'] * chunk}tok", "--no-tenant-isolation",
            "-o", str(tmp_path / "r.txt")]
    assert main(args) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("error: request s3100-21 would never be")
    assert "LMCache's retrieve waits for room for ever" in said


BEHIND_GPU = DATA / "behind_gpu.json"


@pytest.mark.parametrize("index", range(3))
def test_lmcache_disk_behind_a_gpu_pool_is_lmcaches(index: int) -> None:
    """`benchmarks/engines/golden_tiers_lmcache_gpu.py`: LMCache 0.5.6 with a disk below its
    CPU backend, each request loaded past the hit of a vLLM pool in front. Two of the three
    differed by one request while the replay wrote each chunk read from below into the CPU in
    turn; LMCache takes CPU memory for every one of them first (evicting the least recent
    chunks, one about to be read included), then writes those the backend no longer holds."""
    config = golden_document(BEHIND_GPU)["configs"][index]
    chunk = config["chunk_tokens"]
    chains = _chains(config["trace"], config["gpu_blocks"])
    rules = rules_for("vllm", block_size_tokens=BLOCK, capacity_blocks=config["gpu_blocks"],
                      tenant_isolation=False)
    result = replay_tiers(chains, rules, _tiers(config), TierPolicy.LMCACHE)
    # GIVEN the vLLM pool's hits the driver put in front (the exact replay of vLLM's pool)
    gpu = np.asarray(result.gpu_hit_tokens)
    assert gpu.tolist() == config["gpu_hit_tokens"] and gpu.sum() > 0
    # THEN each request loads LMCache's hit past the GPU's (one token less for a whole
    # prompt), the disk's chunks from the disk
    hit = np.asarray(config["hit_tokens"])
    end = hit - (hit == chains.prompt_tokens)
    np.testing.assert_array_equal(sum(result.tier_hit_tokens), np.maximum(end - gpu, 0))
    disk_first = hit // chunk - np.asarray(config["disk_hit_chunks"])
    disk = [sum(max(0, min((j + 1) * chunk, int(e)) - max(j * chunk, int(g)))
                for j in range(int(f), int(h) // chunk))
            for f, h, e, g in zip(disk_first, hit, end, gpu, strict=True)]
    np.testing.assert_array_equal(result.tier_hit_tokens[1], disk)
    assert sum(disk) > 0
