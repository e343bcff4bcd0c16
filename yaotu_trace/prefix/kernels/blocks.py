"""Block chains: every request's cacheable prompt blocks as dense chain ids (spec §2).

A block's identity is its whole chain `(namespace, tokens of blocks 1..k)`. `build_block_chains`
turns flat prompt arrays into `BlockChains`, where equal ids mean equal chains, numbered densely
in order of first appearance. Everything downstream (the replay engine, the capacity sweep)
works on these int32 ids and never looks at tokens again.

Hashing. Each unit (a token, or a source block id) with value `v` at position `p` of its
request contributes `f(v, p) = mix(v·K1 + p·K2 + K0)` (splitmix64 finalizer `mix`; odd random
multipliers K1, K2 and offset K0 drawn per lane from the seed). A chain's hash is
`mix(Σ f over its units + namespace term)`: a segmented prefix sum, so one compiled pass over the
units hashes every block of every request, requests in parallel. Two lanes with independent keys
are computed. Lane A (64 bits) is looked up in an open-addressing table that
assigns the dense ids; lane B is stored per dense id and checked on every later occurrence, so a
lane-A collision (two different chains, one id) is detected rather than silently merging two
continuations. On detection the build re-runs with fresh keys; it raises after three tries.

Collision odds. With N distinct chains, lane A alone collides with probability ≈ N²/2⁶⁵:
about 2.7 % at N = 1e9 (1e-5 at 1e6 — a trace of 1e9 blocks is ~1.6e10 tokens at B = 16).
An undetected collision needs lane B to collide on the same pair too: ≈ N²/2¹²⁹ ≈ 1.5e-21 at
N = 1e9. The keys derive from `rules.seed`; a different seed defeats crafted inputs.

The layout around the hashing (`BlockChains`, block counts, retries, the output split) is in
`chains`, shared with the numpy passes (`numpy_passes`). Compiled with numba (`cache=True`): the
cache directory must be writable; for read-only installs set `NUMBA_CACHE_DIR` to a writable
folder. Dtypes are pinned at the boundary (int64 offsets and values, int32 ids) so one compiled
signature serves every call.

Streamed chains (`build_block_chains_streaming`): a Parquet content column (`stream.py`) is
hashed batch by batch by the same kernel (requests in parallel), and numbered by a table that
persists across batches and is sized once from the prompt lengths. Ids, lane-B checks and
collision retries are those of the in-memory path, so the chains are identical; only
block-level arrays (~40 bytes per block) and one batch of ids are ever held.
"""


from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

from yaotu_trace.data.parquet_file import give_back_read_memory
from yaotu_trace.errors import ResourceLimitError, YaotuError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import (
    HASH_TRIES,
    MAX_IDS,
    MIX_MUL_1,
    MIX_MUL_2,
    MIX_SHIFT_1,
    MIX_SHIFT_2,
    MIX_SHIFT_3,
    NAMESPACE_SALT,
    PARTIAL_SALT,
    BlockChains,
    BlockLayout,
    ChainKernels,
    PromptContent,
    chain_layout,
    hash_keys,
    hit_cap,
    last_block_tokens,
    offsets_of,
)
from yaotu_trace.prefix.kernels.stream import ParquetPrompts
from yaotu_trace.prefix.rules import ReplayRules


@nb.njit(cache=True, inline="always")
def mix(z: np.uint64) -> np.uint64:
    """splitmix64's finalizer (the hash's mixing step, also the ideal pass's)."""
    z = (z ^ (z >> MIX_SHIFT_1)) * MIX_MUL_1
    z = (z ^ (z >> MIX_SHIFT_2)) * MIX_MUL_2
    return z ^ (z >> MIX_SHIFT_3)


