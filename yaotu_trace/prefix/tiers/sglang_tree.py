"""SGLang's HiCache replayed as SGLang runs it: the GPU and the host in one radix tree.

SGLang 0.5's `UnifiedRadixCache` keeps one tree whose nodes (runs of pages) hold their KV on
the GPU, on the host, or both; what the host serves changes what stays on the GPU. This
replay follows that tree request by request, with the calls the scheduler makes for one
request at a time (`benchmarks/engines/golden_tiers_sglang.py`, PROTOCOL), and the rules read
in `mem_cache/unified_radix_cache.py`, `unified_cache/unified_tree_core.py` and
`unified_cache/components/full.py`:

- **Lookup** (`_match_prefix_helper`): down the tree over nodes on the GPU or backed up on the
  host, splitting the node where the match ends; the deepest node reached and its ancestors
  are stamped most recent (the deepest newest). The GPU hit is the run of GPU nodes; the host
  continuation below it is loaded back (`load_back`) when it is at least 10 tokens
  (`load_back_threshold`), after evicting GPU leaves for its room, with the path locked.
- **Allocation** (`alloc_token_slots`, `alloc_paged_token_slots_extend`): the new tokens (one
  page more with pages > 1) are made free by evicting GPU leaves — nodes on the GPU with no
  child on the GPU, unlocked — least recently stamped first, each whole, until enough is free
  (`_evict_components`). A leaf backed up on the host is demoted (its GPU copy freed, the host
  copy stays); one that is not is deleted (`write_through`, `write_through_selective`) or
  backed up first (`write_back`), and when the host cannot take it, dropped with its
  host-only subtree (`drop_subtree_no_host`). When fewer pages are then free than the prompt
  needs past its hit, SGLang raises "Prefill out of memory" and stops; so does the replay
  (`PrefillOutOfMemory`, at the same request in every run of SGLang that stopped).
- **Insert** (`begin_insert`): the page-aligned prompt is walked again, each node touched in
  order (deeper newer), split where the prompt ends mid-node; a host-only node on the way
  takes the request's fresh KV. Each node walked counts a hit (`_inc_hit_count_and_check`,
  not under `write_back`), and a node reaching the policy's threshold (1 for
  `write_through`, 2 for `write_through_selective`) that has no host copy is backed up with
  its unbacked ancestors, ancestors first, stopping at the first the host cannot take.
- **Host room** (`drive_host_eviction`): a backup the host cannot hold evicts host leaves —
  host-only nodes with no children, unlocked — least recently stamped first, each whole; a
  parent left childless and host-only follows. Under `write_back` the host first reclaims
  its duplicates (nodes on both GPU and host, in the order they became duplicates, leaves
  about to be demoted last; `_reclaim_full_host_duplicates`).

- **Storage** (L3, one backend: `--hicache-storage-backend`), when there is one. Every host
  backup is written on at its acknowledgement (`write_backup_storage`), page by page, a page
  already stored only refreshed (`HiCacheFile.set`); the node stays host-locked until the
  write lands, at the end of the request. The store evicts least recently written or read
  pages (`LRUFileEvictor`). Before its lookup a request looks up once more as it arrives
  (`_prefetch_kvcache`); when the deepest node matched is backed up on the host (or is the
  root) and at least 256 tokens (`prefetch_threshold`) lie past it up to n − 1, the store's
  consecutive run of those pages is fetched if it too is 256 tokens or more
  (`prefetch_from_storage`): the host makes room for all of it by evicting that many pages'
  worth of host leaves (the anchor host-locked), else takes what is free if that is still 256
  tokens; the pages read are refreshed in the store and hang under the anchor as a new
  host-only node (`insert_host`). The lookup that follows loads them back with the rest of
  the host continuation; SGLang counts them as storage hits
  (`split_cached_prefix_by_tier`), the rest of the load-back as host hits.

Stamps are a counter advanced wherever SGLang reads its time counter
(`get_and_increase_time_counter`), so they order as the engine's do. Held per request against
SGLang 0.5.23 itself (`tests/fixtures/tiers_sglang`, storage included). `HiCacheTree` here is
the reference; `sglang_tree_kernel.py` runs the same steps compiled (storage included), held
to it on random traces.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import cast

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions
from yaotu_trace.prefix.tiers.sglang import PageLru
from yaotu_trace.prefix.tiers.spec import (
    SGLANG_LOAD_BACK_MIN_TOKENS,
    SGLANG_PREFETCH_MIN_TOKENS,
    TierPolicy,
    TierSpec,
)
from yaotu_trace.prefix.tiers.stops import EngineStops, who

_DEPTH_STEP = 1 << 20  # a lookup stamps its path t, t - 1, t - 2 ... below the next tick


class PrefillOutOfMemory(EngineStops):
    """A request SGLang cannot allocate for: having evicted every GPU leaf it may, fewer pages
    are free than its prefill needs, and SGLang raises "Prefill out of memory" (one-token
    pages: "Out of memory") and stops. Seen under `write_back` with a host smaller than the
    GPU pool and a storage tier: a leaf the host cannot back up is dropped only with its
    host-only subtree, and a node waiting for its storage write is held, so the leaf stays."""

    def __init__(self, request: int, needed_pages: int, free_pages: int, policy: TierPolicy,
                 name: str | None = None) -> None:
        self.needed_pages = needed_pages
        self.free_pages = free_pages
        self.policy = policy
        super().__init__(request, (
            f"{who(request, name)} cannot be allocated under SGLang's HiCache ({policy}): its "
            f"prefill needs {needed_pages:,} GPU pages and {free_pages:,} are free once every "
            "GPU leaf SGLang may evict is gone; SGLang raises 'Prefill out of memory' there "
            "and stops; give the host more room (--tier cpu=...), the GPU pool more "
            "(--capacity) or another --tier-policy"))

    def named(self, name: str) -> PrefillOutOfMemory:
        return PrefillOutOfMemory(self.request, self.needed_pages, self.free_pages, self.policy,
                                  name)


class _Node:
    """A run of pages: `ids[src:src + length]` of the request that inserted them."""

    __slots__ = (
        "children",
        "gpu",
        "hits",
        "host",
        "host_lock",
        "host_use",
        "id",
        "length",
        "lock",
        "parent",
        "src",
        "stamp",
    )

    def __init__(self, node_id: int, parent: _Node, src: int, length: int,
                 stamp: int) -> None:
        self.id = node_id
        self.parent = parent  # the root's is None, and no walk reads it
        self.children: dict[int, _Node] = {}
        self.src = src
        self.length = length
        self.gpu = False
        self.host = False
        self.lock = 0
        self.host_lock = 0
        self.stamp = stamp
        self.hits = 0
        self.host_use = -1  # the request that last used its host copy

    def __lt__(self, other: _Node) -> bool:
        return self.id < other.id


class _Leaves:
    """Evictable leaves (SGLang's `evictable_device_leaves` or `evictable_host_leaves`) with a
    lazy heap by stamp: an entry counts while its node is a member with that stamp. SGLang
    builds a heap from the set at each eviction's start; no stamp changes during an eviction
    and only the evicted node's parent joins the set meanwhile (which SGLang pushes), so the
    least recent member here is the one SGLang pops, without rebuilding the heap each time."""

    __slots__ = ("heap", "members")

    def __init__(self) -> None:
        self.members: set[_Node] = set()
        self.heap: list[tuple[int, _Node]] = []

    def __contains__(self, node: _Node) -> bool:
        return node in self.members

    def add(self, node: _Node) -> None:
        if node not in self.members:
            self.members.add(node)
            heapq.heappush(self.heap, (node.stamp, node))

    def discard(self, node: _Node) -> None:
        self.members.discard(node)

    def restamped(self, node: _Node) -> None:
        if node in self.members:
            heapq.heappush(self.heap, (node.stamp, node))
            if len(self.heap) > 4 * len(self.members) + 4096:  # drop the stale entries
                self.heap = [(n.stamp, n) for n in self.members]
                heapq.heapify(self.heap)

    def oldest(self) -> _Node | None:
        """The least recently stamped member, its entry taken off the heap."""
        heap = self.heap
        while heap:
            stamp, node = heapq.heappop(heap)
            if node.stamp == stamp and node in self.members:
                return node
        return None


class HiCacheTree:
    """SGLang's one tree of GPU and host KV for one write policy, in pages."""

    def __init__(self, ids: np.ndarray, page_tokens: int, gpu_pages: int, host_pages: int,
                 policy: TierPolicy, storage_pages: int | None = None) -> None:
        self.ids = ids
        self.page = page_tokens
        self.gpu_free = gpu_pages
        self.host_free = host_pages
        self.policy = policy
        self.write_back = policy is TierPolicy.SGLANG_WRITE_BACK
        self.threshold = 2 if policy is TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE else 1
        self.clock = 0
        self.next_id = 1
        self.root = _Node(0, cast(_Node, None), 0, 0, 0)
        self.root.gpu = True
        self.root.lock = 1
        self.gpu_leaves = _Leaves()
        self.host_leaves = _Leaves()
        # write_back: nodes on both GPU and host, in the order they became so (stale entries
        # stay until a reclaim walks past them, as in SGLang).
        self.duplicates: OrderedDict[int, _Node] = OrderedDict()
        self.now = -1  # the request being replayed
        self.stored = self.evicted = self.loaded = 0
        self.failed = 0  # backups the host could not make room for
        self.released = 0  # write_back: host copies of GPU nodes reclaimed (nothing lost)
        # Host evictions, per node: (first page in ids, pages, evicting request, last use).
        self.records: list[tuple[int, int, int, int]] = []
        self.backed: list[tuple[int, int]] = []  # (first page, pages) backed up this request
        # The storage backend, and the nodes host-locked until their storage write lands.
        self.storage = None if storage_pages is None else PageLru(storage_pages)
        self.writing: list[_Node] = []

    # ---- clock, sets -------------------------------------------------------------------

    def _tick(self) -> int:
        self.clock += _DEPTH_STEP
        return self.clock

    def _stamp(self, node: _Node, stamp: int) -> None:
        """A new `last_access_time`, which the leaf heaps learn."""
        node.stamp = stamp
        self.gpu_leaves.restamped(node)
        self.host_leaves.restamped(node)

    def _new_node(self, parent: _Node, src: int, length: int) -> _Node:
        node = _Node(self.next_id, parent, src, length, self._tick())
        self._tick()  # creation_time
        self.next_id += 1
        return node

    def _update_sets(self, node: _Node) -> None:
        """`_update_evictable_leaf_sets`: GPU leaf and host leaf membership, re-read."""
        if node is self.root:
            return
        if node.gpu and node.lock == 0 and not any(c.gpu for c in node.children.values()):
            self.gpu_leaves.add(node)
        else:
            self.gpu_leaves.discard(node)
        if (not node.gpu and node.host and node.host_lock == 0 and node.lock == 0
                and not node.children):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    def _track_duplicate(self, node: _Node) -> None:
        """`_update_duplicate_tracking` (write_back only reads it)."""
        if node is not self.root and node.gpu and node.host:
            self.duplicates.setdefault(node.id, node)
        else:
            self.duplicates.pop(node.id, None)

    # ---- locks -------------------------------------------------------------------------

    def _lock(self, node: _Node) -> None:
        """`inc_lock_ref`: the host-only segment at the bottom and the GPU path to the root."""
        cur = node
        while cur is not self.root and not cur.gpu:
            cur.lock += 1
            cur = cur.parent
        while cur is not self.root:
            cur.lock += 1
            self.gpu_leaves.discard(cur)
            cur = cur.parent
        self._update_sets(node)

    def _unlock(self, node: _Node) -> None:
        """`dec_lock_ref`."""
        cur = node
        while cur is not self.root:
            cur.lock -= 1
            if cur.lock == 0:
                self._update_sets(cur)
            cur = cur.parent
        self._update_sets(node)

    # ---- tree edits --------------------------------------------------------------------

    def _matched(self, node: _Node, start: int, depth: int, most: int) -> int:
        """Pages of `node` the request (chain at `start`, `depth` pages matched above it)
        shares, at most `most`: chained ids, so the shared part is a leading run."""
        ids = self.ids
        hi = min(node.length, most)
        if ids[node.src + hi - 1] == ids[start + depth + hi - 1]:
            return hi
        lo = 1  # the first page matched (it is the child's key)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ids[node.src + mid - 1] == ids[start + depth + mid - 1]:
                lo = mid
            else:
                hi = mid
        return lo

    def _split(self, child: _Node, k: int) -> _Node:
        """`_split_node`: a new node takes the first `k` pages of `child`, which keeps the
        rest and is stamped after it."""
        parent = child.parent
        new = self._new_node(parent, child.src, k)
        new.hits = child.hits
        new.gpu, new.host = child.gpu, child.host
        new.lock, new.host_lock = child.lock, child.host_lock
        new.host_use = child.host_use
        first = int(self.ids[child.src])
        child.src += k
        child.length -= k
        child.parent = new
        new.children[int(self.ids[child.src])] = child
        parent.children[first] = new
        self._stamp(child, self._tick())
        self._update_sets(new)
        self._update_sets(child)
        if self.write_back:
            self._track_duplicate(new)
        return new

    def _remove(self, node: _Node) -> None:
        """`_remove_leaf_from_parent`."""
        del node.parent.children[int(self.ids[node.src])]
        self.gpu_leaves.discard(node)
        self.host_leaves.discard(node)
        self.duplicates.pop(node.id, None)

    def _drop_host(self, node: _Node) -> None:
        if node.host:
            node.host = False
            self.host_free += node.length

    def _drop_gpu(self, node: _Node) -> None:
        if node.gpu:
            node.gpu = False
            self.gpu_free += node.length

    def _delete_tombstones(self, cur: _Node) -> None:
        """`_iteratively_delete_tombstone_ancestors`: childless nodes with KV nowhere go."""
        while cur is not self.root and not cur.children:
            if cur.lock or cur.host_lock:
                break
            if cur.gpu or cur.host:
                self._update_sets(cur)
                break
            self._remove(cur)
            cur = cur.parent
            self._update_sets(cur)

    def _delete_gpu_leaf(self, node: _Node) -> None:
        """`_delete_unbacked_device_leaf`."""
        self._drop_gpu(node)
        self._drop_host(node)
        self._remove(node)
        parent = node.parent
        self._update_sets(parent)
        self._delete_tombstones(parent)

    def _demote(self, node: _Node) -> None:
        """The GPU copy of a backed-up node is freed; the node stays, host-only."""
        self._drop_gpu(node)
        self._update_sets(node)
        self._update_sets(node.parent)

    # ---- host --------------------------------------------------------------------------

    def _record_host_loss(self, node: _Node) -> None:
        """The host drops `node`'s pages: counted, and recorded for the capacity misses."""
        self.records.append((node.src, node.length, self.now, node.host_use))
        self.evicted += node.length

    def _evict_host_leaf(self, node: _Node) -> int:
        freed = node.length
        self._record_host_loss(node)
        self._drop_host(node)
        self._remove(node)
        self._delete_tombstones(node.parent)
        return freed

    def _reclaim_duplicates(self, needed: int) -> int:
        """`_reclaim_full_host_duplicates`: host copies of nodes also on the GPU, leaves
        about to be demoted spared on the first pass."""
        freed = 0
        swept: list[int] = []
        for spare_leaves in (True, False):
            if freed >= needed:
                break
            for node in self.duplicates.values():
                if freed >= needed:
                    break
                if not (node.gpu and node.host):
                    swept.append(node.id)
                    continue
                if spare_leaves and node in self.gpu_leaves:
                    continue
                if node.host_lock:
                    continue
                self._drop_host(node)
                freed += node.length
                self.released += node.length
                swept.append(node.id)
        for node_id in swept:
            self.duplicates.pop(node_id, None)
        return freed

    def _evict_host(self, needed: int) -> int:
        """`drive_host_eviction`: host pages freed toward `needed`."""
        freed = self._reclaim_duplicates(needed) if self.write_back else 0
        while freed < needed:
            node = self.host_leaves.oldest()
            if node is None:
                break
            freed += self._evict_host_leaf(node)
        return freed

    def _back_up(self, node: _Node) -> bool:
        """One node's GPU → host copy (`_execute_kv_backup`); False when the host cannot
        make room."""
        if self.host_free < node.length:
            needed = node.length - self.host_free
            if self._evict_host(needed) < needed:
                return False
        self.host_free -= node.length
        node.host = True
        node.host_use = self.now
        self.stored += node.length
        self.backed.append((node.src, node.length))
        if self.storage is not None:  # `write_backup_storage` at the acknowledgement
            node.host_lock += 1
            self.writing.append(node)
            self._update_sets(node)
        return True

    def _write_through(self, node: _Node, locked: list[_Node]) -> None:
        """`_build_backup_kv_action` + `_execute_and_commit_kv_backup`: the node and its
        unbacked ancestors, ancestors first, stopping at the first that fails; each copied
        node stays locked until its write is acknowledged (`locked`)."""
        chain = [node]
        up = node.parent
        while up is not self.root and not up.host:
            chain.append(up)
            up = up.parent
        for target in reversed(chain):
            if target.host:
                continue
            if not self._back_up(target):
                self.failed += 1
                return
            self._lock(target)
            locked.append(target)

    def _count_hit(self, node: _Node, locked: list[_Node]) -> None:
        """`_inc_hit_count_and_check` and the write-through it can fire."""
        if self.write_back or not node.gpu:
            return
        node.hits += 1
        if not node.host and node.hits >= self.threshold:
            self._write_through(node, locked)

    # ---- GPU eviction ------------------------------------------------------------------

    def _evict_leaf(self, node: _Node) -> None:
        if node.host:
            self._demote(node)
        elif not self.write_back:
            self._delete_gpu_leaf(node)
        elif self._back_up(node):
            self._track_duplicate(node)  # the write's acknowledgement
            self._demote(node)
        else:
            self.failed += 1
            self._drop_subtree(node)

    def _drop_subtree(self, node: _Node) -> None:
        """`drop_subtree_no_host`: an unbacked leaf the host cannot take goes, with the
        host-only nodes below it."""
        below: list[_Node] = []
        stack = list(node.children.values())
        while stack:
            cur = stack.pop()
            if cur.lock or cur.host_lock:
                return
            below.append(cur)
            stack.extend(cur.children.values())
        for desc in reversed(below):
            self._record_host_loss(desc)
            self._drop_host(desc)
            self._remove(desc)
        self._delete_gpu_leaf(node)

    def _make_room(self, tokens: int) -> None:
        """`evict_for_alloc`: evict GPU leaves, oldest stamp first, until `tokens` are free."""
        target = tokens // self.page
        kept: list[_Node] = []  # leaves whose drop was declined: not again in this walk
        while self.gpu_free < target:
            node = self.gpu_leaves.oldest()
            if node is None:
                break
            self._evict_leaf(node)
            if node in self.gpu_leaves:
                kept.append(node)
        for node in kept:
            self.gpu_leaves.restamped(node)

    # ---- one request -------------------------------------------------------------------

    def _lookup(self, start: int, cap: int) -> tuple[_Node, _Node, int, int]:
        """`match_prefix` on the first `cap` pages: (deepest node on the GPU, deepest node
        on the GPU or host, GPU pages, pages matched)."""
        node = self.root
        best = best_gpu = self.root
        gpu_pages = depth = 0
        children_key = self.ids
        while depth < cap:
            child = node.children.get(int(children_key[start + depth]))
            if child is None or (not child.gpu and not child.host):
                break
            m = self._matched(child, start, depth, cap - depth)
            split = m < child.length
            if split:
                child = self._split(child, m)
            node = child
            depth += m
            best = node
            if node.gpu:
                best_gpu = node
                gpu_pages = depth
            if split:
                break
        stamp = self._tick()
        cur = best
        while cur is not self.root:
            self._stamp(cur, stamp)
            stamp -= 1
            cur = cur.parent
        self.root.stamp = stamp
        return best_gpu, best, gpu_pages, depth

    def _load_back(self, best: _Node) -> int:
        """`load_back`: the host-only nodes from `best` up onto the GPU; pages loaded."""
        best.host_lock += 1
        self._update_sets(best)
        self._lock(best)
        nodes = []
        cur = best
        while not cur.gpu:
            nodes.append(cur)
            cur = cur.parent
        pages = sum(n.length for n in nodes)
        loaded = 0
        if pages * self.page >= max(1, SGLANG_LOAD_BACK_MIN_TOKENS):
            if self.gpu_free < pages:
                self._make_room(pages * self.page)
            if self.gpu_free >= pages:
                self.gpu_free -= pages
                self._unlock(best)
                for n in reversed(nodes):  # root side first, as the load commits them
                    n.gpu = True
                    n.host_use = self.now
                    self._update_sets(n)
                self._update_sets(best)
                self._lock(best)  # until the load is acknowledged
                loaded = pages
        self._unlock(best)
        best.host_lock -= 1
        self._update_sets(best)
        if loaded and self.write_back:
            for n in nodes:  # the acknowledgement, anchor first
                self._track_duplicate(n)
        return loaded

    def _insert(self, start: int, full: int, locked: list[_Node]) -> None:
        """`insert` of the request's `full` pages."""
        self._tick()  # the root is touched
        node = self.root
        depth = 0
        ids = self.ids
        while depth < full:
            child = node.children.get(int(ids[start + depth]))
            if child is None:
                break
            self._stamp(child, self._tick())
            m = self._matched(child, start, depth, full - depth)
            if m < child.length:
                child = self._split(child, m)
            if not child.gpu:  # `_unevict_node_on_insert`: the request's fresh KV
                child.gpu = True
                self.gpu_free -= child.length
                self._update_sets(child)
                if self.write_back:
                    self._track_duplicate(child)
                self._update_sets(child.parent)
            self._count_hit(child, locked)
            node = child
            depth += m
        if depth < full:
            leaf = self._new_node(node, start + depth, full - depth)
            leaf.gpu = True
            self.gpu_free -= leaf.length
            node.children[int(ids[start + depth])] = leaf
            self._update_sets(leaf)
            self._update_sets(node)
            self._count_hit(leaf, locked)

    # ---- storage -----------------------------------------------------------------------

    def _prefetch(self, start: int, cap: int) -> tuple[int, int]:
        """The arrival's lookup and `prefetch_from_storage`: (first page, pages) fetched
        into the host under the deepest node matched."""
        storage = self.storage
        assert storage is not None
        _, anchor, _, depth = self._lookup(start, cap)
        if anchor is not self.root and not anchor.host:
            return depth, 0
        least = -(-SGLANG_PREFETCH_MIN_TOKENS // self.page)
        if cap - depth < least:
            return depth, 0
        keys = self.ids[start + depth:start + cap].tolist()
        found = 0
        while found < len(keys) and keys[found] in storage.keys:
            found += 1
        if found < least:
            return depth, 0
        if anchor is not self.root:
            anchor.host_lock += 1
            self._update_sets(anchor)
        if self.host_free < found:  # `allocate_storage_hit`
            self._evict_host(found)
            if self.host_free < found:
                found = self.host_free if self.host_free >= least else 0
        if found:
            storage.now = self.now  # the pages are read for this request
            for key in keys[:found]:
                storage.refresh(key)
            storage.loaded += found
            self.host_free -= found
            self.stored += found  # written into the host, from below (as vLLM counts a promotion)
            self._insert_host(anchor, start + depth, found)
        if anchor is not self.root:
            anchor.host_lock -= 1
            self._update_sets(anchor)
        return depth, found

    def _insert_host(self, anchor: _Node, src: int, pages: int) -> None:
        """`insert_host`: the fetched pages as a host-only child of the anchor."""
        self._stamp(anchor, self._tick())
        first = int(self.ids[src])
        # The lookup ended at the anchor, and this tree keeps no node without KV, so SGLang's
        # walk down existing children (refilling such nodes) has nothing to walk.
        assert first not in anchor.children
        node = self._new_node(anchor, src, pages)
        node.host = True
        node.host_use = self.now
        anchor.children[first] = node
        self._update_sets(node)
        self._update_sets(anchor)

    def _write_storage(self) -> None:
        """The request's backups land in storage, in the order they were acknowledged, and
        their nodes' host locks go."""
        storage = self.storage
        if storage is None:
            return
        storage.now = self.now
        for src, pages in self.backed:
            for key in self.ids[src:src + pages].tolist():
                storage.use(key)
        for node in self.writing:
            node.host_lock -= 1
            self._update_sets(node)
        self.writing = []

    # ---- one request -------------------------------------------------------------------

    def request(self, start: int, full: int, cap: int, prompt_tokens: int
                ) -> tuple[int, int, int]:
        """Replay one admitted request: (GPU hit pages, host pages loaded back, of them
        pages fetched from storage for it)."""
        self.backed = []
        span_start = fetched = 0
        if self.storage is not None and cap:
            span_start, fetched = self._prefetch(start, cap)
        best_gpu, best, gpu_pages, _ = self._lookup(start, cap) if cap else (
            self.root, self.root, 0, 0)
        loaded = 0
        anchor = best_gpu
        if best is not best_gpu:
            loaded = self._load_back(best)
            if loaded:
                anchor = best
                self.loaded += loaded
        hit_pages = gpu_pages + loaded
        self._lock(anchor)
        extra = self.page if self.page > 1 else 0
        need_tokens = prompt_tokens - hit_pages * self.page + extra
        if need_tokens > self.gpu_free * self.page:
            self._make_room(need_tokens + self.page - 1)
        # What the allocator then takes (`alloc_extend`: the prompt's pages past the hit; one
        # token a page, `alloc`: its tokens): fewer free, and SGLang raises.
        needed_pages = -(-prompt_tokens // self.page) - hit_pages
        if self.gpu_free < needed_pages:
            raise PrefillOutOfMemory(self.now, needed_pages, self.gpu_free, self.policy)
        locked: list[_Node] = []
        self._insert(start, full, locked)
        self._unlock(anchor)
        for node in locked:
            self._unlock(node)
        self._write_storage()
        # `split_cached_prefix_by_tier`: the fetched span, as far as the hit covers it; the
        # host's own load-back is the rest.
        stored = max(0, min(hit_pages, span_start + fetched) - span_start)
        self.loaded -= stored
        return gpu_pages, loaded, stored


def replay_hicache_tree(chains: BlockChains, refused: np.ndarray, tiers: tuple[TierSpec, ...],
                        policy: TierPolicy, gpu_capacity_blocks: int, *, compiled: bool = True,
                        lacking: np.ndarray | None = None,
                        ) -> tuple[np.ndarray, tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                   tuple[TierEvictions, ...]]:
    """GPU hit tokens, hit tokens per tier (host, then storage), the tiers' counters and
    evictions of SGLang's HiCache with a GPU pool of `gpu_capacity_blocks` pages, the host tier
    `tiers[0]` (chunks of one page) and at most one storage tier below it (SGLang has one
    storage backend); see the module docstring. It runs compiled (`sglang_tree_kernel.py`)
    unless `compiled` is off. `lacking`, when given, is filled per request with the first page
    the GPU and host lacked at the lookup (−1: none; compiled only)."""
    page = int(chains.block_size_tokens)
    assert len(tiers) <= 2 and all(int(t.chunk_tokens) == page for t in tiers)
    if compiled:
        return _compiled(chains, refused, tiers, policy, gpu_capacity_blocks, lacking)
    storage = tiers[1] if len(tiers) > 1 else None
    tree = HiCacheTree(chains.ids, page, int(gpu_capacity_blocks), int(tiers[0].capacity_chunks),
                       policy, None if storage is None else int(storage.capacity_chunks))
    n = chains.num_requests
    offsets = chains.offsets
    ids = chains.ids
    gpu_hits = np.zeros(n, dtype=np.int64)
    host_hits = np.zeros(n, dtype=np.int64)
    storage_hits = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if refused[i]:
            continue
        tree.now = i
        start = int(offsets[i])
        full = int(offsets[i + 1]) - start
        g, h, s = tree.request(start, full, int(chains.max_hit_blocks[i]),
                               int(chains.prompt_tokens[i]))
        gpu_hits[i] = g * page
        host_hits[i] = (h - s) * page
        storage_hits[i] = s * page
    host_counters = TierCounters(stored_chunks=tree.stored, evicted_chunks=tree.evicted,
                                 failed_stores=tree.failed, loaded_chunks=tree.loaded,
                                 released_chunks=tree.released)
    host_evictions = TierEvictions.of_runs(ids, np.asarray(tree.records, dtype=np.int64))
    if tree.storage is None:
        return gpu_hits, (host_hits,), (host_counters,), (host_evictions,)
    return (gpu_hits, (host_hits, storage_hits), (host_counters, tree.storage.counters()),
            (host_evictions, TierEvictions.of(tree.storage.records)))


def _compiled(chains: BlockChains, refused: np.ndarray, tiers: tuple[TierSpec, ...],
              policy: TierPolicy, gpu_capacity_blocks: int, lacking: np.ndarray | None = None,
              ) -> tuple[np.ndarray, tuple[np.ndarray, ...], tuple[TierCounters, ...],
                         tuple[TierEvictions, ...]]:
    """The tree compiled: the host tier, and the storage below it when there is one."""
    from yaotu_trace.prefix import memory
    from yaotu_trace.prefix.tiers.lru_rows import outcome
    from yaotu_trace.prefix.tiers.sglang_tree_kernel import (
        DONE,
        OUT_OF_ROOM,
        counters_of,
        hicache_tree_pass,
        records_of,
        shortfall,
        storage_lru,
        tree_room,
    )

    n = chains.num_requests
    has_storage = len(tiers) > 1
    nodes = (5 if has_storage else 3) * n + 2  # a prefetch may split a node and add one
    store_keys = int(chains.num_distinct) if has_storage else 0
    need = nodes * (20 + 4 + 16 + 2 + 5 + 3) * 8 + chains.num_distinct * 4 + store_keys * 4 * 8
    with memory.reserved(need, f"SGLang's HiCache tree over {n:,} requests",
                         "use a larger --block-size (or fewer --jobs)"):
        page = int(chains.block_size_tokens)
        # A request writes each of its pages once at most: one eviction a page written.
        storage = (storage_lru(store_keys, int(tiers[1].capacity_chunks),
                               int(chains.offsets[-1])) if has_storage else None)
        room = tree_room(n, int(chains.num_distinct), has_storage,
                         policy is TierPolicy.SGLANG_WRITE_BACK)
        stopped = hicache_tree_pass(
            chains.offsets, chains.ids, chains.max_hit_blocks, chains.prompt_tokens,
            np.asarray(refused, dtype=np.bool_), np.int64(page),
            np.int64(gpu_capacity_blocks), np.int64(tiers[0].capacity_chunks),
            np.int64(2 if policy is TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE else 1),
            np.int64(SGLANG_LOAD_BACK_MIN_TOKENS), np.int64(SGLANG_PREFETCH_MIN_TOKENS),
            storage, *room)
        if stopped == OUT_OF_ROOM:
            raise RuntimeError("SGLang's storage tier evicted more pages than the trace wrote")
        if stopped != DONE:
            raise PrefillOutOfMemory(int(stopped), *shortfall(room.sc), policy)
        counters = counters_of(room.sc)
        records = records_of(room.sc, room.rec)
    gpu_hit_pages, host_hit_pages, storage_hit_pages = (room.gpu_hit, room.host_hit,
                                                         room.storage_hit)
    if lacking is not None:
        lacking[:] = room.lacking
    stored, evicted, loaded, failed, released = (int(c) for c in counters)
    host_counters = TierCounters(stored_chunks=stored, evicted_chunks=evicted,
                                 failed_stores=failed, loaded_chunks=loaded,
                                 released_chunks=released)
    host_evictions = TierEvictions.of_runs(chains.ids, records)
    if not has_storage:
        return (gpu_hit_pages * page, (host_hit_pages * page,), (host_counters,),
                (host_evictions,))
    assert storage is not None
    (store_counters,), (store_evictions,) = outcome(storage.counters, storage.evictions)
    return (gpu_hit_pages * page, (host_hit_pages * page, storage_hit_pages * page),
            (host_counters, store_counters), (host_evictions, store_evictions))
