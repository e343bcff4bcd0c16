"""vLLM 0.33's native CPU offload, request by request: `OffloadingConnector` with the
`CPUOffloadingManager` (lru, `store_threshold` 0, `offload_prompt_only`).

The rules (kv-tiers.md, "vLLM 0.33.0 native offload, rule by rule"; the paths are of the 0.33.0
wheel: OS = `distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`, CM =
`v1/kv_offload/cpu/manager.py`, LRU = `v1/kv_offload/cpu/policies/lru.py`):

- A chunk is K = T/B GPU blocks; its key is the chain id of its last block, its position the
  token at its end (OS `update_offload_keys`). Only full chunks have keys.
- Lookup starts at chunk g//T of the block-aligned GPU hit g and counts consecutive resident
  keys; E = T·(start + run) − g tokens are loaded, none when E < T (OS
  `_lookup_complete_chunks`). A full hit loads every token (vLLM recomputes the last one and
  counts all as external).
- Loaded blocks re-enter the GPU prefix cache exactly as computed ones would, so the GPU pool
  evolves as in the GPU-only replay: its hits come from `exact_vllm` (or the clean model) and
  this pass only adds the CPU tier.
- Stores happen in the prefill step: every full chunk from the store index (0, or the end of
  the load) is offered; resident keys are not rewritten; an offer that needs more room than
  the evictable chunks outside it give fails whole and is offered again when the request's
  finish reaches the connector, one step later (CM `prepare_store`).
- LRU ranks (LRU): a request gets rank R on its first access; access and insert raise a key to
  (R, −position) (so a request's tail goes before its head); at finish every key the request
  saw gets (++counter, 0) from tail to head. The finish is seen in the step that schedules the
  next request: after its lookup, load and (without a load) store, before the store of a
  request that loaded (which runs a step later).
- Transfers complete in the step they were issued: loaded chunks are pinned (not evictable)
  during their step, stored chunks are not evictable until the step ends.

Checked per request against vLLM's own scheduler and connector in
`tests/prefix/test_tiers_vllm_golden.py` (fixtures: `benchmarks/engines/golden_tiers_vllm.py`).
Tiers below the CPU (`TieringOffloadingSpec`, disk and remote; T = `v1/kv_offload/tiering/`):
every chunk the CPU tier stores is written to each of them (T `manager.py::complete_store`); a
CPU miss asks them in order, a step late (T `async_lookup.py`), and a chunk one holds is
promoted into the CPU alone, evicting as a store does, the lookup deferred a step until
nothing is pending (`_lookup_pass`); no lookup happens when less than a chunk could load. vLLM's
tiers never evict; a bounded one here is an LRU store. Checked against vLLM with its fs tier
in the same test (fixtures `*_fs.json`).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions
from yaotu_trace.prefix.tiers.spec import MAX_TRACKED_OFFERS, TierSpec
from yaotu_trace.prefix.tiers.stops import EngineStops, who


@dataclass
class _Request:
    """A request's state in the connector: its rank, the keys it saw, a failed offer."""

    keys: list[int]
    positions: list[int]
    index: int = -1  # its row in the trace
    rank: int = 0  # 0: not yet ranked
    seen: dict[int, int] = field(default_factory=dict)  # key -> position, in first-seen order
    next_stored: int = 0
    failed: bool = False
    # What the manager keeps of the request for ARC (`_RequestCacheAccess`): keys it inserted,
    # ready keys it reused (loaded, or offered while resident), keys whose store miss ARC saw.
    inserted: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    store_misses: set[int] = field(default_factory=set)


