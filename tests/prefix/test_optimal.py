"""`--eviction optimal` (Belady's MIN): hand-checked caches, an exhaustive optimum, the bound.

The exhaustive search below is the oracle: it replays demand caching (every touched block is
cached when touched, any other block may be evicted) trying every eviction choice, and returns
the best total of leading-run hits. MIN must equal it whenever every request fits in the cache.
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from helpers import chains_of, flatten, hits, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix import replay_trace_with_requests
from yaotu_trace.prefix.kernels.blocks import build_block_chains
from yaotu_trace.prefix.kernels.chains import BlockChains, PromptContent
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.rules import rules_for

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def exhaustive_optimum(chains: BlockChains, capacity: int, head_first: bool = False,
                       weighted: bool = True) -> int:
    """Best Σ hit tokens (blocks when not `weighted`) over every sequence of eviction choices."""
    off = chains.offsets.tolist()
    ids = chains.ids.tolist()
    tokens = chains.block_tokens.tolist()
    out_off = chains.output_offsets.tolist() if chains.output_offsets is not None else None
    out_ids = chains.output_ids.tolist() if chains.output_ids is not None else []
    requests = []
    for i in range(chains.num_requests):
        prompt = ids[off[i]:off[i + 1]]
        touches = prompt + (out_ids[out_off[i]:out_off[i + 1]] if out_off else [])
        requests.append((prompt, tokens[off[i]:off[i + 1]], int(chains.max_hit_blocks[i]),
                         touches if head_first else touches[::-1]))

    def after(touches: list[int], state: frozenset[int]) -> set[frozenset[int]]:
        states = {state}
        for x in touches:
            nxt: set[frozenset[int]] = set()
            for s in states:
                if x in s:
                    nxt.add(s)
                elif len(s) < capacity:
                    nxt.add(s | {x})
                else:
                    nxt.update((s - {v}) | {x} for v in s)
            states = nxt
        return states

    @cache
    def best(i: int, state: frozenset[int]) -> int:
        if i == len(requests):
            return 0
        prompt, weight, cap, touches = requests[i]
        h = 0
        while h < cap and prompt[h] in state:
            h += 1
        gain = sum(weight[:h]) if weighted else h
        return gain + max(best(i + 1, s) for s in after(touches, state))

    return best(0, frozenset())


@st.composite
def tiny_traces(draw: st.DrawFn, max_requests: int = 6, max_len: int = 5):
    n = draw(st.integers(1, max_requests))
    prompts: list[list[int]] = []
    for i in range(n):
        p = draw(st.lists(st.integers(0, 2), max_size=max_len))
        if i and draw(st.booleans()):
            j = draw(st.integers(0, i - 1))
            p = prompts[j][: draw(st.integers(0, len(prompts[j])))] + p
        prompts.append(p[: max_len + 1])
    return prompts


def _chains(prompts, rules, outputs=None) -> BlockChains:
    if outputs is None:
        return chains_of(prompts, rules)
    off, val, length = flatten(prompts)
    out_off, out_val, _ = flatten(outputs)
    content = PromptContent(offsets=off, values=val, prompt_len=length, output_offsets=out_off,
                            output_values=out_val)
    return build_block_chains(content, None, rules)


def _longest_request(chains: BlockChains) -> int:
    blocks = np.diff(chains.offsets)
    if chains.output_offsets is not None:
        blocks = blocks + np.diff(chains.output_offsets)
    return int(blocks.max(initial=0))


# ---------------------------------------------------------------- hand-checked


def test_three_block_cache_where_lru_misses_and_optimal_hits() -> None:
    """Four one-block prompts cycled twice through 3 blocks (Belady's example, checked by hand):
    LRU evicts each block just before it comes back (no hit); MIN evicts the block used last
    (request 3's, at index 6), so indices 4, 5 and 7 hit."""
    prompts = [[1], [2], [3], [4]] * 2
    assert hits(prompts, block_size_tokens=1, capacity_blocks=3) == [0] * 8
    best = run(prompts, block_size_tokens=1, capacity_blocks=3, eviction="optimal")
    assert best.hit_tokens.tolist() == [0, 0, 0, 0, 1, 1, 0, 1]
    assert (best.inserted_blocks, best.evicted_blocks) == (5, 2)


def test_deeper_block_goes_first_on_a_tie() -> None:
    """[a b] then [c] then [a b] in 2 blocks: a and b share their next use (request 2); the
    tie goes to the deeper b, so a stays and request 2 hits its head (by hand: 1 token), in
    either touch order; head-first LRU touched a first, so it drops a and hits nothing."""
    prompts = [[7, 8], [9], [7, 8, 5]]
    for touch in ("tail-first", "head-first"):
        assert hits(prompts, block_size_tokens=1, capacity_blocks=2, eviction="optimal",
                    touch_order=touch) == [0, 0, 1]
    assert hits(prompts, block_size_tokens=1, capacity_blocks=2,
                touch_order="head-first") == [0, 0, 0]


def test_unused_blocks_go_before_used_ones() -> None:
    """A shared 2-block system prompt and one-off user turns, 3 blocks (by hand): MIN keeps the
    system prompt and drops each turn's own block, so every later request hits 2 blocks."""
    system = [1, 1, 2, 2]
    prompts = [[*system, 10 + i, 10 + i] for i in range(5)]
    got = hits(prompts, block_size_tokens=2, capacity_blocks=3, eviction="optimal")
    assert got == [0, 4, 4, 4, 4]


def test_unlimited_optimal_is_unlimited_lru() -> None:
    prompts = [[1, 2, 3], [1, 2, 4], [1, 2, 3, 5]]
    assert hits(prompts, block_size_tokens=1, eviction="optimal") == hits(prompts,
                                                                           block_size_tokens=1)
    assert hits(prompts, block_size_tokens=1, eviction="optimal", scope="instance",
                instances=2) == hits(prompts, block_size_tokens=1, scope="instance", instances=2)


def test_output_touches_insert_and_later_prompts_use_them() -> None:
    """Multi-turn with --cache-outputs, 3 blocks of 1 token (by hand): turn 1 is [1] + output
    [5], then two unrelated prompts, then turn 2 [1 5 6]. LRU touched the output block first
    (tail first), so [8] evicts it and turn 2 hits 1 token; MIN evicts [9] and hits both."""
    rules = rules_for("none", block_size_tokens=1, capacity_blocks=3, cache_outputs=True,
                      eviction="optimal")
    chains = _chains([[1], [9], [8], [1, 5, 6]], rules, outputs=[[5], [], [], []])
    assert replay(chains, rules).hit_tokens.tolist() == [0, 0, 0, 2]
    lru = rules.with_(eviction="lru")
    assert replay(chains, lru).hit_tokens.tolist() == [0, 0, 0, 1]


def test_prefix_affinity_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="prefix-affinity routes by what the caches hold"):
        rules_for("none", eviction="optimal", scope="instance", route="prefix-affinity",
                  instances=2)


# ---------------------------------------------------------------- optimum and bound


def test_head_first_min_can_fall_short_of_the_optimum() -> None:
    """By hand, one token a block, a cache of 4, head-first: A B C, then A D E, A B C, A D E.
    After the second request the cache holds A..E and must keep E (touched last). MIN drops
    the farthest next use, D (needed by the fourth request, as E is): E is then of no use
    without it, and the fourth request hits A alone (0 + 1 + 3 + 1 = 5 blocks). Dropping C
    instead costs the third request one block and lets the fourth hit three (0 + 1 + 2 + 3 =
    6), which the exhaustive search finds. Tail-first the block that must stay is the head,
    and no such trade arises."""
    rules = rules_for("none", block_size_tokens=1, last_token_rule=False, capacity_blocks=4,
                      touch_order="head-first", eviction="optimal")
    chains = _chains([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 1, 0]], rules)
    assert replay(chains, rules).hit_blocks.tolist() == [0, 1, 3, 1]
    assert exhaustive_optimum(chains, 4, head_first=True, weighted=False) == 6
    # still above every online policy here
    for policy in ("lru", "fifo", "lfu"):
        assert int(replay(chains, rules.with_(eviction=policy)).hit_blocks.sum()) < 5


