"""Partitioned replay: independent caches replayed in parallel and merged bit-identically.

A replay whose cache state splits into independent caches — one per serving instance (`scope
instance` with the trace's instance column or a route that does not look at the cache), or one
per tenant (`capacity_per_tenant`) — is a set of independent sequential replays. Each partition
is the sub-sequence of its requests, in arrival order, with its block ids renumbered in
first-appearance order; it replays as one global cache of the same capacity, and the
per-request hits are scattered back to their rows. The merge is exact: the same integers as the
single-process replay, whichever runner ran the partitions.

One global cache (finite capacity, one LRU for all requests) and prefix-affinity routing (which
follows the cache contents) are sequential: they cannot be split, and run in one process.

Runners: in this process (`jobs=1`), a pool of worker processes (`jobs=N`, spawn-safe), or a
Dask distributed cluster (`dask="tcp://scheduler:8786"`, or `"local"` for an in-process
`LocalCluster` of two single-threaded worker processes). Dask is an optional extra
(`pip install 'yaotu-trace[dask]'`); the workers must have yaotu-trace installed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pickle
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import numpy as np

from yaotu_trace.errors import ConfigError, WorkerLostError
from yaotu_trace.prefix.kernels.chains import BlockChains, offsets_of, segment_ranges
from yaotu_trace.prefix.kernels.compact import CompactChains, IdRuns
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.kernels.unlimited import replay
from yaotu_trace.prefix.rules import ReplayRules, Route, Scope

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

LOCAL_DASK = "local"
LOCAL_DASK_WORKERS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Parallelism:
    """Where independent passes run: `jobs` local processes, or a Dask scheduler address."""

    jobs: int = 1
    dask: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ConfigError(f"--jobs {self.jobs!r} must be a whole number >= 1")

    @property
    def parallel(self) -> bool:
        """Whether passes leave this process at all."""
        return self.dask is not None or self.jobs > 1

    def describe(self) -> str:
        """One phrase for notes: where the partitions ran."""
        if self.dask == LOCAL_DASK:
            return f"a local Dask cluster of {LOCAL_DASK_WORKERS} workers"
        if self.dask is not None:
            return f"the Dask cluster at {self.dask}"
        return f"{self.jobs} worker processes" if self.jobs > 1 else "one process"


SERIAL = Parallelism()


class Runner(Protocol):
    """Maps a picklable top-level function over items, results in item order."""

    def map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        """fn(*item) for each item, in order."""
        ...


class _Serial:
    def map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        return [fn(*item) for item in items]


SERIAL_RUNNER: Runner = _Serial()


class _Dask:
    def __init__(self, client: Any) -> None:
        self._client = client

    def map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        # A partition's arrays go to the workers as data (scatter), not inside the task graph:
        # at 1e10 tokens a graph is hundreds of MB, slow to ship, and Dask warns about each on
        # stderr. hash=False: no hashing of large arrays; pure=False: equal inputs are still
        # separate tasks (no result sharing by hash).
        futures = []
        for item in items:
            args = self._client.scatter(list(item), hash=False)
            futures.append(self._client.submit(fn, *args, pure=False))
            del item  # shipped: not held while the next one is built
        return list(self._client.gather(futures))


@contextlib.contextmanager
def open_runner(parallel: Parallelism) -> Iterator[Runner]:
    """A runner for the run's lifetime; pools and clusters are shut down on exit."""
    if parallel.dask is not None:
        yield from _dask_runner(parallel.dask)
        return
    if parallel.jobs <= 1:
        yield _Serial()
        return
    yield from _pool_runner(parallel.jobs)