class _OfferCounts:
    """`store_threshold` ≥ 2 (CM `_record_accesses`): how many times each key was offered,
    in an LRU of at most `MAX_TRACKED_OFFERS` keys (the oldest out, never one of the offer
    being counted); a key is admitted from its `threshold`-th offer on."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.counts: OrderedDict[int, int] = OrderedDict()

    def offer(self, keys: list[int]) -> None:
        counts = self.counts
        seen = 0
        for key in keys:
            if key in counts:
                counts.move_to_end(key)
                counts[key] += 1
                seen += 1
        unprotected = len(counts) - seen
        for key in keys:
            if key in counts:
                continue
            if len(counts) >= MAX_TRACKED_OFFERS:
                if unprotected == 0:
                    continue
                counts.popitem(last=False)
                unprotected -= 1
            counts[key] = 1

    def admits(self, key: int) -> bool:
        return self.counts.get(key, 0) >= self.threshold


def _offer_counts(store_threshold: int) -> _OfferCounts | None:
    return _OfferCounts(store_threshold) if store_threshold >= 2 else None


def _offered(tier: _CpuTier | _ArcCpuTier, req: _Request, keys: list[int]) -> list[int]:
    """What `prepare_store` does first under either policy: the offer is counted (a store
    threshold), the request becomes its keys' last use; the keys the tier lacks and admits."""
    tier.now = req.index
    for key in keys:
        tier.last_use[key] = req.index
    if tier.offers is not None:
        tier.offers.offer(keys)
    return [k for k in keys if not tier.holds(k)
            and (tier.offers is None or tier.offers.admits(k))]