@SETTINGS
@given(tiny_traces(), st.integers(1, 2), st.booleans(), st.booleans(), st.booleans(),
       st.integers(1, 4), st.sampled_from(["tail-first", "head-first"]))
def test_equals_the_exhaustive_optimum_when_requests_fit(prompts, block, ltr, partial, outputs,
                                                         capacity, touch) -> None:
    """Exhaustive search over every eviction choice (above): MIN's hit blocks never exceed the
    optimum (every state MIN keeps is reachable by demand caching), and equal it tail-first
    whenever no request has more blocks than the cache. Head-first the deepest block must stay
    and MIN can fall one short (`test_head_first_min_can_fall_short_of_the_optimum`)."""
    rules = rules_for("none", block_size_tokens=block, last_token_rule=ltr,
                      cache_partial_blocks=partial and not outputs, capacity_blocks=capacity,
                      cache_outputs=outputs, touch_order=touch, eviction="optimal")
    outs = [p[:2][::-1] for p in prompts] if outputs else None
    chains = _chains(prompts, rules, outs)
    got = replay(chains, rules)
    head_first = touch == "head-first"
    best_blocks = exhaustive_optimum(chains, capacity, head_first, weighted=False)
    assert int(got.hit_blocks.sum()) <= best_blocks
    if _longest_request(chains) <= capacity and touch == "tail-first":
        assert int(got.hit_blocks.sum()) == best_blocks
        if not rules.cache_partial_blocks:
            assert int(got.hit_tokens.sum()) == exhaustive_optimum(chains, capacity, head_first)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_traces(max_requests=24, max_len=10), st.integers(1, 3), st.booleans(),
       st.booleans(), st.sampled_from(["tail-first", "head-first"]), st.integers(0, 2))
