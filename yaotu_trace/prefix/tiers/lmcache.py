"""LMCache 0.5's storage manager behind vLLM's GPU pool, request by request.

The rules (kv-tiers.md §2; LMCache paths `v1/cache_engine.py`, `v1/storage_backend/
storage_manager.py`, `local_cpu_backend.py`, `local_disk_backend.py`, `cache_policy/lru.py`,
`integration/vllm/vllm_v1_adapter.py`):

- Chunks of T tokens (256 by default), keyed by the chained hash of their tokens (here the chain
  id of the chunk's last block, the same prefix identity); a partial chunk is never saved.
- Lookup from token 0: the CPU backend's consecutive run, then the disk's from where it
  stopped, then the remote's. Every chunk of the run is touched in its backend, tail to head
  (the head ends most recent), but for the remote store, which is asked chunk by chunk, head
  to tail, whether it holds each, and counts the question as a use (the tail ends most
  recent: `remote_backend.py::contains`, the store's `exists`).
- The GPU hit wins: LMCache loads the run's tokens beyond the GPU hit g (none when the run is
  not longer); when the run covers the whole prompt it loads one token less (the last one is
  recomputed). A chunk read from disk or remote is also written into the CPU backend.
- After the prefill every full chunk from the LMCache hit on is saved. The save first takes
  CPU memory for each of them, head to tail, a chunk the CPU backend already holds included
  (`cache_engine.py::store`, `storage_manager.allocate`), evicting the CPU backend's least
  recently used chunks for it (`local_cpu_backend.py::allocate`); chunks of this save are
  not in the backend yet, so none of them can be evicted, and when the backend is too small
  for the whole save it keeps the head and drops the rest ("choosing to store only N total
  chunks"). Then every backend is written head to tail (`storage_manager.py::batched_put`):
  the CPU backend skips a key it has without refreshing it; the local disk refreshes a key it
  has, admits the others while the save's writes in flight leave room (evicting its least
  recently used written chunks for them) and lands them, in order, when the save's writes are
  done (`local_disk_backend.py::submit_put_task`, `insert_key`); the remote store refreshes a
  chunk it holds and evicts its least recently used chunk when full (LMCache's own mock
  store, `connector/mock_connector.py::AsyncLRU`: a real store's eviction is its own).
- A chunk read from disk is refreshed there (`local_disk_backend.py::batched_get_blocking`).
  Every chunk read from below takes CPU memory before any is written into the CPU backend
  (the disk's reads allocate their buffers first), the least recent chunks evicted for it,
  a chunk about to be read included; a chunk the backend still holds is then not written
  again (`local_cpu_backend.py::submit_put_task`).
- A load holds in CPU memory at once the run's chunks the CPU backend has (the lookup pinned
  them) and every chunk it reads from below; when it reads from the disk and those are more
  than the CPU backend holds, LMCache's retrieve finds nothing to evict and waits for room
  for ever (`local_cpu_backend.py::allocate`, its busy loop: "No eviction candidates
  found"). The replay stops there (`WaitsForCpuRoom`). Held to LMCache with a local disk,
  behind no GPU hit and behind vLLM pools (the chunks within the GPU hit are not read: the
  adapter masks them). A load from the remote store that outgrows the CPU backend does not
  wait: LMCache loads less than its lookup found, and what it keeps differs from there on
  (held to LMCache: every request before such a load agrees); the replay stops there too,
  saying so (`LoadOutgrowsCpu`).

Checked against LMCache 0.5.6's engine driven on CPU, request by request, with a local disk or
a remote store below the CPU (`tests/fixtures/tiers_lmcache/`,
`tests/prefix/test_tiers_lmcache_engine.py`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Self

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.tiers.result import TierCounters, TierEvictions
from yaotu_trace.prefix.tiers.spec import TierSpec
from yaotu_trace.prefix.tiers.stops import EngineStops, who


class LoadOutgrowsCpu(EngineStops):
    """A load from the remote store that holds more chunks in CPU memory at once than the CPU
    backend has: LMCache does not wait there (as it does for the disk) but loads less than
    its lookup found, which the replay does not follow (see the module docstring)."""

    def __init__(self, request: int, holding_chunks: int, cpu_chunks: int,
                 name: str | None = None) -> None:
        self.holding_chunks = holding_chunks
        self.cpu_chunks = cpu_chunks
        super().__init__(request, self._say(who(request, name), holding_chunks, cpu_chunks))

    @staticmethod
    def _say(who: str, holding_chunks: int, cpu_chunks: int) -> str:
        return (f"{who}'s load from the remote store holds {holding_chunks:,} chunks in CPU "
                f"memory at once, more than LMCache's CPU backend's {cpu_chunks:,}: LMCache "
                "then loads less than its lookup found, which the replay does not follow; give "
                f"the CPU backend (--tier cpu=...) at least {holding_chunks:,} chunks")

    def named(self, name: str) -> Self:
        return type(self)(self.request, self.holding_chunks, self.cpu_chunks, name)


class WaitsForCpuRoom(LoadOutgrowsCpu):
    """A request LMCache never serves: its load reads from the disk and holds more chunks in
    CPU memory at once than the CPU backend has, so LMCache's retrieve waits for room for
    ever (see the module docstring)."""

    @staticmethod
    def _say(who: str, holding_chunks: int, cpu_chunks: int) -> str:
        return (f"{who} would never be served under LMCache: its load holds "
                f"{holding_chunks:,} chunks in CPU memory at once (those of its hit the CPU "
                f"backend has, pinned by the lookup, and those read from below), more than the "
                f"CPU backend's {cpu_chunks:,}, and LMCache's retrieve waits for room for ever "
                f"('No eviction candidates found in local cpu backend'); give the CPU backend "
                f"(--tier cpu=...) at least {holding_chunks:,} chunks")


class _Backend:
    """One storage backend: an LRU of chunk keys (last = most recent)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: OrderedDict[int, int] = OrderedDict()  # key -> request that used it last
        self.stored = self.evicted = self.loaded = self.failed = 0
        self.now = -1  # the request being replayed
        self.records: list[tuple[int, int, int]] = []  # (key, evicting request, last use)

    def touch(self, key: int) -> None:
        self.keys.move_to_end(key)
        self.keys[key] = self.now

    def evict_oldest(self) -> None:
        """Drop the least recent key, recorded (key, evicting request, its last use)."""
        gone, last = self.keys.popitem(last=False)
        self.records.append((gone, self.now, last))
        self.evicted += 1

    def put(self, key: int) -> None:
        """Insert as most recent, evicting the least recent when full."""
        if key in self.keys:
            return
        if len(self.keys) >= self.capacity:
            self.evict_oldest()
        self.keys[key] = self.now
        self.stored += 1

    def make_room(self, wanted: int) -> None:
        """Memory for `wanted` chunks, the least recent chunks evicted for it (a chunk about to
        be read into it included)."""
        for _ in range(max(0, min(len(self.keys), len(self.keys) + wanted - self.capacity))):
            self.evict_oldest()

    def allocate(self, wanted: int) -> int:
        """How many of a store's `wanted` chunks get memory: one page each (a chunk already
        held too), the least recent chunks evicted for them; the rest of the store is dropped
        when the backend cannot take it all."""
        self.make_room(wanted)
        if wanted > self.capacity:
            self.failed += 1
            return self.capacity
        return wanted

    def write(self, keys: list[int]) -> None:
        """A save into the disk backend (`local_disk_backend.py::submit_put_task`): a chunk it
        holds is refreshed; another is admitted while the save's own writes in flight leave
        room, evicting the least recent written chunks for it, and lands (most recent) when the
        save's writes complete, in order; the rest of the save is skipped."""
        admitted: list[int] = []
        for key in keys:
            if key in self.keys:
                self.touch(key)
            elif len(admitted) < self.capacity:
                while len(self.keys) + len(admitted) >= self.capacity:
                    self.evict_oldest()
                admitted.append(key)
        for key in admitted:
            self.keys[key] = self.now
            self.stored += 1

    def counters(self) -> TierCounters:
        return TierCounters(stored_chunks=self.stored, evicted_chunks=self.evicted,
                            failed_stores=self.failed, loaded_chunks=self.loaded)


