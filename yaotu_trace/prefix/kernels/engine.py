"""The replay engine: per-request prefix hits of `BlockChains` under `ReplayRules` (spec §1–§4).

These paths give identical answers:

- Unlimited capacity, one global cache: one light pass (`_unlimited_hits`). Ids are numbered
  in first-appearance order, so a block hits iff its first occurrence is in an earlier request;
  chained ids are prefix-closed, so a request's hits are a leading run (the first miss still
  ends it). `first_occurrence_hits` is the same test vectorised (used by the ideal pass).
- One global LRU cache of finite capacity: `_lru_global`, the general loop's operations
  specialised (int32 links, list ends in locals), about 20× faster.
- Anything else (finite capacity, per-instance caches, routing): one sequential numba loop with
  O(1) work per block touch. LRU and FIFO keep one doubly linked list per cache over dense ids;
  LFU keeps one such list per (cache, frequency) with a minimum-frequency pointer, so the
  victim is the least recently used block of the least frequent ones. Frequencies count the
  requests that touched the block while cached (reset on eviction) and saturate at
  `MAX_LFU_COUNT`.

- Engine-exact accounting (`rules.accounting` vllm or sglang, a finite capacity): the
  engine's own pool model, `exact.py` (vLLM's block pool, SGLang's radix tree), per instance
  when the scope is instance; at unlimited capacity every accounting gives the paths above.

Routing, when `scope=instance` and the trace does not say where a request ran:

- `round-robin`: request i goes to instance i mod k; `random`: uniform, seeded by `rules.seed`.
- `least-loaded`: fewest outstanding prompt tokens. A request is outstanding on its instance
  from its arrival until its `finish_s` (when the trace has it); without finish times requests
  never finish, so the load is the total prompt tokens routed so far (a work-balancing router).
  Ties go to the lowest instance index.
- `prefix-affinity` (as sgl-router's cache-aware policy, with the exact caches as its tree):
  the instance holding the longest cached leading run of the request's blocks wins when that run
  covers more than `rules.affinity_threshold` of the prompt (ties: least loaded); otherwise the
  least-loaded instance. sgl-router's load-imbalance override is not modelled.

Compiled with numba (`cache=True`; set `NUMBA_CACHE_DIR` for read-only installs). Dtypes are
pinned at the boundary: int64 offsets and per-request arrays, int32 block ids and tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numba as nb
import numpy as np

from yaotu_trace._lists import append, heap_pop, heap_push, unlink
from yaotu_trace.errors import ConfigError, ResourceLimitError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.exact import replay_exact
from yaotu_trace.prefix.kernels.numpy_passes import small_unlimited
from yaotu_trace.prefix.kernels.optimal import optimal_replay
from yaotu_trace.prefix.kernels.result import ReplayResult, hits_result
from yaotu_trace.prefix.rules import Accounting, Eviction, ReplayRules, Route, Scope, TouchOrder

_POLICY = {Eviction.LRU: 0, Eviction.FIFO: 1, Eviction.LFU: 2}
_STATIC, _LEAST_LOADED, _AFFINITY = 0, 1, 2
_MAX_NODES = 1 << 31  # per-instance node arrays: instances × distinct blocks
# LFU counts saturate here (one list per count and cache); exact below it, i.e. for any block
# touched by fewer requests. Beyond it, saturated blocks are ordered by recency among themselves.
MAX_LFU_COUNT = 1 << 16


# Ids per slice of `first_occurrence_flags`: its running maximum over a whole trace's ids was
# 2.5 GB at 1e10 tokens, held while the ideal pass planned.
FLAG_SLICE = 1 << 22


def first_occurrence_flags(chains: BlockChains) -> np.ndarray:
    """Whether each entry of `chains.ids` is the first occurrence of its id (no loop)."""
    new = np.empty(chains.ids.size, dtype=bool)
    for lo, _, flags in first_occurrence_slices(chains.id_slices(FLAG_SLICE)):
        new[lo:lo + flags.size] = flags
    return new


def first_occurrence_slices(slices: Iterable[tuple[int, np.ndarray]]
                            ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(start, ids, flags) of each slice of ids in turn (`BlockChains.id_slices`): whether each
    id of the slice is the first occurrence of its id. Ids are numbered in first-appearance
    order, so a first occurrence is an id larger than every id before it: a running maximum,
    slice by slice."""
    top = -1  # the largest id of the slices before
    for lo, part in slices:
        if part.size == 0:
            continue
        running = np.maximum(np.maximum.accumulate(part), top)
        flags = np.empty(part.size, dtype=bool)
        flags[0] = part[0] > top
        np.greater(part[1:], running[:-1], out=flags[1:])
        top = int(running[-1])
        yield lo, part, flags