class _CpuTier:
    """`CPUOffloadingManager` with the LRU policy, for keys that are chain ids."""

    def holds(self, key: int) -> bool:
        """Whether the tier holds `key` (ready or being stored)."""
        return key in self.rank

    def __init__(self, capacity: int, store_threshold: int = 0) -> None:
        self.capacity = capacity
        self.offers = _offer_counts(store_threshold)
        self.rank: dict[int, tuple[int, int]] = {}  # resident key -> LRU rank
        self.heap: list[tuple[tuple[int, int], int]] = []
        self.counter = 0
        self.pinned: set[int] = set()  # loads of the current step
        self.pending: set[int] = set()  # stores of the current step, not yet ready
        self.stored = self.evicted = self.failed = self.loaded = 0
        self.cascade: list[_SecondaryTier] = []  # tiers every stored chunk is written to
        self.now = -1  # the request being replayed
        self.last_use: dict[int, int] = {}
        self.records: list[tuple[int, int, int]] = []  # (key, evicting request, last use)

    def _request_rank(self, req: _Request) -> int:
        if req.rank == 0:
            self.counter += 1
            req.rank = self.counter
        return req.rank

    def _evictable(self, key: int) -> bool:
        return key not in self.pinned and key not in self.pending

    def _raise(self, key: int, rank: tuple[int, int]) -> None:
        self.rank[key] = rank
        if self._evictable(key):
            heapq.heappush(self.heap, (rank, key))

    def access(self, req: _Request, keys: list[int], positions: list[int]) -> None:
        """`_record_request_cache_access`: keys new to the request raise their rank."""
        for key in keys:
            self.last_use[key] = req.index
        new = [(k, p) for k, p in zip(keys, positions, strict=True) if k not in req.seen]
        if not new:
            return
        rank = self._request_rank(req)
        for key, position in new:
            req.seen[key] = position
            current = self.rank.get(key)
            if current is not None and current < (rank, -position):
                self._raise(key, (rank, -position))

    def load(self, req: _Request, keys: list[int], positions: list[int]) -> None:
        """`prepare_load`: pin, then record the access."""
        self.pinned.update(keys)
        self.access(req, keys, positions)
        self.loaded += len(keys)

    def store(self, req: _Request, keys: list[int], positions: list[int],
              cascade: bool = True) -> bool:
        """`prepare_store`: False when the offer fails whole. A promotion from a tier below
        (`cascade` False) is not written back down."""
        admitted = set(_offered(self, req, keys))
        to_store = [i for i, k in enumerate(keys) if k in admitted]
        recorded = [i for i, k in enumerate(keys)
                    if k in admitted or (k in self.rank and k not in self.pending)]
        self.access(req, [keys[i] for i in recorded], [positions[i] for i in recorded])
        if not to_store:
            return True
        needed = len(to_store) - (self.capacity - len(self.rank))
        if needed > 0 and not self._evict(needed, set(keys)):
            self.failed += 1
            return False
        rank = self._request_rank(req)
        for i in to_store:
            self.rank[keys[i]] = (rank, -positions[i])
            self.pending.add(keys[i])
        self.stored += len(to_store)
        for tier in self.cascade if cascade else ():
            for i in to_store:
                tier.put(keys[i], req.index)
        return True

    def _evict(self, needed: int, protected: set[int]) -> bool:
        """The `needed` least recent evictable keys outside `protected`, or none at all."""
        chosen: list[tuple[tuple[int, int], int]] = []
        chosen_keys: set[int] = set()
        deferred: list[tuple[tuple[int, int], int]] = []
        heap = self.heap
        while heap and len(chosen) < needed:
            entry = heapq.heappop(heap)
            rank, key = entry
            if self.rank.get(key) != rank or not self._evictable(key):
                continue  # stale: re-ranked, evicted, or pushed again when it frees up
            if key in protected:
                deferred.append(entry)
                continue
            if key in chosen_keys:
                continue
            chosen.append(entry)
            chosen_keys.add(key)
        if len(chosen) < needed:
            for entry in chosen + deferred:
                heapq.heappush(heap, entry)
            return False
        for entry in deferred:
            heapq.heappush(heap, entry)
        for _, key in chosen:
            del self.rank[key]
            self.records.append((key, self.now, self.last_use.get(key, -1)))
        self.evicted += len(chosen)
        if len(heap) > 4 * max(64, len(self.rank)):
            self._compact()
        return True

    def _compact(self) -> None:
        self.heap = [(r, k) for k, r in self.rank.items() if self._evictable(k)]
        heapq.heapify(self.heap)

    def finish(self, req: _Request) -> None:
        """`on_request_finished`: the request's keys, tail to head, become most recent."""
        for key in sorted(req.seen, key=req.seen.__getitem__, reverse=True):
            if key in self.rank:
                self.counter += 1
                self._raise(key, (self.counter, 0))

    def end_step(self) -> None:
        """The worker finished every transfer: loads unpin, stores become ready."""
        freed = self.pinned | self.pending
        self.pinned = set()
        self.pending = set()
        for key in freed:
            rank = self.rank.get(key)
            if rank is not None:
                heapq.heappush(self.heap, (rank, key))

    def counters(self) -> TierCounters:
        """The tier's totals."""
        return TierCounters(stored_chunks=self.stored, evicted_chunks=self.evicted,
                            failed_stores=self.failed, loaded_chunks=self.loaded)