def _pool_runner(jobs: int) -> Iterator[Runner]:
    """`jobs` worker processes that leave Ctrl-C to this process, which stops them.

    A Ctrl-C at the terminal (and a SIGHUP when it closes) reaches the whole process group, and
    a worker that raised its own KeyboardInterrupt would print a traceback. So the workers start
    with SIGINT, SIGHUP and SIGTERM blocked (the mask survives spawn's fork and exec, which
    covers their start-up), then ignore the first two and take SIGTERM again (`kill -TERM
    -PGID` ends them where they stand); this process gets the signal and kills what is left.
    """
    # NOTE: multiprocessing is imported for workers only (2 ms a serial replay never pays).
    import multiprocessing
    from multiprocessing import resource_tracker

    # NOTE: spawn, not fork: numba's threads and Arrow's pools do not survive a fork safely.
    ctx = multiprocessing.get_context("spawn")
    # Starting the resource tracker unblocks SIGINT in this thread: it is started first. It
    # ignores SIGINT and SIGTERM itself, and SIGHUP from its birth here (a disposition that
    # survives exec): killed by the group's SIGHUP, it would be restarted and print tracebacks.
    # Blocked meanwhile, a SIGHUP for this process waits instead of being ignored.
    with _blocked((signal.SIGHUP,)), _ignoring(signal.SIGHUP):
        resource_tracker.ensure_running()
    workers = _Workers(jobs, ctx)
    try:
        yield workers
    except BaseException:
        workers.kill()
        raise
    workers.close()


class _Workers:
    """Worker processes with a pipe each, fed one item at a time, results in item order.

    Nothing is shared between them (multiprocessing's Pool hands tasks out through one queue
    whose lock an idle worker holds: a worker killed by the group's SIGTERM while holding it
    left this process waiting for that lock forever as it shut the pool down). A worker that
    dies is seen through its sentinel; this process never waits on one that cannot answer.

    Workers start when there is work for them, no more than the items to map: `--jobs 64` on
    four per-instance caches starts four processes, not 64 (each loads numba and numpy).
    """

    def __init__(self, jobs: int, ctx: Any) -> None:
        self._jobs = jobs
        self._ctx = ctx
        self._processes: list[Any] = []
        self._pipes: list[Connection] = []

    def _start(self, wanted: int) -> None:
        """Up to `wanted` workers (at most `jobs`). A signal held back while they start is
        raised as the block ends, in the caller's try."""
        with _blocked(_WORKER_SIGNALS):
            while len(self._processes) < min(wanted, self._jobs):
                ours, theirs = self._ctx.Pipe()
                process = self._ctx.Process(target=_serve, args=(theirs,), daemon=True)
                self._processes.append(process)
                self._pipes.append(ours)
                process.start()
                theirs.close()

    def map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        items = list(items)
        self._start(len(items))
        results: list[Any] = [None] * len(items)
        todo = iter(enumerate(items))
        busy: dict[Connection, int] = {}

        def hand_out(pipe: Connection) -> None:
            for index, item in todo:
                pipe.send((fn, tuple(item)))
                busy[pipe] = index
                return

        for pipe in self._pipes:
            hand_out(pipe)
        owner = dict(zip(self._pipes, self._processes, strict=True))
        sentinels = {p.sentinel: p for p in self._processes}
        from multiprocessing.connection import wait

        while busy:
            ready = wait([*busy, *sentinels])
            for pipe in [r for r in ready if r in busy]:
                try:
                    ok, value = pipe.recv()
                except (EOFError, OSError):  # its end closed: the worker is gone
                    _raise_lost(owner[pipe], self._jobs)
                if not ok:
                    raise value
                results[busy.pop(pipe)] = value
                hand_out(pipe)
            for sentinel in [r for r in ready if r in sentinels]:
                _raise_lost(sentinels[sentinel], self._jobs)
        return results

    def close(self) -> None:
        """Every task has its result: the workers are told to stop, and waited for."""
        for pipe in self._pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for process in self._processes:
            process.join(timeout=5)
        self.kill()

    def kill(self) -> None:
        """The run is abandoned: what is still running is killed, and reaped."""
        for process in self._processes:
            if process.exitcode is None and process.pid is not None:
                process.kill()
        for process in self._processes:
            if process.pid is not None:
                process.join()
        for pipe in self._pipes:
            pipe.close()


def _raise_lost(process: Any, jobs: int) -> NoReturn:
    process.join()
    code = process.exitcode
    how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exited with code {code}")
    raise WorkerLostError(
        f"a worker process of --jobs {jobs} {how} before it returned its partition (the "
        "out-of-memory killer sends SIGKILL); run again with fewer --jobs")