def first_occurrence_hits(chains: BlockChains) -> np.ndarray:
    """Unlimited global cache: per-block hit flags from first occurrences (no loop)."""
    ids = chains.ids
    if ids.size == 0:
        return np.zeros(0, dtype=bool)
    req = chains.request_of_block()
    first_req = req[first_occurrence_flags(chains)]  # by dense id: new ids appear as 0, 1, ...
    return first_req[ids] < req


# ---------------------------------------------------------------- compiled core


@nb.njit(cache=True)
def _replay_loop(
    offsets, ids, block, last_tokens, max_hit, prompt_tokens, out_offsets, out_ids,
    num_distinct, capacity, policy, head_first, num_instances, route_mode, static_codes,
    arrival_s, finish_s, affinity_threshold, max_lfu_count,
):
    """Sequential replay; returns (hit_blocks, instance, evicted, inserted).

    Per request: choose its cache (`_choose_cache`), count the leading run of cached blocks
    (capped), then touch every block (`_touch`), last block first unless head-first.
    """
    n = len(offsets) - 1
    k = num_instances
    d = num_distinct
    nodes = k * d
    unlimited = capacity < 0
    in_cache = np.zeros(nodes, dtype=np.uint8)
    lists_per_cache = 1
    if policy == 2:
        lists_per_cache = min(n + 2, max_lfu_count + 1)
    lists = 1 if unlimited else nodes
    prev = np.empty(lists, dtype=np.int64)
    nxt = np.empty(lists, dtype=np.int64)
    head = np.full(1 if unlimited else k * lists_per_cache, -1, dtype=np.int64)
    tail = np.full(1 if unlimited else k * lists_per_cache, -1, dtype=np.int64)
    freq = np.zeros(nodes if policy == 2 else 1, dtype=np.int64)
    min_freq = np.zeros(k, dtype=np.int64)
    size = np.zeros(k, dtype=np.int64)
    load = np.zeros(k, dtype=np.int64)
    heap_t = np.empty(n if route_mode != _STATIC else 1, dtype=np.float64)
    heap_i = np.empty(n if route_mode != _STATIC else 1, dtype=np.int64)
    heap_n = 0
    hit_blocks = np.zeros(n, dtype=np.int64)
    instance = np.zeros(n, dtype=np.int64)
    evicted = 0
    inserted = 0
    for i in range(n):
        start = offsets[i]
        length = offsets[i + 1] - start
        c = 0
        if route_mode == _STATIC:
            c = static_codes[i]
        else:
            c, heap_n = _choose_cache(i, start, length, ids, block, last_tokens, prompt_tokens,
                                      d, k, in_cache, load, instance, heap_t, heap_i, heap_n,
                                      route_mode, arrival_s, finish_s, affinity_threshold)
        instance[i] = c
        base = c * d
        h = 0
        cap = max_hit[i]
        while h < cap and in_cache[base + ids[start + h]] != 0:
            h += 1
        hit_blocks[i] = h
        o_start = out_offsets[i]
        o_len = out_offsets[i + 1] - o_start
        total = length + o_len
        for step in range(total):
            pos = step if head_first else total - 1 - step
            x = base + (ids[start + pos] if pos < length else out_ids[o_start + pos - length])
            if unlimited:
                if in_cache[x] == 0:
                    in_cache[x] = 1
                    inserted += 1
                continue
            new, gone = _touch(x, c, capacity, policy, lists_per_cache, in_cache, prev, nxt,
                               head, tail, freq, min_freq, size)
            inserted += new
            evicted += gone
    return hit_blocks, instance, evicted, inserted