class _ArcCpuTier:
    """`CPUOffloadingManager` with the arc policy (ARC = `v1/kv_offload/cpu/policies/arc.py`),
    for keys that are chain ids: the same offers, loads and step ends as `_CpuTier`.

    - T1 holds keys used once, T2 keys reused; B1 and B2 the keys evicted from each (ghosts,
      at most the capacity each, oldest out). `target` is ARC's adaptive size of T1.
    - An offer's keys that the tier lacks are store misses; each one a request has not missed
      before moves `target` when a ghost list holds it (B1: up by max(1, |B2|/|B1|) to the
      capacity; B2: down by max(1, |B1|/|B2|) to 0; the ghost made its list's most recent),
      tail to head, before the insert drops it from the ghosts (CM `prepare_store`,
      ARC `on_store_miss`). Inserts go to T1's most recent end.
    - An eviction takes n keys at once, none of the offer's nor held by a transfer of this step:
      from T1's least recent while T1 (less what it already gave) is at least `int(target)`,
      else from T2's, else from T1's; it fails whole when there are not n (ARC `evict`).
    - At the request's finish, tail to head: a key it only inserted is made most recent where
      it is; one it reused (a ready key it loaded or offered) goes from T1 to T2's most recent
      end, or to T2's most recent end (ARC `on_request_finished`).
    """

    def __init__(self, capacity: int, store_threshold: int = 0) -> None:
        self.capacity = capacity
        self.offers = _offer_counts(store_threshold)
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.target = 0.0
        self.pinned: set[int] = set()  # loads of the current step
        self.pending: set[int] = set()  # stores of the current step, not yet ready
        self.stored = self.evicted = self.failed = self.loaded = 0
        self.cascade: list[_SecondaryTier] = []
        self.now = -1
        self.last_use: dict[int, int] = {}
        self.records: list[tuple[int, int, int]] = []

    def holds(self, key: int) -> bool:
        """Whether the tier holds `key` (ready or being stored)."""
        return key in self.t1 or key in self.t2

    def _record(self, req: _Request, keys: list[int], positions: list[int],
                reused: list[int]) -> None:
        """`_record_request_cache_access`: the keys the request saw, and those it reused."""
        for key, position in zip(keys, positions, strict=True):
            req.seen.setdefault(key, position)
        req.reused.update(k for k in reused if k not in req.inserted)

    def load(self, req: _Request, keys: list[int], positions: list[int]) -> None:
        """`prepare_load`: pin, then record the access as a reuse."""
        for key in keys:
            self.last_use[key] = req.index
        self.pinned.update(keys)
        self._record(req, keys, positions, keys)
        self.loaded += len(keys)

    def store(self, req: _Request, keys: list[int], positions: list[int],
              cascade: bool = True) -> bool:
        """`prepare_store`: False when the offer fails whole (`cascade` as `_CpuTier`'s)."""
        to_store = _offered(self, req, keys)
        ready = [k for k in keys if self.holds(k) and k not in self.pending]
        misses = [k for k in to_store if k not in req.store_misses]
        for key in reversed(misses):
            self._ghost_hit(key)
        req.store_misses.update(misses)
        recorded = set(to_store) | set(ready)
        self._record(req, [k for k in keys if k in recorded],
                     [p for k, p in zip(keys, positions, strict=True) if k in recorded], ready)
        if not to_store:
            return True
        resident = len(self.t1) + len(self.t2)
        needed = len(to_store) - (self.capacity - resident)
        if needed > 0:
            busy = sum(1 for k in self.pinned | self.pending if self.holds(k))
            if needed > resident - busy or not self._evict(needed, set(keys)):
                self.failed += 1
                return False
        for key in to_store:
            self.t1[key] = None
            self.b1.pop(key, None)
            self.b2.pop(key, None)
            self.pending.add(key)
        req.inserted.update(to_store)
        self.stored += len(to_store)
        for tier in self.cascade if cascade else ():
            for key in to_store:
                tier.put(key, req.index)
        return True

    def _ghost_hit(self, key: int) -> None:
        if key in self.b1:
            self.target = min(self.target + max(1, len(self.b2) / len(self.b1)),
                              self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:
            self.target = max(self.target - max(1, len(self.b1) / len(self.b2)), 0)
            self.b2.move_to_end(key)

    def _evict(self, needed: int, protected: set[int]) -> bool:
        """ARC's choice of `needed` keys, made whole or not at all."""
        def free(keys: Iterator[int]) -> int | None:
            for key in keys:
                if key not in protected and key not in self.pinned and key not in self.pending:
                    return key
            return None

        chosen: list[tuple[int, bool]] = []  # (key, from T1)
        t1_size = len(self.t1)
        t1, t2 = iter(self.t1), iter(self.t2)
        for _ in range(needed):
            key = free(t1) if t1_size >= int(self.target) else None
            from_t1 = key is not None
            if key is None:
                key = free(t2)
            if key is None:
                key = free(t1)
                from_t1 = True
                if key is None:
                    return False
            if from_t1:
                t1_size -= 1
            chosen.append((key, from_t1))
        for key, from_t1 in chosen:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            self.records.append((key, self.now, self.last_use.get(key, -1)))
        for ghosts in (self.b1, self.b2):
            for _ in range(len(ghosts) - self.capacity):
                ghosts.popitem(last=False)
        self.evicted += len(chosen)
        return True

    def finish(self, req: _Request) -> None:
        """`on_request_finished`: tail to head, inserted keys refreshed where they are, reused
        ones promoted to (or refreshed in) T2."""
        only_inserted = req.inserted - req.reused
        for key in sorted(req.seen, key=req.seen.__getitem__, reverse=True):
            if key in only_inserted:
                if key in self.t1:
                    self.t1.move_to_end(key)
                elif key in self.t2:
                    self.t2.move_to_end(key)
            elif key in req.reused and key in self.t1:
                del self.t1[key]
                self.t2[key] = None
            elif key in req.reused and key in self.t2:
                self.t2.move_to_end(key)

    def end_step(self) -> None:
        """The worker finished every transfer: loads unpin, stores become ready."""
        self.pinned = set()
        self.pending = set()

    def counters(self) -> TierCounters:
        """The tier's totals."""
        return TierCounters(stored_chunks=self.stored, evicted_chunks=self.evicted,
                            failed_stores=self.failed, loaded_chunks=self.loaded)


def replay_vllm_offload(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                        tier: TierSpec, secondary: tuple[TierSpec, ...] = (), *,
                        arc: bool = False, lacking: np.ndarray | None = None
                        ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                   tuple[TierEvictions, ...]]:
    """Hit tokens per tier (vLLM's `external_kv_transfer`, split by where the chunk was)
    behind a GPU pool whose per-request hits are `gpu_hit_blocks`; `refused` requests never
    reach the connector. `tier` is the CPU tier, `secondary` the tiers written from it; `arc`
    evicts the CPU tier by ARC (`eviction_policy: arc`) rather than LRU. `lacking`, when
    given, is filled per request with the first chunk no tier held at the lookup (−1: none)."""
    block = int(chains.block_size_tokens)
    chunk = int(tier.chunk_tokens)
    per_chunk = chunk // block
    offsets = chains.offsets
    ids = chains.ids
    n = chains.num_requests
    hits = [np.zeros(n, dtype=np.int64) for _ in range(1 + len(secondary))]
    cpu: _CpuTier | _ArcCpuTier = (_ArcCpuTier if arc else _CpuTier)(
        int(tier.capacity_chunks), int(tier.store_threshold))
    lower = [_SecondaryTier(int(t.capacity_chunks)) for t in secondary]
    cpu.cascade = lower
    verdicts = [_Verdicts() for _ in lower]
    previous: _Request | None = None
    for i in range(n):
        if refused[i]:
            continue
        start = int(offsets[i])
        full = int(offsets[i + 1]) - start
        chunks = full // per_chunk
        keys = ids[start + per_chunk - 1: start + chunks * per_chunk: per_chunk].tolist()
        positions = list(range(chunk, (chunks + 1) * chunk, chunk))
        req = _Request(keys=keys, positions=positions, index=i)
        g = int(gpu_hit_blocks[i]) * block
        first = g // chunk
        from_below: dict[int, int] = {}  # key -> the tier below it was promoted from (1, 2, …)
        passes = 0
        while True:  # one lookup a step until none is pending (OS `_maximal_prefix_lookup`)
            passes += 1
            if chunks * chunk - g >= chunk:
                run, deferred = _lookup_pass(cpu, lower, verdicts, req, first, chunks,
                                             from_below)
            else:  # less than a chunk to load: no lookup at all (what a tier holds, for
                # `lacking`)
                run, deferred = 0, False
                while first + run < chunks and _where(keys[first + run], cpu, lower) >= 0:
                    run += 1
            if not deferred:
                break
            if passes == 1:
                _retire(cpu, verdicts, previous)
            if passes > 4 * (chunks - first) + 8:
                raise stalled_error(chains, i, tier)
            _end_step(cpu, verdicts)  # promotions land: ready at the next step's lookup
        loaded = chunk * (first + run) - g
        if loaded < chunk:
            loaded = 0
        if lacking is not None:
            lacking[i] = first + run if first + run < chunks else -1
        # The step that runs the request: the load (the prefill waits a step) or the prefill.
        if loaded:
            cpu.load(req, keys[first:first + run], positions[first:first + run])
            req.next_stored = first + run
        else:
            _offer(cpu, req, chunks)
        if passes == 1:  # the request before finishes in the first step of this one
            _retire(cpu, verdicts, previous)
        _end_step(cpu, verdicts)
        if loaded:  # the prefill after the load, and its store
            _offer(cpu, req, chunks)
            _end_step(cpu, verdicts)
            for j in range(run):
                lo = max((first + j) * chunk, g)
                hits[from_below.get(keys[first + j], 0)][i] += (first + j + 1) * chunk - lo
        previous = req
    evictions = (TierEvictions.of(cpu.records), *(TierEvictions.of(t.records) for t in lower))
    return tuple(hits), (cpu.counters(), *(t.counters() for t in lower)), evictions


class _SecondaryTier:
    """A tier below the CPU (`TieringOffloadingSpec`): every CPU chunk written through to it,
    least recently used out when full."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: OrderedDict[int, int] = OrderedDict()  # key -> request that wrote it last
        self.stored = self.evicted = self.loaded = 0
        self.records: list[tuple[int, int, int]] = []

    def put(self, key: int, request: int) -> None:
        if key in self.keys:
            self.keys.move_to_end(key)
            self.keys[key] = request
            return
        if len(self.keys) >= self.capacity:
            gone, last = self.keys.popitem(last=False)
            self.records.append((gone, request, last))
            self.evicted += 1
        self.keys[key] = request
        self.stored += 1

    def holds(self, key: int) -> bool:
        return key in self.keys

    def read(self, key: int) -> None:
        """A promotion read the chunk: most recent (vLLM's tiers never evict; a bounded one
        here is an LRU store)."""
        self.keys.move_to_end(key)
        self.loaded += 1

    def counters(self) -> TierCounters:
        return TierCounters(stored_chunks=self.stored, evicted_chunks=self.evicted,
                            failed_stores=0, loaded_chunks=self.loaded)


class StalledLookup(EngineStops):
    """A request whose lookup never settles under vLLM's tiering: the chunks it finds below
    the CPU tier are promoted one by one, each evicting another of its run, looked up again
    a step later, for ever (`TieringOffloadingManager._initiate_promotion`)."""

    def __init__(self, request: int, chunks: int, cpu_chunks: int,
                 name: str | None = None) -> None:
        self.chunks = chunks
        self.cpu_chunks = cpu_chunks
        if cpu_chunks < chunks:
            fix = f"give the CPU tier (--tier cpu=...) at least its {chunks:,} chunks"
        else:  # ARC's lists can pick the run's own chunks from a tier that holds it all
            fix = (f"the CPU tier's {cpu_chunks:,} chunks could hold them all, but the order "
                   "it evicts in picks them (under ARC it follows the tier's history, not "
                   "its size alone); try another size (--tier cpu=...)")
        super().__init__(request, (
            f"{who(request, name)} would never start under vLLM 0.33's tiers: the chunks it "
            f"finds below the CPU tier are promoted into it one at a time, each evicting "
            f"another of its {chunks:,}, and looked up again a step later, for ever; {fix}"))

    def named(self, name: str) -> StalledLookup:
        return StalledLookup(self.request, self.chunks, self.cpu_chunks, name)


def stalled_error(chains: BlockChains, request: int, cpu: TierSpec) -> StalledLookup:
    """`StalledLookup` for request `request` of `chains` under CPU tier `cpu`."""
    per_chunk = int(cpu.chunk_tokens) // int(chains.block_size_tokens)
    chunks = int(chains.offsets[request + 1] - chains.offsets[request]) // per_chunk
    return StalledLookup(request, chunks, int(cpu.capacity_chunks))


def _where(key: int, cpu: _CpuTier | _ArcCpuTier, lower: list[_SecondaryTier]) -> int:
    """0 when the CPU tier holds `key`, k for the first tier below it that does, else −1."""
    if cpu.holds(key):
        return 0
    for k, tier in enumerate(lower, start=1):
        if tier.holds(key):
            return k
    return -1


class _Verdicts:
    """A tier below the CPU answers "do you hold this chunk?" a step late
    (`tiering/async_lookup.py::AsyncLookupManager`, used by the fs and obj tiers): a key asked
    for the first time is RETRY this step and has its answer (what the tier held when asked)
    from the next; an answer is kept while a request that asked for it is unfinished, so a
    request can see the one the request before it got, however stale."""

    def __init__(self) -> None:
        self.answer: dict[int, bool] = {}
        self.asked_by: dict[int, set[int]] = {}  # key -> unfinished requests that asked
        self.asking: dict[int, set[int]] = {}  # request -> keys it asked for
        self.in_flight: set[int] = set()  # asked this step: no answer yet

    def ask(self, key: int, request: int, held: bool) -> bool | None:
        if key not in self.answer:
            self.answer[key] = held
            self.in_flight.add(key)
        self.asked_by.setdefault(key, set()).add(request)
        self.asking.setdefault(request, set()).add(key)
        return None if key in self.in_flight else self.answer[key]

    def step_ends(self) -> None:
        self.in_flight.clear()

    def forget(self, request: int) -> None:
        """`cleanup` when the request is finalized: answers no one else asked for go."""
        for key in self.asking.pop(request, ()):
            waiting = self.asked_by[key]
            waiting.discard(request)
            if not waiting and key not in self.in_flight:
                del self.answer[key]
                del self.asked_by[key]


def _lookup_pass(cpu: _CpuTier | _ArcCpuTier, lower: list[_SecondaryTier],
                 verdicts: list[_Verdicts], req: _Request, first: int, chunks: int,
                 from_below: dict[int, int]) -> tuple[int, bool]:
    """One lookup of the request's chunks from `first` (`TieringOffloadingManager.lookup`
    for each): a CPU chunk is a hit (pending while its promotion is in flight); a CPU miss
    asks the tiers below in order, and the first that answers "held" has the chunk promoted,
    one chunk at a time, into the CPU tier (which may evict, even this run's own chunks; no
    room ends the run); a tier that has not answered yet defers the lookup. Returns the run
    and whether the lookup is deferred to the next step."""
    run = 0
    deferred = False
    for j in range(first, chunks):
        key = req.keys[j]
        if cpu.holds(key):
            run += 1
            deferred |= key in cpu.pending
            continue
        retry = False
        found = -1
        for k, tier in enumerate(lower):
            answer = verdicts[k].ask(key, req.index, tier.holds(key))
            if answer is None:
                retry = True
            elif answer:
                found = k
                break
        if found >= 0:
            if not cpu.store(req, [key], [req.positions[j]], cascade=False):
                break
            from_below[key] = found + 1
            lower[found].read(key)
            run += 1
            deferred = True
            continue
        if retry:
            deferred = True
            continue
        break
    return run, deferred


def _retire(cpu: _CpuTier | _ArcCpuTier, verdicts: list[_Verdicts],
            previous: _Request | None) -> None:
    """The connector sees the request before finish: a failed offer offered again, then
    its keys ranked (`on_request_finished`) and the answers it asked for forgotten."""
    if previous is None:
        return
    if previous.failed:
        _offer(cpu, previous, len(previous.keys))
    cpu.finish(previous)
    for v in verdicts:
        v.forget(previous.index)


def _end_step(cpu: _CpuTier | _ArcCpuTier, verdicts: list[_Verdicts]) -> None:
    cpu.end_step()
    for v in verdicts:
        v.step_ends()


def _offer(cpu: _CpuTier | _ArcCpuTier, req: _Request, chunks: int) -> None:
    """`_build_store_jobs` for one request: its chunks from the store index; the index
    advances unless the offer fails whole."""
    lo = req.next_stored
    if lo >= chunks:
        req.failed = False
        return
    ok = cpu.store(req, req.keys[lo:chunks], req.positions[lo:chunks])
    req.failed = not ok
    if ok:
        req.next_stored = chunks


def replay_vllm_tiers(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                      tiers: tuple[TierSpec, ...], *, lacking: np.ndarray | None = None,
                      explain: bool = True
                      ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                 tuple[TierEvictions, ...]]:
    """Hit tokens per tier (cpu first), the tiers' counters and their evictions under vLLM's
    native offload: the compiled pass (`vllm_kernel.py`) of the rules `replay_vllm_offload`
    states. `lacking`, when given, is filled per request with the first chunk no tier held at
    the lookup (−1: none). Without `explain` the evictions are counted only (`()`)."""
    from yaotu_trace.prefix.tiers.vllm_kernel import vllm_offload_pass

    return _compiled(vllm_offload_pass, chains, gpu_hit_blocks, refused, tiers, lacking,
                     explain)


def replay_vllm_arc(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                    tiers: tuple[TierSpec, ...], *, lacking: np.ndarray | None = None,
                    explain: bool = True
                    ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                               tuple[TierEvictions, ...]]:
    """`replay_vllm_offload(..., arc=True)` compiled (`vllm_arc_kernel.py`), as
    `replay_vllm_tiers` is the LRU one: the same results, the CPU tier evicting by ARC."""
    from yaotu_trace.prefix.tiers.vllm_arc_kernel import vllm_arc_pass

    return _compiled(vllm_arc_pass, chains, gpu_hit_blocks, refused, tiers, lacking, explain)


def _compiled(kernel: Callable[..., tuple], chains: BlockChains, gpu_hit_blocks: np.ndarray,
              refused: np.ndarray, tiers: tuple[TierSpec, ...], lacking: np.ndarray | None,
              explain: bool) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                      tuple[TierEvictions, ...]]:
    """One of the compiled passes (`vllm_offload_pass`, `vllm_arc_pass`) over `tiers`, its
    arrays turned into the replay's hits, counters and evictions (`()` without `explain`)."""
    from yaotu_trace.prefix.tiers.lru_rows import outcome

    cpu = tiers[0]
    block = int(chains.block_size_tokens)
    (hits, stored, evicted, failed, loaded, ev_key, ev_req, ev_last, lower_counters,
     lower_evictions, first_lacking, stalled) = kernel(
        chains.offsets, chains.ids, gpu_hit_blocks, refused, int(cpu.chunk_tokens) // block,
        int(cpu.chunk_tokens), block, int(cpu.capacity_chunks), int(chains.num_distinct),
        tuple(int(t.capacity_chunks) for t in tiers[1:]), int(cpu.store_threshold), explain)
    if stalled >= 0:
        raise stalled_error(chains, stalled, cpu)
    if lacking is not None:
        lacking[:] = first_lacking
    counters = TierCounters(stored_chunks=stored, evicted_chunks=evicted, failed_stores=failed,
                            loaded_chunks=loaded)
    below_counters, below_evictions = outcome(lower_counters, lower_evictions)
    evictions = ((TierEvictions(key=ev_key, request=ev_req, last_use_request=ev_last),
                  *below_evictions) if explain else ())
    return tuple(h.copy() for h in hits), (counters, *below_counters), evictions