def replay_lmcache_tiers(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                         tiers: tuple[TierSpec, ...], *, lacking: np.ndarray | None = None
                         ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                    tuple[TierEvictions, ...]]:
    """Hit tokens per tier (in `tiers` order), the backends' counters and their evictions
    under LMCache: the compiled pass (`lmcache_kernel.py`) of the rules `replay_lmcache_model`
    states. `lacking`, when given, is filled per request with the first chunk the backends
    did not hold from token 0 (−1: none)."""
    from yaotu_trace.prefix.tiers.lmcache_kernel import lmcache_pass

    names = [str(t.name) for t in tiers]
    hits, counters, evictions, waits = lmcache_pass(
        chains, gpu_hit_blocks, refused, tuple(int(t.capacity_chunks) for t in tiers),
        int(tiers[0].chunk_tokens),
        *(names.index(name) if name in names else -1 for name in ("cpu", "disk", "remote")),
        lacking=lacking)
    if waits is not None:
        request, holding, for_ever = waits
        stopping = WaitsForCpuRoom if for_ever else LoadOutgrowsCpu
        raise stopping(request, holding, int(tiers[names.index("cpu")].capacity_chunks))
    return hits, counters, evictions


def replay_lmcache_model(chains: BlockChains, gpu_hit_blocks: np.ndarray, refused: np.ndarray,
                         tiers: tuple[TierSpec, ...]
                         ) -> tuple[tuple[np.ndarray, ...], tuple[TierCounters, ...],
                                    tuple[TierEvictions, ...]]:
    """`replay_lmcache_tiers` in Python, rule by rule: the reference its kernel is held to."""
    block = int(chains.block_size_tokens)
    chunk = int(tiers[0].chunk_tokens)
    per_chunk = chunk // block
    backends = [_Backend(int(t.capacity_chunks)) for t in tiers]
    cpu = next((b for b, t in zip(backends, tiers, strict=True) if t.name == "cpu"), None)
    disk = next((b for b, t in zip(backends, tiers, strict=True) if t.name == "disk"), None)
    remote = next((b for b, t in zip(backends, tiers, strict=True) if t.name == "remote"), None)
    offsets = chains.offsets
    ids = chains.ids
    prompt = chains.prompt_tokens
    n = chains.num_requests
    hits = [np.zeros(n, dtype=np.int64) for _ in tiers]
    for i in range(n):
        if refused[i]:
            continue
        for backend in backends:
            backend.now = i
        start = int(offsets[i])
        chunks = (int(offsets[i + 1]) - start) // per_chunk
        keys = ids[start + per_chunk - 1: start + chunks * per_chunk: per_chunk].tolist()
        source: list[int] = []  # backend index of each chunk of the run
        for b, backend in enumerate(backends):
            run_start = len(source)
            while len(source) < chunks and keys[len(source)] in backend.keys:
                source.append(b)
            found = range(run_start, len(source))
            for j in (found if backend is remote else reversed(found)):
                backend.touch(keys[j])
        run_tokens = len(source) * chunk
        g = int(gpu_hit_blocks[i]) * block
        load = run_tokens - g
        if run_tokens == int(prompt[i]):
            load -= 1
        if load > 0 and cpu is not None and len(backends) > 1:
            # held in CPU memory at once: the run's chunks there (pinned) and those read
            read = [backends[source[j]] for j in range(g // chunk, len(source))
                    if backends[source[j]] is not cpu]
            holding = sum(1 for b in source if backends[b] is cpu) + len(read)
            if read and holding > cpu.capacity:
                stopping = WaitsForCpuRoom if disk in read else LoadOutgrowsCpu
                raise stopping(i, holding, cpu.capacity)
        if load > 0:
            end = g + load
            if cpu is not None:  # each chunk read from below takes CPU memory first
                cpu.make_room(sum(1 for j in range(g // chunk, len(source))
                                  if backends[source[j]] is not cpu))
            for j in range(g // chunk, len(source)):
                b = source[j]
                served = min((j + 1) * chunk, end) - max(j * chunk, g)
                hits[b][i] += served
                backends[b].loaded += 1
                if disk is not None and backends[b] is disk:
                    disk.touch(keys[j])  # a disk read refreshes the chunk
                if cpu is not None and backends[b] is not cpu:
                    cpu.put(keys[j])
        stop = chunks
        if cpu is not None and chunks > len(source):
            stop = len(source) + cpu.allocate(chunks - len(source))
        for backend in backends:
            if backend is disk:
                disk.write(keys[len(source):stop])
                continue
            for j in range(len(source), stop):
                if backend is remote and keys[j] in remote.keys:
                    remote.touch(keys[j])  # the store counts the write as a use
                else:
                    backend.put(keys[j])
    return (tuple(hits), tuple(b.counters() for b in backends),
            tuple(TierEvictions.of(b.records) for b in backends))