@nb.njit(cache=True, parallel=True, nogil=True)
def _chain_hashes(
    unit_offsets: np.ndarray,  # int64 n+1: units (tokens or source ids) per request
    values: np.ndarray,  # int64 (or int32 tokens) units
    units_per_block: np.int64,
    full_blocks: np.ndarray,  # int64 per request
    partial_weight: np.ndarray,  # int64 per request; > 0 adds a trailing partial block
    ns_codes: np.ndarray,  # int64 per request
    block_offsets: np.ndarray,  # int64 n+1 into the outputs
    keys: np.ndarray,  # uint64 [K0, K1, K2] of lane A, then of lane B
    out_a: np.ndarray,  # uint64
    out_b: np.ndarray,  # uint64
) -> None:
    # Unit u of a request adds mix(v·K1 + K0 + u·K2) to its lane's running sum. The sums are
    # taken block by block, with no branch inside a block's loop, so the compiler vectorises
    # it (64-bit multiplies in SIMD); addition mod 2^64 makes the grouping irrelevant.
    n = len(full_blocks)
    for i in nb.prange(n):
        base = unit_offsets[i]
        units = unit_offsets[i + 1] - base
        a0, a1, a2 = keys[0], keys[1], keys[2]
        b0, b1, b2 = keys[3], keys[4], keys[5]
        ns = np.uint64(ns_codes[i]) * NAMESPACE_SALT
        sum_a = mix(ns ^ a0)
        sum_b = mix(ns ^ b0)
        out = block_offsets[i]
        upb = units_per_block
        for k in range(full_blocks[i]):
            first = k * upb
            part_a = np.uint64(0)
            part_b = np.uint64(0)
            for t in range(upb):
                v = np.uint64(values[base + first + t])
                u = np.uint64(first + t)
                part_a += mix(v * a1 + (a0 + u * a2))
                part_b += mix(v * b1 + (b0 + u * b2))
            sum_a += part_a
            sum_b += part_b
            out_a[out + k] = mix(sum_a + a0)
            out_b[out + k] = mix(sum_b + b0)
        if partial_weight[i] > 0:
            for t in range(full_blocks[i] * upb, units):
                v = np.uint64(values[base + t])
                u = np.uint64(t)
                sum_a += mix(v * a1 + (a0 + u * a2))
                sum_b += mix(v * b1 + (b0 + u * b2))
            w = np.uint64(partial_weight[i]) ^ PARTIAL_SALT
            k = full_blocks[i]
            out_a[out + k] = mix(sum_a + mix(w ^ a0) + a0)
            out_b[out + k] = mix(sum_b + mix(w ^ b0) + b0)


def _dense_ids(hash_a: np.ndarray, hash_b: np.ndarray, table_bits: np.int64
               ) -> tuple[np.ndarray, int, int]:
    """Number lane-A hashes densely in first-appearance order; verify lane B per id. Returns
    (ids, distinct, collisions). The table is made here: an array allocated in compiled code
    compiles numba's `np.full` with it on a first run."""
    size = 1 << int(table_bits)
    ids = np.empty(len(hash_a), dtype=np.int32)
    distinct, collisions = _number_ids(hash_a, hash_b, np.empty(size, dtype=np.uint64),
                                       np.full(size, -1, dtype=np.int32),
                                       np.empty(len(hash_a), dtype=np.uint64), ids)
    return ids, int(distinct), int(collisions)


@nb.njit(cache=True)
def _number_ids(hash_a, hash_b, keys, slots, lane_b, ids):  # pragma: no cover - compiled
    """`_dense_ids` on its table (`keys`, `slots`: −1 free), the first lane-B hash per id and
    the ids it fills; returns (distinct, collisions)."""
    size = np.int64(slots.size)
    mask = np.uint64(size - 1)
    n = len(hash_a)
    distinct = 0
    collisions = 0
    for j in range(n):
        h = hash_a[j]
        slot = np.int64(h & mask)
        while True:
            d = slots[slot]
            if d < 0:
                slots[slot] = distinct
                keys[slot] = h
                lane_b[distinct] = hash_b[j]
                ids[j] = distinct
                distinct += 1
                break
            if keys[slot] == h:
                if lane_b[d] != hash_b[j]:
                    collisions += 1
                ids[j] = d
                break
            slot = (slot + 1) & np.int64(size - 1)
    return distinct, collisions


@nb.njit(cache=True)
def _interleave(off_a: np.ndarray, val_a: np.ndarray, off_b: np.ndarray, val_b: np.ndarray):
    """Per request, the units of a followed by those of b (prompt then output)."""
    n = len(off_a) - 1
    off = np.empty(n + 1, dtype=np.int64)
    off[0] = 0
    for i in range(n):
        off[i + 1] = off[i] + (off_a[i + 1] - off_a[i]) + (off_b[i + 1] - off_b[i])
    out = np.empty(off[n], dtype=np.int64)
    for i in range(n):
        p = off[i]
        for j in range(off_a[i], off_a[i + 1]):
            out[p] = val_a[j]
            p += 1
        for j in range(off_b[i], off_b[i + 1]):
            out[p] = val_b[j]
            p += 1
    return off, out