@nb.njit(cache=True)
def _choose_cache(i, start, length, ids, block, last_tokens, prompt_tokens, d, k, in_cache,
                  load, instance, heap_t, heap_i, heap_n, route_mode, arrival_s, finish_s,
                  affinity_threshold):
    """The instance of request `i`: the least loaded (prompt tokens in flight), or under
    prefix affinity the one holding the longest cached run when it covers enough of the
    prompt. Returns (instance, heap size) after retiring finished requests' load."""
    while heap_n > 0 and heap_t[0] <= arrival_s[i]:
        j = heap_i[0]
        load[instance[j]] -= prompt_tokens[j]
        heap_n = heap_pop(heap_t, heap_i, heap_n)
    least = 0
    for x in range(1, k):
        if load[x] < load[least]:
            least = x
    c = least
    if route_mode == _AFFINITY and prompt_tokens[i] > 0:
        best = -1
        best_run = 0
        best_tokens = 0
        for x in range(k):
            base = x * d
            run = 0
            while run < length and in_cache[base + ids[start + run]] != 0:
                run += 1
            run_tokens = run * block
            if run == length and run > 0:
                run_tokens += last_tokens[i] - block
            if run > best_run or (run == best_run and best >= 0 and run > 0
                                  and load[x] < load[best]):
                best = x
                best_run = run
                best_tokens = run_tokens
        if best >= 0 and best_tokens > affinity_threshold * prompt_tokens[i]:
            c = best
    load[c] += prompt_tokens[i]
    if finish_s[i] < np.inf:
        heap_n = heap_push(heap_t, heap_i, heap_n, max(finish_s[i], arrival_s[i]), i)
    return c, heap_n


@nb.njit(cache=True)
def _touch(x, c, capacity, policy, lists_per_cache, in_cache, prev, nxt, head, tail, freq,
           min_freq, size):
    """One block touched in cache `c` of a finite capacity: a hit refreshes it (LRU: to the
    tail; LFU: one frequency list up; FIFO: stays), a miss inserts it after evicting the head
    of the victim list when full. Returns (inserted, evicted), each 0 or 1."""
    if in_cache[x] != 0:
        if policy == 0:
            unlink(x, c, prev, nxt, head, tail)
            append(x, c, prev, nxt, head, tail)
        elif policy == 2:
            f = freq[x]
            lst = c * lists_per_cache + f
            unlink(x, lst, prev, nxt, head, tail)
            if f + 1 < lists_per_cache:
                if head[lst] < 0 and min_freq[c] == f:
                    min_freq[c] = f + 1
                freq[x] = f + 1
                lst += 1
            append(x, lst, prev, nxt, head, tail)
        return 0, 0
    evicted = 0
    if size[c] >= capacity:
        lst = c * lists_per_cache + min_freq[c] if policy == 2 else c
        victim = head[lst]
        unlink(victim, lst, prev, nxt, head, tail)
        in_cache[victim] = 0
        size[c] -= 1
        evicted = 1
    in_cache[x] = 1
    size[c] += 1
    if policy == 2:
        freq[x] = 1
        min_freq[c] = 1
        append(x, c * lists_per_cache + 1, prev, nxt, head, tail)
    else:
        append(x, c, prev, nxt, head, tail)
    return 1, evicted


@nb.njit(cache=True, nogil=True)
def _unlimited_hits(offsets, ids, max_hit, num_distinct):
    """Unlimited global cache in one pass: `first_occurrence_hits` and the leading run, fused.

    A block hits iff its id first appeared in an earlier request; ids are numbered in
    first-appearance order, so an id above the running maximum is new. One int32 per distinct
    id instead of several int64 arrays per block.
    """
    n = len(offsets) - 1
    first_req = np.empty(max(num_distinct, 1), dtype=np.int32)
    hit_blocks = np.zeros(n, dtype=np.int64)
    running = -1
    for i in range(n):
        start = offsets[i]
        end = offsets[i + 1]
        h = 0
        cap = max_hit[i]
        while h < cap and ids[start + h] <= running and first_req[ids[start + h]] < i:
            h += 1
        hit_blocks[i] = h
        for j in range(start, end):
            x = ids[j]
            if x > running:
                first_req[x] = i
                running = x
    return hit_blocks