def _serve(pipe: Connection) -> None:
    """A worker's loop: (fn, args) in, (True, result) or (False, exception) out; None ends it,
    and so does a parent gone (its end of the pipe closed), quietly."""
    _leave_signals_to_parent()
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        while (task := pipe.recv()) is not None:
            fn, args = task
            try:
                answer: tuple[bool, Any] = (True, fn(*args))
            except Exception as exc:  # raised again in the parent
                answer = (False, exc)
            try:
                pipe.send(answer)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                pipe.send((False, RuntimeError(f"{answer[1]!r} cannot be sent back: {exc}")))


# Held back while workers start; the first two are the terminal's, sent to the whole group.
_WORKER_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


@contextlib.contextmanager
def _blocked(signals: Sequence[signal.Signals]) -> Iterator[None]:
    """`signals` held back in this thread (and what it starts); one that came is delivered
    after."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(signals))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back in this thread (and what it starts); one that came is delivered after."""
    with _blocked((signal.SIGINT,)):
        yield


@contextlib.contextmanager
def _ignoring(signum: signal.Signals) -> Iterator[None]:
    """`signum` ignored by what this thread starts meanwhile (a process keeps the disposition)."""
    try:
        old = signal.signal(signum, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to set
        yield
        return
    try:
        yield
    finally:
        signal.signal(signum, old)


def _leave_signals_to_parent() -> None:
    """A worker's first step: Ctrl-C and SIGHUP are the parent's to handle; SIGTERM ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _dask_runner(address: str) -> Iterator[Runner]:
    try:
        # NOTE: Dask is an optional extra, heavy to import; only `--dask` needs it.
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise ConfigError(
            "--dask needs the optional Dask extra: pip install 'yaotu-trace[dask]'"
        ) from exc
    if address == LOCAL_DASK:
        # As for the pool: the cluster's event loop thread, and the worker processes its
        # nannies start, keep SIGINT blocked. The cluster is this run's own, so its logs stay
        # quiet (an abandoned run's workers log the scheduler closing under them, and asyncio
        # the gathers it left); a failed task still raises here.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        with contextlib.ExitStack() as stack:
            try:
                with _sigint_blocked():
                    # No dashboard; the scheduler's HTTP server (health, metrics) on a free
                    # port of this host, not Dask's 8787, which a user's own cluster (or
                    # another run) may hold: Dask warns, then moves.
                    cluster = stack.enter_context(LocalCluster(
                        n_workers=LOCAL_DASK_WORKERS, threads_per_worker=1, processes=True,
                        dashboard_address=None, silence_logs=logging.CRITICAL + 1,
                        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}))
                    client = stack.enter_context(Client(cluster))
                yield _Dask(client)
            except BaseException:
                logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
                raise
        return
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"--dask {address}: cannot reach the scheduler ({exc}); check the "
                          "address (tcp://host:8786) or use --dask local") from exc
    with client:
        yield _Dask(client)


# ---------------------------------------------------------------- partitions


@dataclass(frozen=True, slots=True, kw_only=True)
class Partitions:
    """Cache partition per request, or why the replay cannot be split.

    `codes[i]` is request i's cache (0..k-1); `instance[i]` its serving instance when the
    scope is instance (what the report shows per instance), else None.
    """

    codes: np.ndarray | None
    instance: np.ndarray | None
    num_instances: int
    reason: str | None = None


def cache_partitions(rules: ReplayRules, num_requests: int, *,
                     instance_codes: np.ndarray | None, tenant_codes: np.ndarray | None,
                     arrival_s: np.ndarray | None = None, finish_s: np.ndarray | None = None,
                     chains: BlockChains | None = None) -> Partitions:
    """Independent caches of a replay under `rules`, or the reason there is only one."""
    instance = None
    k = 1
    if rules.scope is Scope.INSTANCE:
        if rules.route is Route.PREFIX_AFFINITY:
            return Partitions(codes=None, instance=None, num_instances=rules.instances,
                              reason="prefix-affinity routing follows the cache contents, so "
                              "its instances are not independent")
        if rules.route is None and instance_codes is not None:
            instance = np.asarray(instance_codes, dtype=np.int64)
            k = int(instance.max()) + 1 if instance.size else 1
        elif rules.route is Route.LEAST_LOADED:
            assert chains is not None
            # Least-loaded looks at outstanding prompt tokens only, never at the cache: the
            # routes of an unlimited replay are the routes at every capacity.
            routed = replay(chains, rules.with_(capacity_blocks=None), None,
                            arrival_s=arrival_s, finish_s=finish_s)
            assert routed.instance is not None
            instance, k = routed.instance, rules.instances
        else:
            from yaotu_trace.prefix.kernels.engine import route_codes

            instance, k = route_codes(rules, num_requests), rules.instances
    tenant = tenant_codes if rules.capacity_per_tenant else None
    if instance is None and tenant is None:
        return Partitions(codes=None, instance=None, num_instances=1,
                          reason="one global cache is one sequential LRU")
    codes = instance
    if tenant is not None:
        t = np.asarray(tenant, dtype=np.int64)
        codes = t if codes is None else codes * (int(t.max()) + 1 if t.size else 1) + t
    assert codes is not None
    return Partitions(codes=codes, instance=instance, num_instances=k)


def _readonly(array: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.ascontiguousarray(array, dtype=dtype)
    out.flags.writeable = False
    return out


def sub_chains(chains: BlockChains, rows: np.ndarray) -> BlockChains:
    """The chains of `rows` (in order), ids renumbered densely in first-appearance order.

    Dense first-appearance ids are what the engine's unlimited fast path relies on, and they
    keep each worker's tables as small as its partition.
    """
    rows = np.asarray(rows, dtype=np.int64)
    base = np.asarray(chains.offsets, dtype=np.int64)
    if chains.output_ids is None:
        offsets = offsets_of(base[rows + 1] - base[rows])
        blocks = int(offsets[-1])
        top = max(int(chains.num_distinct), 1)
        if blocks > SMALL_RELABEL and top <= TABLE_IDS_PER_BLOCK * blocks + (1 << 20):
            # NOTE: the compiled relabelling starts numba; a small one sorts in numpy instead.
            from yaotu_trace.prefix.kernels.relabel import rows_first_appearance_ids

            dense, num = rows_first_appearance_ids(base, chains.ids, rows, np.int64(blocks),
                                                   np.int64(top))
            return _sub(chains, rows, offsets, _readonly(dense, np.int32), int(num), None,
                        None)
    offsets, index = segment_ranges(base, rows)
    out_offsets = out_ids = None
    if chains.output_offsets is not None and chains.output_ids is not None:
        out_offsets, out_index = segment_ranges(
            np.asarray(chains.output_offsets, dtype=np.int64), rows)
        out_ids = chains.output_ids[out_index]
    ids, out_ids, num = _renumber(offsets, chains.ids[index], out_offsets, out_ids)
    return _sub(chains, rows, offsets, ids, num, out_offsets, out_ids)


def _sub(chains: BlockChains, rows: np.ndarray, offsets: np.ndarray, ids: np.ndarray,
         num: int, out_offsets: np.ndarray | None, out_ids: np.ndarray | None) -> BlockChains:
    """The chains of `rows` with their renumbered ids (`sub_chains`)."""
    return replace(
        chains,
        offsets=_readonly(offsets, np.int64),
        ids=ids,
        last_block_tokens=_readonly(chains.last_block_tokens[rows], np.int32),
        num_distinct=num,
        max_hit_blocks=_readonly(chains.max_hit_blocks[rows], np.int64),
        prompt_tokens=_readonly(chains.prompt_tokens[rows], np.int64),
        output_offsets=None if out_offsets is None else _readonly(out_offsets, np.int64),
        output_ids=out_ids,
    )


def with_namespaces(chains: BlockChains, codes: np.ndarray, *,
                    in_place: bool = False) -> BlockChains:
    """The chains with a per-request namespace (e.g. tenant) added to every block's identity.

    Two requests share block k under the new namespaces iff they shared it before and have the
    same code: the pair (code, old id) is the identity, renumbered in first-appearance order —
    the same ids hashing the namespace into the chain gives, without reading the prompts again.
    `in_place=True` lets a large relabelling overwrite `chains.ids` when they are writable (ids
    expanded for this call alone, `compact.CompactChains.expand`): no second array of ids
    (2.3 GB at 1e10 tokens) is held beside them.
    """
    width = np.int64(max(chains.num_distinct, 1))
    codes = np.asarray(codes, dtype=np.int64)
    offsets = np.asarray(chains.offsets, dtype=np.int64)
    if codes.size and int(codes.min()) == int(codes.max()):
        return chains  # one namespace: the ids are already dense in first-appearance order
    if (chains.output_ids is None and chains.ids.size > SMALL_RELABEL
            and int(codes.min()) >= 0 and int(codes.max()) < 2**31 - 1):
        # NOTE: the compiled relabelling starts numba; a small one sorts in numpy instead.
        from yaotu_trace.prefix.kernels.relabel import namespaced_first_appearance_ids

        ids = chains.ids
        own = in_place and ids.dtype == np.int32 and ids.flags.writeable and ids.flags.c_contiguous
        # Each id is read before its slot is written, so the output may be the input. Then the
        # input goes in writable (a second compiled signature): numba lets the loads of a
        # read-only array move past the stores to the same memory.
        out = ids if own else np.empty(ids.size, dtype=np.int32)
        count = int(codes.max()) + 1
        # The namespace that met each id first: int8 for up to 127 namespaces (5 bytes per id
        # with the new ids, not 8: 0.18 GB less at 1e10 tokens, the relabelling's peak).
        first_code = np.full(int(width), -1, dtype=np.int8 if count <= 127 else np.int32)
        dense = namespaced_first_appearance_ids(offsets, ids, codes, first_code,
                                                np.int64(count), out)
        num = int(dense.max()) + 1 if dense.size else 0
        return replace(chains, ids=_readonly(dense, np.int32), num_distinct=num)
    base = codes * width
    # One int64 array per block, added to in place: at 1e10 tokens each is 5 GB.
    keys = np.repeat(base, np.diff(offsets))
    keys += chains.ids
    out_keys = None
    out_offsets = chains.output_offsets
    if out_offsets is not None and chains.output_ids is not None:
        out_keys = np.repeat(base, np.diff(out_offsets))
        out_keys += chains.output_ids
    ids, out_ids, num = _renumber(offsets, keys, out_offsets, out_keys)
    return replace(chains, ids=ids, num_distinct=num,
                   output_ids=out_ids if out_keys is not None else chains.output_ids)


def _renumber(offsets: np.ndarray, ids: np.ndarray, out_offsets: np.ndarray | None,
              out_ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Dense int32 ids in first-appearance order over replay order (prompt, then output)."""
    if out_offsets is None or out_ids is None:
        dense = _first_appearance_ids(ids)
        return _readonly(dense, np.int32), None, int(dense.max()) + 1 if dense.size else 0
    n = len(offsets) - 1
    p_req = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    o_req = np.repeat(np.arange(n, dtype=np.int64), np.diff(out_offsets))
    order = np.lexsort((np.r_[np.zeros(ids.size, np.int8), np.ones(out_ids.size, np.int8)],
                        np.r_[p_req, o_req]))
    joined = np.concatenate([np.asarray(ids, np.int64), np.asarray(out_ids, np.int64)])
    dense = _first_appearance_ids(joined[order])
    renumbered = np.empty_like(dense)
    renumbered[order] = dense
    num = int(dense.max()) + 1 if dense.size else 0
    return (_readonly(renumbered[: ids.size], np.int32),
            _readonly(renumbered[ids.size:], np.int32), num)


# Up to this many keys the first-appearance ids come from a sort in numpy (the same ids), not
# the compiled table: no numba to load for a small replay.
SMALL_RELABEL = 2_000_000
# A partition is relabelled through the compiled table (4 bytes per id of the whole trace)
# while the table is at most this many ids per block of the partition: numpy's sort takes
# about 48 bytes a block (the gather, the int64 keys, `np.unique`'s sort and inverse). At 1e10
# tokens the sort of an 11M-block partition (of 6.0e7 ids) added 0.8 GB to the replay's
# peak, and took 1.4 s where the table takes 0.5 s for 4e7 blocks.
TABLE_IDS_PER_BLOCK = 12


def _first_appearance_ids(ids: np.ndarray) -> np.ndarray:
    """Dense ids 0..d-1 numbered by first appearance in `ids` (int32).

    One pass over a lookup table when the keys are small enough (chain ids, or tenant × chain
    id pairs); a sort otherwise.
    """
    if ids.size == 0:
        return np.zeros(0, dtype=np.int32)
    keys = np.ascontiguousarray(ids, dtype=np.int64)
    top = int(keys.max()) + 1
    if int(keys.min()) >= 0 and top <= 4 * keys.size + (1 << 20) and keys.size > SMALL_RELABEL:
        # NOTE: the compiled relabelling starts numba; a small one sorts in numpy instead.
        from yaotu_trace.prefix.kernels.relabel import first_appearance_ids

        return first_appearance_ids(keys, np.int64(top))
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int32)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size, dtype=np.int32)
    return rank[inverse.reshape(-1)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayJob:
    """One replay to run: chains, rules, the engine's extra inputs, and its partitions."""

    chains: BlockChains
    rules: ReplayRules
    instance_codes: np.ndarray | None = None
    arrival_s: np.ndarray | None = None
    finish_s: np.ndarray | None = None
    partitions: Partitions | None = None


def _run_task(chains: BlockChains | CompactChains, rules: ReplayRules,
              instance_codes: np.ndarray | None, arrival_s: np.ndarray | None,
              finish_s: np.ndarray | None) -> ReplayResult:
    """A worker's task: one whole replay, or one partition replayed as one global cache. A
    Dask worker gets a partition's ids as runs, as they are in the whole trace
    (`_partition_task`), and renumbers them itself: the ids `sub_chains` gives."""
    if isinstance(chains, CompactChains):
        whole = chains.expand()
        chains = sub_chains(whole, np.arange(whole.num_requests, dtype=np.int64))
    return replay(chains, rules, instance_codes, arrival_s=arrival_s, finish_s=finish_s)


def partition_rows(codes: np.ndarray) -> list[np.ndarray]:
    """The rows of each partition code (ascending), each in arrival order."""
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds) if order.size else []