@nb.njit(cache=True, nogil=True)
def _dense_ids_into(hash_a, hash_b, table, lane_a, lane_b, ids, start, distinct, last):
    """`_dense_ids` over one batch of a streamed build, with the table kept across batches.

    `lane_a[d]` is id d's lane A, `lane_b[d]` the high half of its lane B (a check, not part of
    the key: a lane-A collision still goes unseen only with odds of 2^-32, and the half saves 4
    bytes an id, 0.22 GiB at 1e10 tokens); `table` (open addressing on lane A) holds id + 1 per
    slot (0 = empty), 4 bytes, so it stays small: fresh memory costs its first touch on these
    machines, and a lookup misses the caches anyway. Most blocks repeat an earlier chain whose
    ids were numbered consecutively when it first appeared, so the id after the previous
    block's (`last` + 1) is tried first, in `lane_a` (sequential memory); only when its lane A
    differs does the lookup probe the table. Either way lane B is then checked.
    Returns (distinct, collisions, last id).
    """
    mask = np.int64(table.shape[0] - 1)
    collisions = 0
    for j in range(len(hash_a)):
        h = hash_a[j]
        guess = last + 1
        if guess < distinct and lane_a[guess] == h:
            d = guess
        else:
            slot = np.int64(h & np.uint64(mask))
            while True:
                e = table[slot]
                if e == 0:
                    table[slot] = distinct + 1
                    lane_a[distinct] = h
                    lane_b[distinct] = np.uint32(hash_b[j] >> np.uint64(32))
                    d = distinct
                    distinct += 1
                    break
                if lane_a[e - 1] == h:
                    d = np.int64(e) - 1
                    break
                slot = (slot + 1) & mask
        if lane_b[d] != np.uint32(hash_b[j] >> np.uint64(32)):
            collisions += 1
        ids[start + j] = d
        last = d
    return distinct, collisions, last


@nb.njit(cache=True, nogil=True)
def _rehash(lane_a, distinct, new):
    """Fill a larger table with ids 0 .. distinct − 1 (ids unchanged)."""
    mask = np.int64(new.shape[0] - 1)
    for d in range(distinct):
        slot = np.int64(lane_a[d] & np.uint64(mask))
        while new[slot] != 0:
            slot = (slot + 1) & mask
        new[slot] = d + 1


@nb.njit(cache=True, nogil=True)
def _append_runs(ids, starts, lengths, count):
    """`ids` appended to `count` runs of consecutive ids (`starts[r]`, `starts[r] + 1`, … for
    `lengths[r]` ids; the last run extended where the first id follows it); returns the new
    count. Room for one run per id must be there."""
    for j in range(ids.size):
        d = ids[j]
        if count > 0 and d == starts[count - 1] + lengths[count - 1]:
            lengths[count - 1] += 1
        else:
            starts[count] = d
            lengths[count] = 1
            count += 1
    return count


@nb.njit(cache=True, nogil=True)
def _expand_runs(starts, lengths, count, out):
    """The ids of the first `count` runs, in order, into `out`."""
    p = 0
    for r in range(count):
        d = starts[r]
        for k in range(lengths[r]):
            out[p] = d + k
            p += 1


# Runs held before a trace whose ids do not run (more than one run per four ids) is held flat.
RUN_SLACK = 1 << 16


