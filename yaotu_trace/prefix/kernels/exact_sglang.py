"""SGLang's radix cache, replayed exactly: per-request hits equal to its `RadixCache` on a
finite token pool (spec §5, engine-exact accounting `sglang`).

The clean model caches single blocks under one LRU list. SGLang keeps a radix tree whose
nodes are runs of pages, and two of its behaviours change which prefixes survive a full pool:

- `match_prefix` stamps every node it visits with the lookup's time, *including* a node it
  then splits, so the unmatched remainder of a partially matched node is refreshed too
  (`radix_cache.py`: `_match_prefix_helper` sets `last_access_time` before `_split_node`; the
  new prefix node is created after, so it is newer still). `insert` does the same for the
  node it splits.
- `evict` pops evictable leaves (unlocked, childless), least recently stamped first, and frees
  each *whole* leaf until the tokens asked for are freed, so it frees more than asked; a parent
  left childless and unlocked joins the heap (`radix_cache.py`: `evict`;
  `evict_policy.py`: `LRUStrategy` orders by `last_access_time`).

Per request, as the scheduler handles one request (`schedule_batch.py`, `common.py`,
`allocation.py`): a prompt needing more pages than the pool is rejected (hit 0, nothing
inserted); otherwise the lookup capped at n − 1 tokens, page-aligned down
(`_compute_max_prefix_len`), gives the hit and locks the matched path; the request needs
ceil(n / P) − hit pages, and the allocator evicts the shortfall against its free pages first
(`alloc_token_slots` asks for exactly the new tokens at page size 1;
`alloc_paged_token_slots_extend` asks for one page more, its per-request over-estimate); the
page-aligned prompt is inserted, the pages the tree already held and the partial tail go back
to the pool, the path is matched again (`RadixCache.checkpoint`) and unlocked. The pool holds
`capacity_pages` pages, SGLang's `TokenToKVPoolAllocator` / `PagedTokenToKVPoolAllocator` of
capacity_pages × P tokens (its padding slot 0 is outside that).

Exact, against SGLang 0.5.23 driven on CPU (`benchmarks/engines/golden_sglang.py`, fixtures in
`tests/fixtures/engines/`): every request's hit, the rejected requests, the pages evicted. Stamps
are a counter that advances wherever SGLang reads `time.monotonic()`, so they order as the
engine's do, and evictable leaves never tie (nodes stamped by one call lie on one root path, and
only the deepest of them can be a leaf). Not modelled: output tokens (never inserted here),
concurrent requests (one at a time, as `replay` is), chunked prefill, priorities and the other
eviction policies.

The kernel keeps, per distinct page id (ids are chained, so an id is its whole path), whether
it is in the tree and its node; per node its pages as a slice of `chains.ids` (the request
that inserted them) with its first depth, parent, child count, lock count and stamp; and one
binary heap of (stamp, node) with lazy deletion: an entry is live while its node is alive,
unlocked, childless and still carries that stamp. O(pages) per request plus O(log) per heap
operation.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from yaotu_trace._lists import heap_pop, heap_push
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.result import ReplayResult, hits_result

_ROOT = 0


@nb.njit(cache=True, inline="always")
def _stamp_path(node, stamp, parent, last_access):
    """`last_access_time = t` on `node` and its ancestors (the root's stamp is never read)."""
    while node != _ROOT:
        last_access[node] = stamp
        node = parent[node]


@nb.njit(cache=True)
def _split(node, k, ids, node_of, first_depth, src, length, parent, children, lock,
           last_access, alive, num_nodes, clock):
    """`_split_node`: a new node takes the first `k` pages of `node` (stamped after the
    caller's stamp, as `TreeNode()` reads the clock); `node` keeps the rest.
    Returns (new node, node count, clock)."""
    new = num_nodes
    clock += 1
    first_depth[new] = first_depth[node]
    src[new] = src[node]
    length[new] = k
    parent[new] = parent[node]
    children[new] = 1
    lock[new] = lock[node]
    last_access[new] = clock
    alive[new] = 1
    for p in range(src[node], src[node] + k):
        node_of[ids[p]] = new
    first_depth[node] += k
    src[node] += k
    length[node] -= k
    parent[node] = new
    return new, num_nodes + 1, clock


@nb.njit(cache=True)
def _push_if_leaf(node, children, lock, last_access, heap_key, heap_val, heap_n):
    """Offer `node` to the eviction heap when it is an evictable leaf."""
    if node != _ROOT and children[node] == 0 and lock[node] == 0:
        heap_n = heap_push(heap_key, heap_val, heap_n, last_access[node], node)
    return heap_n


def _empty_tree(n: int, num_distinct: int) -> tuple[np.ndarray, ...]:
    """The tree's arrays for `n` requests: per node (first depth, source slice start, length,
    parent, child count, lock count, stamp, alive), per page id (node, in tree), and the
    eviction heap's keys and values; then per request its hit pages and whether it was
    rejected. Only the root (node 0, locked for good) exists. Made here, not in the compiled
    replay: an array allocated there compiles numba's `np.zeros` with it on a first run."""
    max_nodes = 3 * n + 1  # per request at most: a split in the lookup, one in the insert, a leaf
    first_depth = np.zeros(max_nodes, dtype=np.int64)
    src = np.zeros(max_nodes, dtype=np.int64)
    length = np.zeros(max_nodes, dtype=np.int64)
    parent = np.zeros(max_nodes, dtype=np.int32)
    children = np.zeros(max_nodes, dtype=np.int32)
    lock = np.zeros(max_nodes, dtype=np.int32)
    last_access = np.zeros(max_nodes, dtype=np.int64)
    alive = np.zeros(max_nodes, dtype=np.uint8)
    lock[_ROOT] = 1  # the root is locked for good (`reset`)
    alive[_ROOT] = 1
    node_of = np.zeros(max(num_distinct, 1), dtype=np.int32)
    in_tree = np.zeros(max(num_distinct, 1), dtype=np.uint8)
    heap_size = 2 * max_nodes + 3 * n + 8  # pushes: 3 per request + 1 per evicted parent
    heap_key = np.empty(heap_size, dtype=np.int64)
    heap_val = np.empty(heap_size, dtype=np.int64)
    return (first_depth, src, length, parent, children, lock, last_access, alive, node_of,
            in_tree, heap_key, heap_val, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint8))