def test_hits_at_least_lru_fifo_lfu_at_every_capacity(prompts, block, ltr, partial, touch,
                                                      instances) -> None:
    """The bound, on random traces at every capacity from 1 block to beyond the working set,
    one global cache or round-robin instances: optimal hit tokens >= LRU, FIFO and LFU. With
    cached partial blocks the bound is on hit blocks: MIN does not weigh a block by its tokens,
    so it may keep a 1-token partial block over a 3-token full one (LFU kept the full one in a
    case hypothesis found)."""
    kw: dict = {"scope": "instance", "route": "round-robin", "instances": instances} if (
        instances) else {}
    base = rules_for("none", block_size_tokens=block, last_token_rule=ltr,
                     cache_partial_blocks=partial, touch_order=touch, **kw)
    chains = chains_of(prompts, base)
    for capacity in range(1, 12):
        rules = base.with_(capacity_blocks=capacity)
        field = "hit_blocks" if partial else "hit_tokens"
        best = int(getattr(replay(chains, rules.with_(eviction="optimal")), field).sum())
        for policy in ("lru", "fifo", "lfu"):
            assert best >= int(getattr(replay(chains, rules.with_(eviction=policy)), field).sum())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_traces(max_requests=16, max_len=8), st.integers(1, 6), st.integers(1, 3))
def test_per_instance_caches_are_independent_replays(prompts, capacity, k) -> None:
    """With static routes each instance is its own cache with its own future: the replay equals
    a global replay of each instance's requests alone; least-loaded equals its own routes."""
    codes = np.arange(len(prompts)) % k
    rules = rules_for("none", block_size_tokens=1, capacity_blocks=capacity, eviction="optimal",
                      scope="instance")
    got = run(prompts, instance_codes=codes, **{f: getattr(rules, f) for f in (
        "block_size_tokens", "capacity_blocks", "eviction", "scope")}).hit_tokens
    for c in range(k):
        rows = np.flatnonzero(codes == c)
        alone = hits([prompts[r] for r in rows], block_size_tokens=1, capacity_blocks=capacity,
                     eviction="optimal")
        assert got[rows].tolist() == alone
    chains = chains_of(prompts, rules)
    loaded = replay(chains, rules.with_(route="least-loaded", instances=k))
    assert loaded.instance is not None
    static = replay(chains, rules, loaded.instance)
    assert loaded.hit_tokens.tolist() == static.hit_tokens.tolist()


# ---------------------------------------------------------------- the waterfall's split


def _trace(prompts, tenants=None):
    data: dict[str, object] = {"arrival_s": [float(i) for i in range(len(prompts))],
                               "prompt_len": [len(p) for p in prompts],
                               "output_len": [1] * len(prompts), "prompt_tokens": prompts}
    if tenants is not None:
        data["tenant"] = tenants
    return normalize(RawTrace(requests=pd.DataFrame(data), format_name="test"), "test.jsonl")


