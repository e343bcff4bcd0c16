"""Cross-check with the Mooncake maintainers' own simulator (`kvcache-simulator` on PyPI).

Its trie-leaf LRU equals our tail-first LRU, its FIFO our head-first FIFO and its ceiling our
unlimited cache, all measured on the last 50 % of requests (its warm-up convention). Skipped
when the package or the public traces are absent.
"""

from __future__ import annotations

import pytest
from conftest import shared_trace

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import replay_trace_with_requests, rules_for

kvcache_sim = pytest.importorskip("kvcache_sim")
from kvcache_sim.plan import build_execution_plan  # noqa: E402
from kvcache_sim.policies import simulate_ceiling, simulate_policy  # noqa: E402
from kvcache_sim.trace import parse_trace_file  # noqa: E402


def _ours(trace, warmup: int, **rules: object) -> int:
    _, table = replay_trace_with_requests(trace, rules_for("mooncake", **rules), waterfall=False)
    return int(table.columns["hit_tokens"][warmup:].sum())


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_same_hit_tokens_as_the_official_simulator(name: str) -> None:
    path = shared_trace(f"mooncake/{name}_trace.jsonl")
    plan = build_execution_plan(parse_trace_file(path, block_size=512), 0.5)
    trace = read_trace(path)
    warmup = plan.warmup_requests
    assert simulate_ceiling(plan).hitTokens == _ours(trace, warmup)
    for capacity in (1000, 10_000):
        lru = simulate_policy(plan, "lru", capacity)
        assert lru.measurementMode == "fixed_window"
        assert lru.hitTokens == _ours(trace, warmup, capacity_blocks=capacity,
                                      touch_order="tail-first")
        fifo = simulate_policy(plan, "fifo", capacity)
        assert fifo.hitTokens == _ours(trace, warmup, capacity_blocks=capacity, eviction="fifo")
