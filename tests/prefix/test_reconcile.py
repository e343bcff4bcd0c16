"""Observed against replayed over time (`prefix/reconcile.py`, `prefix/reconcile_replay.py`),
on captures SGLang's own exporter wrote (tests/fixtures/captures/sglang/, SGLang 0.5.23's
`FileRequestMetricsExporter`): one where the engine's cache was flushed mid-run, one where its
KV pool held 800 tokens, one where neither happened; and on arrays where a cause is set."""

from __future__ import annotations

import numpy as np
from conftest import FIXTURES

from yaotu_trace.data.observed_hits import PoolSize
from yaotu_trace.ingest.load import read_trace
from yaotu_trace.prefix.reconcile import Alternative, reconcile
from yaotu_trace.prefix.reconcile_replay import reconcile_trace
from yaotu_trace.prefix.rules import effective_rules
from yaotu_trace.prefix.trace import replay_trace

SGLANG = FIXTURES / "captures" / "sglang"
POOL_TOKENS = 800  # metrics_pool/: the pool make_fixtures.py gave the engine


def _ids(n: int) -> np.ndarray:
    return np.array([f"r{i}" for i in range(n)], dtype=object)


def test_a_flushed_cache_is_a_shortfall_stretch_with_its_reset_time() -> None:
    r = replay_trace(read_trace(SGLANG / "metrics_flush")).reconciliation
    assert r is not None and r.shortfall is not None
    # The engine's cache was flushed 300 s after 09:55:00, 281.9 s after the first arrival.
    assert r.shortfall.start_s < 300 - 18.091 < r.shortfall.end_s
    assert (r.differing_requests, r.below_tokens, r.above_tokens) == (4, 418, 0)
    assert [x.cause for x in r.reasons] == ["reset"]
    assert "25 of 25 requests agree exactly" in r.reasons[0].basis
    first = r.largest_differences[0]
    assert (first.request_id, first.observed_hit_tokens) == ("conv6-turn2", 0)


def test_agreeing_counts_give_no_shortfall_and_no_reason() -> None:
    r = replay_trace(read_trace(SGLANG / "metrics_agree")).reconciliation
    assert r is not None
    assert (r.shortfall, r.differing_requests, r.reasons) == (None, 0, ())
    assert sum(w.observed_hit_tokens for w in r.windows) == 6615


def _pool_run(pool: PoolSize | None):  # type: ignore[no-untyped-def]
    trace = read_trace(SGLANG / "metrics_pool")
    rules, name, _ = effective_rules(trace)
    found = reconcile_trace(trace, rules, preset=name, pool=pool)
    assert found is not None and found.shortfall is not None
    return found


def test_the_replay_at_the_deployments_pool_agrees_and_names_capacity_first() -> None:
    found = _pool_run(PoolSize(blocks=POOL_TOKENS, source="--kv-capacity"))
    first = found.reasons[0]
    assert (first.cause, first.tested) == ("capacity", "agrees")
    assert first.text.startswith("capacity: the replay at 800 blocks (--kv-capacity) agrees")
    # The engine's own counts: 5,644 hit tokens of 9,047 (workload.Engine at 800 tokens);
    # the unlimited replay misses 971 of them on 12 requests, the replay at 800 blocks 123.
    assert "by 123 tokens on 3 requests, the replay under the rules by 971 tokens on 12" in \
        first.basis
    assert "the engine hit 1,742 tokens, the replay at 800 blocks (--kv-capacity) 1,636" in \
        first.basis


def test_a_pool_that_does_not_bind_rules_capacity_out() -> None:
    found = _pool_run(PoolSize(blocks=1200, source="--kv-capacity"))
    assert found.reasons[-1].cause == "capacity"
    assert found.reasons[-1].tested == "ruled out"
    assert found.reasons[-1].text.startswith("not capacity alone")
    assert found.reasons[0].cause == "reset"


