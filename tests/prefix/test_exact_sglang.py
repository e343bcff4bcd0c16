"""`replay_sglang` against SGLang's radix cache: a literal model, hand-checked cases, and the
per-request hits of SGLang 0.5.23's real `RadixCache` (tests/fixtures/engines/sglang_*.json,
written by benchmarks/engines/golden_sglang.py)."""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES
from helpers import chains_of

from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.kernels.exact_sglang import replay_sglang
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for

ENGINES = FIXTURES / "engines"


# ------------------------------------------------------------------ a literal radix tree


@dataclass(eq=False)
class _Node:
    key: tuple[int, ...]  # tokens, a whole number of pages
    parent: _Node | None
    stamp: int
    children: dict[tuple[int, tuple[int, ...]], _Node] = field(default_factory=dict)
    lock: int = 0


class RadixModel:
    """SGLang's RadixCache + token pool as plain Python, written from radix_cache.py,
    evict_policy.py (lru) and the scheduler's allocation for one request: token keys, child
    keys (namespace, first page), the clock read once per match/insert and once per new node,
    the matched node's stamp set *before* it is split, whole leaves evicted oldest first."""

    def __init__(self, page: int, pool_pages: int) -> None:
        self.page = page
        self.pool_pages = pool_pages
        self.clock = 0
        self.root = _Node((), None, self._tick(), lock=1)
        self.held_pages = 0
        self.evicted_pages = 0

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _child_key(self, ns: int, key: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        return ns, tuple(key[: self.page])

    def _common(self, a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n // self.page * self.page

    def _split(self, ns: int, node: _Node, at: int) -> _Node:
        assert node.parent is not None
        new = _Node(node.key[:at], node.parent, self._tick(), lock=node.lock)
        node.parent.children[self._child_key(ns, node.key)] = new
        node.key = node.key[at:]
        node.parent = new
        new.children[self._child_key(ns, node.key)] = node
        return new

    def _walk(self, ns: int, key: Sequence[int], split: bool) -> tuple[int, _Node]:
        """Matched tokens and the last node, stamping every node visited (match and insert
        walk alike)."""
        now = self._tick()
        node = self.root
        node.stamp = now
        done = 0
        while done < len(key) and self._child_key(ns, key[done:]) in node.children:
            child = node.children[self._child_key(ns, key[done:])]
            child.stamp = now
            common = self._common(child.key, key[done:])
            done += common
            if common < len(child.key):
                node = self._split(ns, child, common) if split else child
                break
            node = child
        return done, node

    def match(self, ns: int, tokens: Sequence[int], limit: int) -> tuple[int, _Node]:
        key = tokens[: limit // self.page * self.page]
        if not key:
            return 0, self.root
        return self._walk(ns, key, split=True)

    def insert(self, ns: int, tokens: Sequence[int]) -> tuple[int, _Node]:
        key = tokens[: len(tokens) // self.page * self.page]
        if not key:
            return 0, self.root
        done, node = self._walk(ns, key, split=True)
        if done < len(key):
            leaf = _Node(tuple(key[done:]), node, self._tick())
            node.children[self._child_key(ns, key[done:])] = leaf
            self.held_pages += len(leaf.key) // self.page
            node = leaf
        return done, node

    def _leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self.root and not node.children and node.lock == 0:
                out.append(node)
        return out

    def evict(self, pages: int) -> None:
        leaves = self._leaves()
        assert len({leaf.stamp for leaf in leaves}) == len(leaves)  # no ties to break
        heap = [(leaf.stamp, id(leaf), leaf) for leaf in leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < pages and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[next(k for k, v in parent.children.items() if v is leaf)]
            freed += len(leaf.key) // self.page
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))
        self.held_pages -= freed
        self.evicted_pages += freed

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            assert node.parent is not None
            node = node.parent

    def request(self, ns: int, tokens: Sequence[int]) -> int | None:
        """One request; its hit tokens, or None when it is rejected."""
        n = len(tokens)
        pages = -(-n // self.page)
        if pages > self.pool_pages:
            return None
        hit, node = self.match(ns, tokens, n - 1)
        self._lock(node, +1)
        need = pages - hit // self.page
        over_ask = 1 if self.page > 1 else 0
        short = need + over_ask - (self.pool_pages - self.held_pages)
        if short > 0:
            self.evict(short)
        assert need <= self.pool_pages - self.held_pages
        _, end = self.insert(ns, tokens)
        again, end2 = self.match(ns, tokens, n)  # RadixCache.checkpoint
        assert end2 is end and again == n // self.page * self.page
        self._lock(node, -1)
        return hit


def model_hits(prompts: Sequence[Sequence[int]], namespaces: Sequence[int], page: int,
               pool_pages: int) -> tuple[list[int], int, int]:
    model = RadixModel(page, pool_pages)
    out, rejected = [], 0
    for ns, tokens in zip(namespaces, prompts, strict=True):
        hit = model.request(ns, list(tokens))
        rejected += hit is None
        out.append(hit or 0)
    return out, rejected, model.evicted_pages


def exact(prompts: Sequence[Sequence[int]], page: int, pool_pages: int,
          namespaces: Sequence[int] | None = None):
    rules = rules_for("sglang", block_size_tokens=page, accounting="clean")
    return replay_sglang(chains_of(prompts, rules, namespaces), pool_pages)


# ------------------------------------------------------------------ kernel = model


@pytest.mark.parametrize("seed", range(40))
def test_kernel_equals_the_literal_radix_tree_on_random_cases(seed: int) -> None:
    """Random small traces (few tokens, shared prefixes, two namespaces, pages of 1-4): the
    compiled replay and the plain radix tree give the same hits, rejections and evictions."""
    rng = np.random.default_rng(seed)
    page = int(rng.choice([1, 1, 2, 4]))
    stems = [rng.integers(0, 3, size=int(rng.integers(1, 12))).tolist() for _ in range(4)]
    prompts, namespaces = [], []
    for _ in range(int(rng.integers(5, 60))):
        stem = stems[int(rng.integers(0, len(stems)))][: int(rng.integers(0, 12))]
        prompts.append(stem + rng.integers(0, 3, size=int(rng.integers(1, 10))).tolist())
        namespaces.append(int(rng.integers(0, 2)))
    pool_pages = int(rng.integers(1, 30))
    want, rejected, evicted = model_hits(prompts, namespaces, page, pool_pages)
    got = exact(prompts, page, pool_pages, namespaces)
    assert got.hit_tokens.tolist() == want
    assert got.rejected_requests == rejected
    assert got.evicted_blocks == evicted


# ------------------------------------------------------------------ hand-checked cases


def test_split_node_refresh_changes_which_leaf_is_evicted() -> None:
    """Worked by hand from radix_cache.py (`_match_prefix_helper` stamps the child, then
    `_split_node`). Pool 10 tokens, page 1. r2's lookup matches [1 2] inside the leaf
    [1 2 3 4] and refreshes the whole node before splitting it, so the remainder [3 4] is newer
    than [5 6 7 8]; r3 needs 2 free tokens and evicts [5 6 7 8], so r4 still hits [1 2 3 4]
    and r5 misses. Without the refresh [3 4] would be the oldest leaf: r4 would hit 2, r5 4."""
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 9, 9], [7, 7], [1, 2, 3, 4, 1],
               [5, 6, 7, 8, 2]]
    result = exact(prompts, 1, 10)
    assert result.hit_tokens.tolist() == [0, 0, 2, 0, 4, 0]
    assert model_hits(prompts, [0] * 6, 1, 10)[0] == [0, 0, 2, 0, 4, 0]


def test_whole_leaf_eviction_frees_more_than_asked() -> None:
    """By hand: pool 6, page 1. r0 caches one leaf of 5 tokens; r1 needs 2 slots with 1 free,
    so eviction is asked for 1 token and frees the whole leaf (5); r2 needs 6 with 4 free and
    frees r1's leaf (2). The clean model evicts one block for r1, the tail, and r2 would still
    hit 4 tokens."""
    prompts = [[1, 2, 3, 4, 5], [9, 8], [1, 2, 3, 4, 5, 6]]
    result = exact(prompts, 1, 6)
    assert result.hit_tokens.tolist() == [0, 0, 0]
    assert result.evicted_blocks == 5 + 2
    assert exact(prompts[:2], 1, 6).evicted_blocks == 5
    clean = rules_for("sglang", block_size_tokens=1, capacity_blocks=6, accounting="clean")
    assert replay(chains_of(prompts, clean), clean).hit_tokens.tolist() == [0, 0, 4]


def test_paged_allocation_asks_for_one_page_more() -> None:
    """By hand from allocation.py (`alloc_paged_token_slots_extend` evicts for the new tokens
    plus one page): pool 4 pages of 2. r0 holds 2 pages, r1 one; r2 needs 1 page and 1 is free,
    yet eviction is asked for 1 more page and takes r0's leaf, so r3 misses it. With page 1
    (the exact ask) the same content keeps r0 cached."""
    prompts = [[1, 2, 3, 4], [5, 6], [7, 8], [1, 2, 3, 4, 9]]
    assert exact(prompts, 2, 4).hit_tokens.tolist() == [0, 0, 0, 0]
    assert exact(prompts[:3], 2, 4).evicted_blocks == 2
    assert exact(prompts, 1, 8).hit_tokens.tolist() == [0, 0, 0, 4]


def test_a_prompt_longer_than_the_pool_is_rejected() -> None:
    """By hand: pool 4 tokens. r0 (5 tokens) cannot be admitted: hit 0, nothing inserted, so
    r2 misses its prefix; r1 fits. With pages of 2, 7 tokens need 4 pages > 3: rejected."""
    result = exact([[1, 2, 3, 4, 5], [7, 7, 7], [1, 2, 3]], 1, 4)
    assert result.hit_tokens.tolist() == [0, 0, 0]
    assert result.rejected_requests == 1
    assert result.inserted_blocks == 6  # r1's 3 tokens, evicted for r2's 3
    paged = exact([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]], 2, 3)
    assert paged.rejected_requests == 1
    assert paged.hit_tokens.tolist() == [0, 0, 4]


def test_tenants_do_not_share_nodes() -> None:
    """Same tokens, another namespace: no hit (SGLang's child key carries the cache_salt)."""
    assert exact([[1, 2, 3], [1, 2, 3], [1, 2, 3]], 1, 100, [0, 1, 0]).hit_tokens.tolist() == [
        0, 0, 2]


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True])
def test_a_bad_capacity_is_a_config_error(capacity: object) -> None:
    with pytest.raises(ConfigError, match="at least 1 page"):
        exact([[1, 2]], 1, capacity)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the real engine


