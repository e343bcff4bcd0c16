"""The tiered replay under SGLang's HiCache policies (`prefix.tiers`, `write_through`,
`write_through_selective`, `write_back`) against SGLang 0.5.23 itself.

The fixtures `tests/fixtures/tiers_sglang/sglang_hicache_*.json` were recorded from SGLang's own
`UnifiedRadixCache` (pure-Python tree core) with HiCache on, driven on CPU by
`benchmarks/engines/golden_tiers_sglang.py`: per request, the device prefix
(`cached_tokens_total{cache_source="device"}`) and the host tokens loaded back
(`cache_source="host"`), at three GPU pools, host pools of 1, 2 and 4 times the GPU pool and the
three write policies, pages of 1 and 16 tokens. No SGLang is needed here.

The replay is not exact against HiCache (docs/replay.md says why: the GPU and host share one
radix tree in SGLang, the replay runs them as two passes); these tests pin how far it is, so a
change that moves it further fails.
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

# The largest gap in total reused tokens (GPU + host, replay − SGLang, relative to SGLang's)
# per (write policy, hicache_ratio), as measured on these fixtures and rounded up; the replay
# never counts more than 1 % fewer than SGLang.
MAX_OVERCOUNT = {
    ("write_through", 1.0): 0.42, ("write_through", 2.0): 0.10, ("write_through", 4.0): 0.04,
    ("write_through_selective", 1.0): 0.07, ("write_through_selective", 2.0): 0.04,
    ("write_through_selective", 4.0): 0.02,
    ("write_back", 1.0): 0.24, ("write_back", 2.0): 0.19, ("write_back", 4.0): 0.07,
}
MIN_SAME_REQUESTS = 0.87  # share of requests whose GPU and host hits are both SGLang's


@cache
def _chains(trace: str, page: int, pool_pages: int) -> tuple[BlockChains, ReplayRules]:
    rules = rules_for("sglang", block_size_tokens=page, capacity_blocks=pool_pages)
    return prepare(read_trace(FIXTURES / "engines" / trace)).chains(rules), rules


def test_tiers_sglang_golden_fixtures_cover_policies_and_sizes() -> None:
    # GIVEN the recorded fixtures WHEN counted THEN they span policies, pages, pools and hosts
    configs = [c for p in GOLDEN for c in json.loads(p.read_text())["configs"]]
    assert len(GOLDEN) == 2
    assert {c["write_policy"] for c in configs} == {
        "write_through", "write_through_selective", "write_back"}
    assert {c["page_size"] for c in configs} == {1, 16}
    assert {c["hicache_ratio"] for c in configs} == {1.0, 2.0, 4.0}
    assert sum(1 for c in configs if sum(c["cpu_hit_tokens"]) > 0) >= 70


@pytest.mark.parametrize(("fixture", "index"), golden_cases(GOLDEN))
def test_tiers_sglang_stays_near_hicache(fixture: str, index: int) -> None:
    # GIVEN one configuration SGLang's HiCache replayed
    document = golden_document(DATA / fixture)
    config = document["configs"][index]
    page = config["page_size"]
    chains, rules = _chains(document["trace"], page, config["pool_tokens"] // page)
    tier = TierSpec(name=TierName.CPU, capacity_chunks=config["host_tokens"] // page,
                    chunk_tokens=page)
    # WHEN the tiered replay runs it under the same write policy
    result = replay_tiers(chains, rules, (tier,), TierPolicy(config["write_policy"]))
    gpu = np.asarray(config["gpu_hit_tokens"])
    host = np.asarray(config["cpu_hit_tokens"])
    # THEN it refuses what SGLang refuses
    assert np.flatnonzero(result.refused).tolist() == config["refused"]
    # and its reused tokens are SGLang's within the measured gap, never far below
    engine = int(gpu.sum() + host.sum())
    ours = int(result.gpu_hit_tokens.sum() + result.tier_hit_tokens[0].sum())
    gap = (ours - engine) / engine
    assert -0.01 <= gap <= MAX_OVERCOUNT[(config["write_policy"], config["hicache_ratio"])]
    # and most requests get exactly SGLang's GPU and host hits
    same = (result.gpu_hit_tokens == gpu) & (result.tier_hit_tokens[0] == host)
    assert same.mean() >= MIN_SAME_REQUESTS