@nb.njit(cache=True)
def _cached_run(ids, start, h, end, in_tree):
    """Where the run of the request's pages in the tree from page `h` on ends (at most `end`)."""
    while h < end and in_tree[ids[start + h]] != 0:
        h += 1
    return h


@nb.njit(cache=True)
def _stamp_prefix(ids, start, m, clock, node_of, first_depth, src, length, parent, children,
                  lock, last_access, alive, num_nodes):
    """The node where the request's first `m` cached pages end (the root for m = 0), stamped
    `clock` with its ancestors and split when they end mid-node. Returns (node, the split-off
    remainder or the root, node count, clock)."""
    if m == 0:
        return _ROOT, _ROOT, num_nodes, clock
    node = node_of[ids[start + m - 1]]
    _stamp_path(node, clock, parent, last_access)
    k = m - first_depth[node]
    if k >= length[node]:
        return node, _ROOT, num_nodes, clock
    new, num_nodes, clock = _split(node, k, ids, node_of, first_depth, src, length, parent,
                                   children, lock, last_access, alive, num_nodes, clock)
    return new, node, num_nodes, clock


@nb.njit(cache=True)
def _lock_path(node, delta, parent, lock):
    """`inc_lock_ref` (delta 1) or `dec_lock_ref` (-1) on `node` and its ancestors."""
    while node != _ROOT:
        lock[node] += delta
        node = parent[node]


@nb.njit(cache=True)
def _drop_leaf(v, ids, src, length, parent, children, alive, in_tree):
    """Leaf `v` leaves the tree with its pages. Returns (pages freed, its parent)."""
    for p in range(src[v], src[v] + length[v]):
        in_tree[ids[p]] = 0
    alive[v] = 0
    up = parent[v]
    children[up] -= 1
    return length[v], up


@nb.njit(cache=True)
def _add_leaf(leaf, end, start, m, full, clock, ids, node_of, in_tree, first_depth, src,
              length, parent, children, lock, last_access, alive):
    """Pages m..full-1 of the request hang below `end` as the new leaf `leaf`, stamped
    `clock`."""
    first_depth[leaf] = m
    src[leaf] = start + m
    length[leaf] = full - m
    parent[leaf] = end
    children[leaf] = 0
    lock[leaf] = 0
    last_access[leaf] = clock
    alive[leaf] = 1
    children[end] += 1
    for p in range(start + m, start + full):
        in_tree[ids[p]] = 1
        node_of[ids[p]] = leaf