def _one_cache(rules: ReplayRules) -> ReplayRules:
    """A partition's rules: one global cache of the same capacity and policy."""
    return rules.with_(scope=Scope.GLOBAL, route=None, instances=1, capacity_per_tenant=False)


def merge(chains: BlockChains, parts: Partitions, groups: Sequence[np.ndarray],
          results: Sequence[ReplayResult]) -> ReplayResult:
    """Scatter the partitions' per-request results back to their rows (exact)."""
    n = chains.num_requests
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)
    for rows, result in zip(groups, results, strict=True):
        hit_blocks[rows] = result.hit_blocks
        hit_tokens[rows] = result.hit_tokens
    return ReplayResult(
        hit_blocks=hit_blocks,
        hit_tokens=hit_tokens,
        recompute_tokens=chains.prompt_tokens - hit_tokens,
        instance=None if parts.instance is None else np.asarray(parts.instance, dtype=np.int64),
        num_instances=parts.num_instances,
        evicted_blocks=sum(r.evicted_blocks for r in results),
        inserted_blocks=sum(r.inserted_blocks for r in results),
        rejected_requests=sum(r.rejected_requests for r in results),
    )


def replay_many(jobs: Sequence[ReplayJob], runner: Runner) -> list[ReplayResult]:
    """Run several replays at once: every partition of every job goes out in one batch.

    A job without partitions (or with a reason instead of codes) runs as one task. Dask takes
    the partitions one at a time, each built just before it is shipped and dropped after (the
    whole set beside the chains was 2.3 GB more at 1e10 tokens); worker processes take them
    all at once, each split built once for the jobs that share it.
    """
    if isinstance(runner, _Serial):
        return _replay_many_here(jobs)
    lazy = isinstance(runner, _Dask)
    tasks: list[tuple[Any, ...] | Callable[[], tuple[Any, ...]]] = []
    plan: list[tuple[int, int, list[np.ndarray] | None]] = []
    splits: list[tuple[BlockChains, np.ndarray, list[BlockChains] | None,
                       list[np.ndarray]]] = []
    runs: tuple[BlockChains, IdRuns] | None = None  # the ids Dask's partitions are cut from
    for job in jobs:
        if job.partitions is None or job.partitions.codes is None:
            plan.append((len(tasks), 1, None))
            tasks.append((job.chains, job.rules, job.instance_codes, job.arrival_s,
                          job.finish_s))
            continue
        codes = job.partitions.codes
        # The scope and capacity replays of a waterfall split the same chains the same way.
        done = _same_split(splits, job.chains, codes)
        if done is None:
            groups = partition_rows(codes)
            done = (job.chains, codes,
                    None if lazy else [sub_chains(job.chains, rows) for rows in groups], groups)
            splits.append(done)
        subs, groups = done[2], done[3]
        plan.append((len(tasks), len(groups), groups))
        one = _one_cache(job.rules)
        if subs is None:
            if runs is None or runs[0] is not job.chains:
                runs = (job.chains, IdRuns.of(job.chains.ids))
            tasks.extend(functools.partial(_partition_task, job.chains, runs[1], rows, one)
                         for rows in groups)
        else:
            tasks.extend((sub, one, None, None, None) for sub in subs)
    items = (task() if callable(task) else task for task in tasks)
    # NOTE: one task alone gains nothing from a worker and would pay for shipping its chains.
    results = ([_run_task(*next(items))] if len(tasks) == 1
               else runner.map(_run_task, items if lazy else list(items)))
    out = []
    for job, (start, count, split_groups) in zip(jobs, plan, strict=True):
        if split_groups is None:
            out.append(results[start])
        else:
            assert job.partitions is not None
            out.append(merge(job.chains, job.partitions, split_groups,
                             results[start:start + count]))
    return out