class _RunIds:
    """A streamed build's ids, held as runs of consecutive ids while they hash.

    Ids are numbered by first appearance, so a request's new blocks get consecutive ids, and a
    prefix it shares repeats the runs of the request that first had it: on `benchmarks/scale.py`'s
    trace about five runs a request, where it has 250 blocks. Held so (8 bytes a run), the ids
    cost next to nothing while the id table and its lanes are alive, and are written out whole
    (4 bytes an id) only after the table is gone: at 1e10 tokens the build held 2.3 GiB of ids
    beside 1.2 GiB of table and lanes. A trace whose ids do not run (more than one run per four
    ids) is held flat from then on, as before.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound  # ids at most
        self.filled = 0
        self.count = 0
        self.starts = np.empty(1 << 16, dtype=np.int32)
        self.lengths = np.empty(1 << 16, dtype=np.int32)
        self.flat: np.ndarray | None = None

    def add(self, ids: np.ndarray) -> None:
        """The next ids, in order."""
        n = ids.size
        if self.flat is None:
            if self.count + n > self.starts.size:
                rows = max(2 * self.starts.size, self.count + n)
                self.starts = np.resize(self.starts, rows)
                self.lengths = np.resize(self.lengths, rows)
            self.count = int(_append_runs(ids, self.starts, self.lengths, np.int64(self.count)))
            if self.count > (self.filled + n) // 4 + RUN_SLACK:
                self.flat = np.empty(self.bound, dtype=np.int32)
                _expand_runs(self.starts, self.lengths, np.int64(self.count), self.flat)
                self.starts = self.lengths = np.empty(0, dtype=np.int32)
        else:
            self.flat[self.filled:self.filled + n] = ids
        self.filled += n

    def ids(self) -> np.ndarray:
        """Every id added, one int32 each."""
        if self.flat is not None:
            return self.flat if self.filled == self.bound else self.flat[:self.filled].copy()
        out = np.empty(self.filled, dtype=np.int32)
        _expand_runs(self.starts, self.lengths, np.int64(self.count), out)
        return out


def _compiled_interleave(*args: Any) -> Any:
    return _interleave(*args)


def _compiled_hashes(layout: BlockLayout, keys: np.ndarray, out_a: np.ndarray,
                     out_b: np.ndarray) -> None:
    _chain_hashes(layout.unit_offsets, layout.values, np.int64(layout.units_per_block),
                  layout.full_blocks, layout.partial_tokens, layout.namespaces,
                  layout.block_offsets, keys, out_a, out_b)


def _compiled_ids(*args: Any) -> Any:
    return _dense_ids(*args)


# Looked up at call time, so a test can stand in for one kernel.
COMPILED = ChainKernels(interleave=_compiled_interleave, chain_hashes=_compiled_hashes,
                        dense_ids=_compiled_ids)


def build_block_chains(content: PromptContent, namespace_codes: np.ndarray | None,
                       rules: ReplayRules) -> BlockChains:
    """Chain every request's prompt into dense block ids under `rules` (spec §2).

    `namespace_codes` (int, per request) separate caches: model/adapter, plus tenant when
    isolated. Output content, when given with `rules.cache_outputs`, adds the full blocks of
    prompt + output as blocks to insert (token traces only).
    """
    return chain_layout(content, namespace_codes, rules, COMPILED)


# ---------------------------------------------------------------- streamed chains


class _IdTable:
    """Chain hashes → dense ids: an open-addressing table at most half full, and lanes by id.

    The lanes are reserved for an estimate of the distinct blocks (a fraction of the upper
    bound the prompt lengths give; rows never written cost no memory), the table sized for a
    quarter of it and doubled when a batch could overfill it: it ends at the smallest power of
    two that holds the trace's distinct blocks half full, where sizing it for the estimate kept
    a table twice that (1 GiB at 1e10 tokens, with 6e7 distinct blocks of 6.2e8). Memory
    follows the distinct blocks of the trace (12 bytes each plus at most 16 of table) rather
    than its total blocks. Ids do not depend on the sizes.
    """

    def __init__(self, expected: int) -> None:
        self.table = np.zeros(_table_slots(expected // 4), dtype=np.int32)
        self.lane_a = np.zeros(max(expected, 1 << 12), dtype=np.uint64)
        self.lane_b = np.zeros(max(expected, 1 << 12), dtype=np.uint32)
        self.distinct = 0
        self.last = -1

    def reserve(self, more: int) -> None:
        """Room for `more` new ids."""
        need = self.distinct + more
        if need > self.lane_a.shape[0]:
            rows = max(need, 2 * self.lane_a.shape[0])
            lane_a = np.zeros(rows, dtype=np.uint64)
            lane_a[:self.distinct] = self.lane_a[:self.distinct]
            lane_b = np.zeros(rows, dtype=np.uint32)
            lane_b[:self.distinct] = self.lane_b[:self.distinct]
            self.lane_a, self.lane_b = lane_a, lane_b
        if need * 2 > self.table.shape[0]:
            grown = np.zeros(_table_slots(need), dtype=np.int32)
            _rehash(self.lane_a, np.int64(self.distinct), grown)
            self.table = grown


def _table_slots(entries: int) -> int:
    return 1 << max(12, int(np.ceil(np.log2(max(entries, 1) * 2 + 1))))


def stream_chain_bytes(blocks: int) -> int:
    """Worst-case memory of streamed chains: an id per block, the table at its largest (lane A
    and half of lane B per id, every block distinct, and its slots)."""
    return 16 * int(blocks) + 4 * _table_slots(int(blocks))


def build_block_chains_streaming(
    prompts: ParquetPrompts,
    namespace_codes: np.ndarray | None,
    rules: ReplayRules,
) -> BlockChains:
    """`build_block_chains` of a Parquet content column, read batch by batch (no outputs).

    Gives the same `BlockChains` as the in-memory path on the same trace and rules. Output
    blocks are never streamed: `prepare` reads a trace whose outputs are to be cached fully, so
    here `rules.cache_outputs` has nothing to add (as in memory without output ids).
    """
    source = prompts.source_block_size
    rules.check_source_block_size(source)
    prompt_len = np.asarray(prompts.prompt_len, dtype=np.int64)
    n = len(prompt_len)
    block = int(rules.block_size_tokens)
    unit = 1 if source is None else int(source)
    per_block = block // unit
    ns = (np.zeros(n, dtype=np.int64) if namespace_codes is None
          else np.ascontiguousarray(namespace_codes, dtype=np.int64))
    bound = int((prompt_len // block).sum()) + (n if rules.cache_partial_blocks else 0)
    if bound > MAX_IDS:
        raise ResourceLimitError(
            f"up to {bound} blocks exceed the 2^31 ids this replay supports; use a larger "
            "--block-size"
        )
    # Worst case (every block distinct), so a run that starts also finishes.
    memory.require(stream_chain_bytes(bound), f"chaining {bound:,} blocks of {block} token(s)",
                   "use a larger --block-size")
    give_back_read_memory()  # the build's ids and table are the run's peak
    for attempt in range(HASH_TRIES):
        keys = hash_keys(rules.seed, attempt)
        built = _stream_once(prompts, ns, rules, keys, block, per_block, bound)
        if built is not None:
            ids, last_tokens, distinct, counts = built
            break
    else:
        raise YaotuError(f"block hashing collided {HASH_TRIES} times in a row ({bound} blocks); "
                         "this should not happen: report it with the trace")
    return BlockChains(
        offsets=offsets_of(counts), ids=ids, last_block_tokens=last_tokens,
        num_distinct=int(distinct),
        max_hit_blocks=hit_cap(counts, prompt_len, block, rules.last_token_rule),
        prompt_tokens=prompt_len, block_size_tokens=block, seed=int(rules.seed))


def _stream_once(prompts: ParquetPrompts, ns: np.ndarray, rules: ReplayRules, keys: np.ndarray,
                 block: int, per_block: int, bound: int
                 ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray] | None:
    """One pass with one set of keys; None when lane B caught a lane-A collision."""
    n = len(prompts.prompt_len)
    unit = block // per_block
    table = _IdTable(bound // 8)
    runs = _RunIds(bound)
    batch_ids = np.empty(0, dtype=np.int32)
    last_tokens = np.full(n, block, dtype=np.int32)
    counts = np.zeros(n, dtype=np.int64)
    units_all = np.zeros(n, dtype=np.int64)
    collisions = 0
    lanes = (np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64))
    for batch in prompts.batches():
        rows = slice(batch.row0, batch.row0 + len(batch.offsets) - 1)
        plen = prompts.prompt_len[rows]
        units = np.diff(batch.offsets)
        units_all[rows] = units
        full = np.minimum(units, plen // unit) // per_block
        partial = np.zeros(len(units), dtype=np.int64)
        if rules.cache_partial_blocks:
            rest = np.minimum(plen, units * unit) - full * block
            partial = np.where(units > full * per_block, rest, 0).astype(np.int64)
        hashed = full + (partial > 0)
        local = offsets_of(hashed)
        total = int(local[-1])
        if total > len(lanes[0]):  # reused: fresh memory costs its first touch
            lanes = (np.empty(2 * total, dtype=np.uint64), np.empty(2 * total, dtype=np.uint64))
        hash_a, hash_b = lanes[0][:total], lanes[1][:total]
        _chain_hashes(batch.offsets, batch.values, np.int64(per_block), full, partial,
                      ns[rows], local, keys, hash_a, hash_b)
        table.reserve(total)
        if total > batch_ids.size:
            batch_ids = np.empty(2 * total, dtype=np.int32)
        distinct, found, last = _dense_ids_into(hash_a, hash_b, table.table, table.lane_a,
                                                table.lane_b, batch_ids, np.int64(0),
                                                np.int64(table.distinct), np.int64(table.last))
        table.distinct, table.last = int(distinct), int(last)
        runs.add(batch_ids[:total])
        collisions += int(found)
        last_tokens[rows] = last_block_tokens(partial, block)
        counts[rows] = hashed
    prompts.unit_offsets = offsets_of(units_all)
    if collisions:
        return None
    distinct = table.distinct
    del table, lanes, batch_ids
    give_back_read_memory()  # the readers' buffers: the replays that follow are the peak now
    return runs.ids(), last_tokens, distinct, counts