@nb.njit(cache=True, nogil=True)
def _lru_global(offsets, ids, max_hit, out_offsets, out_ids, capacity, head_first, links,
                in_cache, hit_blocks):
    """`_replay_loop` for its most common case: one LRU cache of finite capacity.

    The same list operations on int32 links with the list ends in locals, and a touch of the
    most recent block skipped (it stays where it is). About 20× faster than the general loop,
    whose per-cache arrays and policy branches keep the compiler from simplifying it.
    Fills `hit_blocks`; returns (evicted, inserted). Its arrays (per chain id the list links
    and whether it is cached, zeros) come from the caller: one allocated in compiled code
    compiles numba's `np.zeros` with it on a first run.
    """
    n = len(offsets) - 1
    prev = links[0]
    nxt = links[1]
    head = np.int32(-1)
    tail = np.int32(-1)
    size = 0
    evicted = 0
    inserted = 0
    for i in range(n):
        start = offsets[i]
        length = offsets[i + 1] - start
        h = 0
        cap = max_hit[i]
        while h < cap and in_cache[ids[start + h]] != 0:
            h += 1
        hit_blocks[i] = h
        o_start = out_offsets[i]
        total = length + out_offsets[i + 1] - o_start
        for step in range(total):
            pos = step if head_first else total - 1 - step
            x = ids[start + pos] if pos < length else out_ids[o_start + pos - length]
            if in_cache[x] != 0:
                if x == tail:
                    continue
                p = prev[x]
                q = nxt[x]
                if p >= 0:
                    nxt[p] = q
                else:
                    head = q
                prev[q] = p  # x is not the tail, so q exists
            else:
                if size >= capacity:
                    victim = head
                    head = nxt[victim]
                    if head >= 0:
                        prev[head] = -1
                    else:
                        tail = -1
                    in_cache[victim] = 0
                    size -= 1
                    evicted += 1
                in_cache[x] = 1
                size += 1
                inserted += 1
            prev[x] = tail
            nxt[x] = -1
            if tail >= 0:
                nxt[tail] = x
            else:
                head = x
            tail = x
    return evicted, inserted


# ---------------------------------------------------------------- public entry point


def route_codes(rules: ReplayRules, num_requests: int) -> np.ndarray:
    """Static assignments of the round-robin and random routes (int64)."""
    k = rules.instances
    if rules.route is Route.RANDOM:
        return np.random.default_rng(rules.seed).integers(0, k, size=num_requests, dtype=np.int64)
    return np.arange(num_requests, dtype=np.int64) % k


def replay(
    chains: BlockChains,
    rules: ReplayRules,
    instance_codes: np.ndarray | None = None,
    *,
    arrival_s: np.ndarray | None = None,
    finish_s: np.ndarray | None = None,
    max_lfu_count: int = MAX_LFU_COUNT,
) -> ReplayResult:
    """Replay `chains` in order under `rules` and return per-request hits (spec §1–§4).

    `instance_codes` (int, 0..k-1 per request) is the trace's own instance column; it is used
    when `scope=instance` and no route is given. `arrival_s`/`finish_s` drive the
    least-loaded and prefix-affinity routes (see the module docstring).
    """
    n = chains.num_requests
    outputs = chains.output_offsets is not None and chains.output_ids is not None
    per_instance = rules.scope is Scope.INSTANCE
    small = small_unlimited(chains, rules)  # no kernel to compile or load
    if small is not None:
        return small
    if not per_instance and rules.unlimited and not outputs:
        hit = _unlimited_hits(chains.offsets, chains.ids, chains.max_hit_blocks,
                              np.int64(chains.num_distinct))
        inserted = chains.num_distinct
        return _result(chains, hit, None, 1, 0, inserted)

    route_mode, codes, k = _routes(rules, n, instance_codes if per_instance else None)
    if rules.accounting is not Accounting.CLEAN and rules.capacity_blocks is not None:
        if route_mode == _LEAST_LOADED:
            # Least-loaded looks at outstanding prompt tokens, never at the cache: its routes
            # at unlimited capacity are its routes in the engine's pools.
            routed = replay(chains, rules.with_(capacity_blocks=None), None,
                            arrival_s=arrival_s, finish_s=finish_s)
            assert routed.instance is not None
            codes = routed.instance
        return replay_exact(chains, rules, codes if per_instance else None, k)
    _require_cache_entries(chains, rules, k, per_instance or outputs)
    capacity = -1 if rules.capacity_blocks is None else int(rules.capacity_blocks)
    if rules.eviction is Eviction.OPTIMAL:  # offline: every cache's requests known up front
        if route_mode == _LEAST_LOADED:  # its routes never look at the cache (partition.py)
            routes = replay(chains, rules.with_(eviction=Eviction.LRU, capacity_blocks=None),
                            arrival_s=arrival_s, finish_s=finish_s).instance
            codes = codes if routes is None else routes
        hit, evicted, inserted = optimal_replay(chains, codes, k, capacity,
                                                rules.touch_order is TouchOrder.HEAD_FIRST)
        return _result(chains, hit, codes if per_instance else None, k, evicted, inserted)
    out_offsets = (chains.output_offsets if outputs else np.zeros(n + 1, dtype=np.int64))
    out_ids = chains.output_ids if outputs else np.zeros(0, dtype=np.int32)
    if not per_instance and rules.eviction is Eviction.LRU and capacity >= 1:
        keys = max(chains.num_distinct, 1)
        hit = np.zeros(n, dtype=np.int64)
        evicted, inserted = _lru_global(
            chains.offsets, chains.ids, chains.max_hit_blocks, out_offsets, out_ids,
            np.int64(capacity), rules.touch_order is TouchOrder.HEAD_FIRST,
            np.empty((2, keys), dtype=np.int32), np.zeros(keys, dtype=np.uint8), hit,
        )
        return _result(chains, hit, None, 1, int(evicted), int(inserted))
    arr, fin = _arrival_finish(n, arrival_s, finish_s)
    hit, instance, evicted, inserted = _replay_loop(
        chains.offsets, chains.ids, np.int64(chains.block_size_tokens),
        np.asarray(chains.last_block_tokens, dtype=np.int32), chains.max_hit_blocks,
        chains.prompt_tokens, out_offsets, out_ids, np.int64(chains.num_distinct),
        np.int64(capacity), np.int64(_POLICY[rules.eviction]),
        rules.touch_order is TouchOrder.HEAD_FIRST, np.int64(k), np.int64(route_mode),
        codes, arr, fin, float(rules.affinity_threshold), np.int64(max_lfu_count),
    )
    return _result(chains, hit, instance if per_instance else None, k, int(evicted),
                   int(inserted))