def _partition_task(chains: BlockChains, runs: IdRuns | None, rows: np.ndarray,
                    rules: ReplayRules) -> tuple[Any, ...]:
    """The task of one partition for Dask: its requests under one cache of `rules`, their ids
    cut from `runs` (the chains' ids as runs, `compact.py`) as they are in the whole trace,
    for the worker to renumber (`_run_task`). Neither the partition's flat ids nor its
    renumbering's table is made here: shipped flat, each of the four instances' partitions at
    1e10 tokens was 0.58 GB of ids and 0.24 GB of table beside the chains (`diagnose --dask
    local` at 4.75 GiB). Chains with output ids go renumbered, as runs."""
    if runs is None or chains.output_ids is not None:
        return (CompactChains.of(sub_chains(chains, rows)), rules, None, None, None)
    rows = np.asarray(rows, dtype=np.int64)
    base = np.asarray(chains.offsets, dtype=np.int64)
    frame = replace(chains, offsets=offsets_of(base[rows + 1] - base[rows]),
                    ids=np.zeros(0, dtype=np.int32),
                    last_block_tokens=chains.last_block_tokens[rows],
                    max_hit_blocks=chains.max_hit_blocks[rows],
                    prompt_tokens=chains.prompt_tokens[rows])
    part = CompactChains(frame=frame, runs=runs.segments(base[rows], base[rows + 1]))
    return (part, rules, None, None, None)


