"""LMCache's own cache simulator, reproduced request by request (source: lmcache 0.5.6,
`lmcache tool cache-simulator simulate`, `lmcache/tools/cache_simulator/simulator.py`).

Its numbers are golden data in `tests/fixtures/captures/lmcache/cache_simulator.json`, written
by `benchmarks/engines/golden_lmcache_simulator.py` running LMCache's `simulate` on two lookup
logs that LMCache's own `LookupHashLoggingSubscriber` wrote: the capture workload's (48 lookups
of 64-token chunks, in this folder) and the Mooncake conversation trace's full 512-token
blocks. The simulator is a flat LRU over whole chunks that references each request's chunks
head to tail: our `--preset none --block-size B --touch-order head-first --capacity N`. (The
server itself refreshes a request's hit chunks tail to head, `LocalCPUBackend.touch_cache`,
which `--preset lmcache` follows; the simulator does not, and the two differ once chunks are
evicted.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from conftest import shared_trace

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import replay_trace_with_requests, rules_for

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "lmcache"
GOLDEN = json.loads((HERE / "cache_simulator.json").read_text())


def _hit_chunks(path: Path, block: int, capacity: int, touch_order: str = "head-first"
                ) -> np.ndarray:
    rules = rules_for("none", block_size_tokens=block, touch_order=touch_order,
                      capacity_blocks=capacity)
    _, table = replay_trace_with_requests(read_trace(path), rules, waterfall=False)
    return np.asarray(table.columns["hit_tokens"]) // block


def test_the_lookup_log_lmcache_wrote_replays_as_its_simulator_at_every_capacity() -> None:
    # GIVEN LMCache's lookup-hash log and its simulator's hits at 1 to 1,000 chunks (116 to 0
    # evictions)
    fixture = GOLDEN["fixture"]
    capacities = [int(c) for c in fixture if c != "requests"]
    assert len(capacities) == 11 and fixture["1"]["evictions"] == 116
    for capacity in capacities:
        # WHEN the log is replayed with the simulator's rules at that capacity
        ours = _hit_chunks(HERE, 64, capacity)
        # THEN every request hits the same whole chunks
        assert ours.tolist() == fixture[str(capacity)]["hit_prefix_chunks"], capacity
        assert int(ours.sum()) * 64 == fixture[str(capacity)]["hit_tokens"]


def test_the_servers_touch_order_is_not_the_simulators() -> None:
    # GIVEN the same log at 2 to 24 chunks, where LMCache's simulator evicts 113 to 15 times
    capacities = (2, 4, 6, 8, 16, 24)
    simulator = [GOLDEN["fixture"][str(c)]["hit_tokens"] for c in capacities]
    # WHEN the replay refreshes a request's chunks tail to head, as LMCache's server does
    server = [int(_hit_chunks(HERE, 64, c, touch_order="tail-first").sum()) * 64
              for c in capacities]
    # THEN it keeps the heads of prompts, which the simulator evicts first, and hits more
    # until the cache holds every chunk (24)
    assert simulator == [256, 1152, 1920, 2560, 4928, 5120]
    assert server == [832, 1536, 2176, 2816, 4992, 5120]


def test_mooncake_conversation_replays_as_lmcaches_simulator() -> None:
    # GIVEN the Mooncake conversation trace and LMCache's simulator on its lookup log, from a
    # cache far smaller than the trace (262,558 evictions) to one that never evicts
    path = shared_trace("mooncake/conversation_trace.jsonl")
    golden = GOLDEN["mooncake_conversation"]
    for capacity in (1000, 4000, 16000, 64000, 1_000_000):
        want = golden[str(capacity)]
        # WHEN replayed with the simulator's rules on 512-token blocks
        ours = _hit_chunks(path, 512, capacity).tolist()
        # THEN the same total, and the same hit prefix request by request
        assert int(sum(ours)) * 512 == want["hit_tokens"], capacity
        assert ours[:200] == want["hit_prefix_first_200"]
        digest = hashlib.sha256(",".join(map(str, ours)).encode()).hexdigest()
        assert digest == want["hit_prefix_sha256"], capacity