def test_without_the_pool_capacity_is_named_untested_with_what_to_give() -> None:
    t = np.arange(20, dtype=np.float64)
    hits = np.full(20, 50)
    observed = hits.astype(np.float64)
    observed[::2] = 0  # every other request, from the first: no clean stretch before it
    r = reconcile(t, _ids(20), observed, hits, np.full(20, 100), instances=2)
    assert r is not None and r.shortfall is not None
    assert (r.shortfall.start_s, r.shortfall.end_s) == (0.0, 19.0)
    assert [(x.cause, x.tested) for x in r.reasons] == [("capacity", "untested"),
                                                         ("routing", "untested")]
    assert "--kv-capacity" in r.reasons[0].text


def test_hits_that_stop_at_tenant_boundaries_are_the_tenant_salt_reason() -> None:
    # Two tenants share a system prompt; the engine salted them apart (each tenant's first
    # request misses it), the replay shared it.
    t = np.arange(8, dtype=np.float64)
    shared = np.array([0, 60, 60, 90, 90, 90, 90, 90])
    salted = np.array([0, 0, 60, 90, 90, 90, 90, 90])
    observed = salted.astype(np.float64)
    salt = Alternative(cause="tenant-salt", label="the replay with tenants salted apart",
                       hit_tokens=salted)
    r = reconcile(t, _ids(8), observed, shared, np.full(8, 100), alternatives=(salt,))
    assert r is not None
    assert [(x.cause, x.tested) for x in r.reasons[:1]] == [("tenant-salt", "agrees")]
    assert "stop at tenant boundaries" in r.reasons[0].text


def test_a_replay_that_changes_nothing_is_not_listed() -> None:
    t = np.arange(8, dtype=np.float64)
    hits = np.full(8, 50)
    same = Alternative(cause="tenant-salt", label="the replay with tenants sharing blocks",
                       hit_tokens=hits.copy())
    r = reconcile(t, _ids(8), hits - 10.0, hits, np.full(8, 100), alternatives=(same,))
    assert r is not None and "tenant-salt" not in [x.cause for x in r.reasons]


def test_observed_above_the_replay_is_a_counting_reason_not_a_shortfall() -> None:
    t = np.arange(20, dtype=np.float64)
    hits = np.full(20, 10)
    r = reconcile(t, _ids(20), (hits + 5).astype(np.float64), hits, np.full(20, 100))
    assert r is not None and r.shortfall is None
    assert [x.cause for x in r.reasons] == ["counting"]


def test_the_margins_are_both_needed() -> None:
    t = np.arange(10, dtype=np.float64)
    hits = np.full(10, 500)
    observed = hits - 30.0  # 3 points of a 1,000-token prompt, 6 % of the replayed hits
    r = reconcile(t, _ids(10), observed, hits, np.full(10, 1000))
    assert r is not None and r.shortfall is None
    loose = reconcile(t, _ids(10), observed, hits, np.full(10, 1000), relative=0.05)
    assert loose is not None and loose.shortfall is not None


def test_an_engine_that_shares_blocks_across_tenants_is_the_tenant_salt_reason() -> None:
    # baseten_orgs_shared.parquet (AIPerf 0.13.0's BasetenTrace schema): two organisations
    # each run both applications, and the engine salts neither apart; the vllm replay keeps
    # organisations apart, so the second organisation's first turn of each application hits
    # the system prompt in the engine only (2 requests, 112 tokens: 7 blocks of 16).
    trace = read_trace(FIXTURES / "captures" / "baseten" / "baseten_orgs_shared.parquet")
    rules, name, _ = effective_rules(trace)
    found = reconcile_trace(trace, rules, preset=name)
    assert found is not None and found.shortfall is None
    assert (found.differing_requests, found.above_tokens) == (2, 112)
    first = found.reasons[0]
    assert (first.cause, first.tested) == ("tenant-salt", "agrees")
    assert "shares blocks across tenants (no cache_salt)" in first.text
    assert "differs from the engine's counts by 0 tokens on 0 requests" in first.basis


def test_trace_replay_tests_the_causes_too() -> None:
    from yaotu_trace.commands.replay import replay

    shared = FIXTURES / "captures" / "baseten" / "baseten_orgs_shared.parquet"
    section = replay(shared).sections["prefix_reuse"]["observed_over_time"]
    first = section["reasons"][0]
    assert (first["cause"], first["tested"]) == ("tenant-salt", "agrees")