def _replay_many_here(jobs: Sequence[ReplayJob]) -> list[ReplayResult]:
    """`replay_many` in this process, partition by partition: one partition's sub-chains alive
    at a time, replayed for every job that splits the same chains the same way (a waterfall's
    scope and capacity replays), then dropped. Building them all first, as the workers need,
    held a second copy of the chains: at 1e10 tokens 4.7 GB more at the peak."""
    out: dict[int, ReplayResult] = {}
    shared: list[tuple[BlockChains, np.ndarray, list[int]]] = []
    for j, job in enumerate(jobs):
        if job.partitions is None or job.partitions.codes is None:
            out[j] = _run_task(job.chains, job.rules, job.instance_codes, job.arrival_s,
                               job.finish_s)
            continue
        codes = job.partitions.codes
        same = _same_split(shared, job.chains, codes)
        if same is None:
            shared.append((job.chains, codes, [j]))
        else:
            same[2].append(j)
    for chains, codes, members in shared:
        groups = partition_rows(codes)
        parts: dict[int, list[ReplayResult]] = {j: [] for j in members}
        for rows in groups:
            sub = sub_chains(chains, rows)
            for j in members:
                parts[j].append(_run_task(sub, _one_cache(jobs[j].rules), None, None, None))
            del sub
        for j in members:
            partitions = jobs[j].partitions
            assert partitions is not None
            out[j] = merge(chains, partitions, groups, parts[j])
    return [out[j] for j in range(len(jobs))]


def _same_split(splits: Sequence[Any], chains: BlockChains, codes: np.ndarray) -> Any | None:
    """The entry of `splits` ((chains, codes, ...) tuples) that splits these very chains by
    the same codes, if any."""
    return next((s for s in splits if s[0] is chains and np.array_equal(s[1], codes)), None)