def _fixtures() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(ENGINES.glob("sglang_*.json")):
        doc = json.loads(path.read_text())
        out += [(doc["trace"], config) for config in doc["configs"]]
    return out


@pytest.fixture(scope="module")
def prepared():
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = prepare(read_trace(ENGINES / name))
        return cache[name]
    return get


def test_the_fixtures_are_sglang_0_5_23() -> None:
    """What the fixtures were made with (benchmarks/engines/golden_sglang.py)."""
    docs = [json.loads(p.read_text()) for p in sorted(ENGINES.glob("sglang_*.json"))]
    assert [d["trace"] for d in docs] == ["trace_mixed.parquet", "trace_sessions.parquet"]
    assert {d["engine_version"] for d in docs} == {"0.5.23"}
    configs = [c for d in docs for c in d["configs"]]
    assert {c["page_size"] for c in configs} == {1, 16}
    assert any(c["rejected"] for c in configs) and any(c["evicted_tokens"] == 0 for c in configs)


@pytest.mark.parametrize(("trace", "config"), _fixtures(),
                         ids=lambda v: v if isinstance(v, str) else
                         f"P{v['page_size']}-pool{v['pool_tokens']}")
def test_every_request_equals_sglang(prepared, trace: str, config: dict) -> None:
    """Per request, the hits of SGLang 0.5.23's RadixCache driven on CPU with its real token
    allocator (tests/fixtures/engines/sglang_*.json, from benchmarks/engines/golden_sglang.py),
    and the same rejections and evicted tokens."""
    page = config["page_size"]
    rules = rules_for("sglang", block_size_tokens=page)
    result = replay_sglang(prepared(trace).chains(rules), config["pool_tokens"] // page)
    assert result.hit_tokens.tolist() == config["hit_tokens"]
    assert result.rejected_requests == len(config["rejected"])
    assert result.evicted_blocks * page == config["evicted_tokens"]


@pytest.mark.parametrize("index", [0, 3, 9])
def test_the_literal_model_equals_sglang_too(index: int) -> None:
    """The plain radix tree above against the same fixtures (so it is a reference, not a
    copy of the kernel): tight, middle and a tight paged pool."""
    trace, config = _fixtures()[index]
    table = pd.read_parquet(ENGINES / trace)
    codes = table["tenant"].astype("category").cat.codes.tolist()
    prompts = [list(map(int, p)) for p in table["prompt_tokens"]]
    page = config["page_size"]
    hits, rejected, evicted = model_hits(prompts, codes, page, config["pool_tokens"] // page)
    assert hits == config["hit_tokens"]
    assert rejected == len(config["rejected"])
    assert evicted * page == config["evicted_tokens"]


# ------------------------------------------------------------------ the clean model


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("trace", ["trace_mixed.parquet", "trace_sessions.parquet"])
def test_unlimited_equals_the_clean_replay(prepared, trace: str, page: int) -> None:
    """A pool that never fills: the radix replay gives the clean unlimited replay's hits."""
    rules = rules_for("sglang", block_size_tokens=page)
    chains = prepared(trace).chains(rules)
    ample = int(chains.num_blocks.sum()) + int(chains.num_requests) + 1
    result = replay_sglang(chains, ample)
    assert result.hit_tokens.tolist() == replay(chains, rules).hit_tokens.tolist()
    assert result.evicted_blocks == 0
    assert result.inserted_blocks == chains.num_distinct


def test_partial_blocks_are_refused() -> None:
    """SGLang inserts page-aligned keys only: chains that cache a partial block are an error."""
    rules = rules_for("mooncake", block_size_tokens=2, cache_partial_blocks=True)
    with pytest.raises(ConfigError, match="full pages only"):
        replay_sglang(chains_of([[1, 2, 3]], rules), 10)