def test_waterfall_splits_capacity_from_what_lru_costs() -> None:
    """The 3-block cycle above (by hand): ideal 4 tokens (requests 4-7 each repeat one block),
    unlimited 4; with optimal eviction 3 (capacity loses 1), LRU 0 (the policy loses 3)."""
    rules = rules_for("none", block_size_tokens=1, capacity_blocks=3)
    summary, table = replay_trace_with_requests(_trace([[1], [2], [3], [4]] * 2), rules)
    steps = {s.step: s for s in summary.waterfall}
    assert summary.ideal_hit_tokens == 4
    assert (steps["capacity"].hit_tokens, steps["capacity"].loss_tokens) == (3, 1)
    assert (steps["eviction_policy"].hit_tokens, steps["eviction_policy"].loss_tokens) == (0, 3)
    assert steps["capacity"].label == "capacity (even with optimal eviction)"
    assert steps["eviction_policy"].label == "eviction policy (LRU vs optimal)"
    assert table.columns["loss_eviction_policy_tokens"].tolist() == [0] * 4 + [1, 1, 0, 1]
    doc = summary.to_dict()["waterfall"]["steps"]
    assert [s["step"] for s in doc][-2:] == ["capacity", "eviction_policy"]
    # Optimal eviction itself loses nothing to its policy.
    best, _ = replay_trace_with_requests(_trace([[1], [2], [3], [4]] * 2),
                                         rules.with_(eviction="optimal"))
    assert {s.step: s.loss_tokens for s in best.waterfall}["eviction_policy"] == 0
    assert best.saved_prefill_tokens == 3


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_traces(max_requests=10, max_len=8), st.integers(1, 3), st.booleans(),
       st.one_of(st.none(), st.integers(1, 6)),
       st.sampled_from([None, "round-robin", "least-loaded", "prefix-affinity"]),
       st.sampled_from(["lru", "fifo", "lfu"]))
def test_waterfall_steps_still_sum_exactly(prompts, block, ltr, capacity, route,
                                           policy) -> None:
    """Ideal − Σ losses = achieved, in total and per request, with the capacity step split; the
    policy step (same caches, same routes) loses >= 0 tokens in total."""
    tenants = [("a", "b")[i % 2] for i in range(len(prompts))]
    kw = {"scope": "instance", "route": route, "instances": 2} if route else {}
    rules = rules_for("none", block_size_tokens=block, last_token_rule=ltr,
                      tenant_isolation=True, capacity_blocks=capacity, eviction=policy, **kw)
    summary, table = replay_trace_with_requests(_trace(prompts, tenants), rules)
    assert sum(s.loss_tokens for s in summary.waterfall) == (summary.ideal_hit_tokens
                                                             - summary.saved_prefill_tokens)
    cols = table.columns
    losses = sum(cols[c] for c in cols if c.startswith("loss_"))
    assert (cols["ideal_hit_tokens"] - losses == cols["hit_tokens"]).all()
    steps = {s.step: s.loss_tokens for s in summary.waterfall}
    assert steps["eviction_policy"] >= 0
    if capacity is None:
        assert steps["capacity"] == steps["eviction_policy"] == 0


def test_cli_replay_eviction_optimal(tmp_path, capsys) -> None:
    """`trace replay --eviction optimal --capacity 3` on the 3-block cycle: 3 hit tokens, and
    the console shows both capacity rows."""
    path = tmp_path / "cycle.jsonl"
    prompts = [[1], [2], [3], [4]] * 2
    write_trace(pd.DataFrame({"request_id": [f"r{i}" for i in range(8)],
                              "arrival_s": [float(i) for i in range(8)],
                              "prompt_len": [1] * 8, "output_len": [1] * 8,
                              "prompt_tokens": prompts}), path)
    args = ["replay", str(path), "--preset", "none", "--block-size", "1", "--capacity", "3"]
    code, out, err = run_cli([*args, "--eviction", "optimal", "-f", "json"], capsys)
    assert code == 0, err
    section = json.loads(out)["prefix_reuse"]
    assert section["saved_prefill_tokens"] == 3
    assert section["rules"]["eviction"] == "optimal"
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "capacity (even with optimal eviction)" in out
    assert "eviction policy (LRU vs optimal)" in out
    code, _, err = run_cli([*args, "--eviction", "optimal", "--scope", "instance", "--route",
                            "prefix-affinity"], capsys)
    assert code != 0
    assert "prefix-affinity routes by what the caches hold" in err