def _routes(rules: ReplayRules, n: int,
            instance_codes: np.ndarray | None) -> tuple[int, np.ndarray, int]:
    """(route mode, static cache per request, number of caches) before the replay.

    `instance_codes` is the trace's column under scope instance (None otherwise); without a
    route it decides. Least-loaded and prefix-affinity leave the codes at 0: the loop routes.
    """
    codes = np.zeros(n, dtype=np.int64)
    if rules.scope is not Scope.INSTANCE:
        return _STATIC, codes, 1
    if rules.route is None and instance_codes is not None:
        codes = np.array(instance_codes, dtype=np.int64)  # a writable copy: one signature
        if codes.size and codes.min() < 0:
            raise ConfigError("instance codes must be >= 0")
        return _STATIC, codes, int(codes.max()) + 1 if codes.size else 1
    if rules.route in (None, Route.ROUND_ROBIN, Route.RANDOM):
        return _STATIC, route_codes(rules, n), rules.instances
    if rules.route is Route.LEAST_LOADED:
        return _LEAST_LOADED, codes, rules.instances
    return _AFFINITY, codes, rules.instances


def _require_cache_entries(chains: BlockChains, rules: ReplayRules, k: int,
                           per_block_arrays: bool) -> None:
    """Refuse a replay whose per-cache node arrays (k caches × distinct blocks) exceed the
    int32-indexed limit or the memory at hand (checked only when the loop allocates them)."""
    if k * max(chains.num_distinct, 1) >= _MAX_NODES:
        raise ResourceLimitError(
            f"{k} instances × {chains.num_distinct} distinct blocks is too many cache entries "
            "for one replay; use fewer instances or a larger --block-size"
        )
    if rules.capacity_blocks is not None or per_block_arrays:
        nodes = k * max(chains.num_distinct, 1)
        per_node = 1 + (16 if rules.capacity_blocks is not None else 0) + (
            8 if rules.eviction is Eviction.LFU else 0)
        memory.require(nodes * per_node, f"a replay over {k} cache(s) of "
                       f"{chains.num_distinct:,} distinct blocks",
                       "use fewer instances or a larger --block-size")


def _arrival_finish(n: int, arrival_s: np.ndarray | None,
                    finish_s: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The loop's float64 arrival and finish times: arrivals 0 and finishes never (inf) when
    not given, a NaN finish read as never."""
    arr = (np.zeros(n, dtype=np.float64) if arrival_s is None
           else np.array(arrival_s, dtype=np.float64))
    fin = np.full(n, np.inf, dtype=np.float64)
    if finish_s is not None:
        fin = np.array(finish_s, dtype=np.float64)
        fin[np.isnan(fin)] = np.inf
    return arr, fin


def _result(chains: BlockChains, hit: np.ndarray, instance: np.ndarray | None, k: int,
            evicted: int, inserted: int) -> ReplayResult:
    return hits_result(chains, hit, evicted_blocks=evicted, inserted_blocks=inserted,
                       instance=instance, num_instances=k)