# NOTE: the eviction loop and the heap pushes stay in the kernel; the helpers above never
# touch the heap. A helper that pushes or pops it keeps the reference counts of the arrays it
# is passed (an increment and a decrement each, per call): the match, the eviction and the
# insert as helpers took about 3x the CPU time of the single loop on the Mooncake conversation
# trace, plain or inline="always" (`benchmarks/prefix_vs.py --only sglang`).
@nb.njit(cache=True, nogil=True)
def _radix_replay(offsets, ids, max_hit, prompt_tokens, page_tokens, capacity, first_depth, src,
                  length, parent, children, lock, last_access, alive, node_of, in_tree, heap_key,
                  heap_val, hit_pages, rejected):
    """Fills the hit pages and rejected flags of every request (the tree's arrays from
    `_empty_tree`); returns (evicted pages, inserted pages)."""
    n = len(offsets) - 1
    # np.int64, not a literal: numba compiles a helper once per literal value it is given.
    num_nodes = np.int64(1)
    heap_n = np.int64(0)
    clock = np.int64(0)
    tree_pages = 0
    evicted = 0
    inserted = 0
    extra_page = 1 if page_tokens > 1 else 0
    for i in range(n):
        start = offsets[i]
        full = offsets[i + 1] - start
        pages = (prompt_tokens[i] + page_tokens - 1) // page_tokens
        if pages > capacity:
            rejected[i] = 1
            continue
        # match_prefix on the first max_hit pages: stamp the path, split a partial node.
        cap = max_hit[i]
        h = _cached_run(ids, start, np.int64(0), cap, in_tree)  # typed: one compile
        matched = _ROOT
        if cap > 0:
            clock += 1
            matched, rest, num_nodes, clock = _stamp_prefix(
                ids, start, h, clock, node_of, first_depth, src, length, parent, children,
                lock, last_access, alive, num_nodes)
            if rest != _ROOT:
                heap_n = _push_if_leaf(rest, children, lock, last_access, heap_key,
                                       heap_val, heap_n)
        hit_pages[i] = h
        _lock_path(matched, np.int64(1), parent, lock)
        # Allocation: evict whole leaves, oldest stamp first, until the shortfall is freed.
        target = pages - h + extra_page - (capacity - tree_pages)
        freed = 0
        while freed < target and heap_n > 0:
            stamp = heap_key[0]
            v = heap_val[0]
            heap_n = heap_pop(heap_key, heap_val, heap_n)
            if (alive[v] == 0 or lock[v] != 0 or children[v] != 0
                    or last_access[v] != stamp):
                continue
            gone, up = _drop_leaf(v, ids, src, length, parent, children, alive, in_tree)
            freed += gone
            heap_n = _push_if_leaf(np.int64(up), children, lock, last_access, heap_key,
                                   heap_val, heap_n)
        tree_pages -= freed
        evicted += freed
        # insert the page-aligned prompt: stamp the cached path, split where it ends mid-node.
        end = _ROOT
        if full > 0:
            m = _cached_run(ids, start, h, full, in_tree)
            clock += 1
            end, rest, num_nodes, clock = _stamp_prefix(
                ids, start, m, clock, node_of, first_depth, src, length, parent, children,
                lock, last_access, alive, num_nodes)
            if rest != _ROOT:
                heap_n = _push_if_leaf(rest, children, lock, last_access, heap_key,
                                       heap_val, heap_n)
            if m < full:
                clock += 1
                _add_leaf(num_nodes, end, start, m, full, clock, ids, node_of, in_tree,
                          first_depth, src, length, parent, children, lock, last_access, alive)
                end = num_nodes
                num_nodes += 1
                tree_pages += full - m
                inserted += full - m
            # checkpoint: match the inserted key again (stamps the whole path once more).
            clock += 1
            _stamp_path(end, clock, parent, last_access)
        _lock_path(matched, np.int64(-1), parent, lock)
        heap_n = _push_if_leaf(end, children, lock, last_access, heap_key, heap_val, heap_n)
    return evicted, inserted


def replay_sglang(chains: BlockChains, capacity_pages: int) -> ReplayResult:
    """Replay `chains` (page-granular, namespaces in the ids) through SGLang's radix cache of
    `capacity_pages` pages of `chains.block_size_tokens` tokens; see the module docstring.

    Output blocks (`--cache-outputs`) are not inserted: the sglang accounting refuses them.
    """
    if isinstance(capacity_pages, bool) or not isinstance(capacity_pages, (int, np.integer)) or (
        capacity_pages < 1
    ):
        raise ConfigError(f"capacity {capacity_pages!r} must be at least 1 page of SGLang's "
                          "token pool (omit --capacity for an unlimited cache)")
    page = int(chains.block_size_tokens)
    if chains.ids.size and int(chains.last_block_tokens[chains.num_blocks > 0].min()) != page:
        raise ConfigError("SGLang's radix tree caches full pages only; drop "
                          "--cache-partial-blocks (or add --accounting clean)")
    n = chains.num_requests
    memory.require(chains.num_distinct * 5 + (3 * n + 1) * 49 + (9 * n + 10) * 16,
                   f"an SGLang radix replay of {chains.num_distinct:,} distinct pages",
                   "use a larger --block-size")
    tree = _empty_tree(n, chains.num_distinct)
    hit, rejected = tree[-2:]
    evicted, inserted = _radix_replay(
        chains.offsets, chains.ids, chains.max_hit_blocks, chains.prompt_tokens, np.int64(page),
        np.int64(capacity_pages), *tree)
    return hits_result(chains, hit, evicted_blocks=evicted, inserted_blocks=inserted,
                       rejected_requests=int(rejected.sum()))
