"""vLLM's block pool, request by request: the replay of `--preset vllm --capacity N` (spec §5).

The clean model (`engine.replay`) keeps N cached full blocks in one LRU list. vLLM 0.33.0's
`KVCacheManager` with `num_gpu_blocks = N` differs in ways that change hits at a finite
capacity, and this module reproduces each of them, following `vllm/v1/core/block_pool.py`
(`BlockPool`, `BlockHashToBlockMap`), `kv_cache_utils.py` (`FreeKVCacheBlockQueue`),
`single_type_kv_cache_manager.py` (`FullAttentionManager`, `get_num_blocks_to_allocate`,
`free`) and `kv_cache_manager.py` (`get_computed_blocks`, `allocate_slots`):

- Block 0 is the null block: N − 1 blocks are usable. The free queue starts as 1..N−1.
- Lookup: the leading run of chain ids that have a cached copy, capped by `max_hit_blocks`
  (the last-token rule); a chain with several copies answers with the first one stored.
- Admission: a request needs ceil(n/B) − hit new blocks plus its hit blocks that sit in the
  free queue; more than the free queue holds and `allocate_slots` returns None: the request is
  rejected (hit 0, nothing touched, counted in `rejected_requests`).
- Allocation: hit blocks are taken out of the free queue first, then the new blocks are popped
  from its head; a popped block that carries a hash loses it (that is vLLM's eviction). Every
  new full block gets its chain's hash, even when another physical block already holds it (a
  second copy: vLLM never deduplicates). The trailing partial block gets none.
- Free, in reverse block order: hashed blocks are appended to the tail (LRU), hashless ones
  (the partial block) prepended to the head, to be reused first.

Exact for the protocol of `benchmarks/engines/golden_vllm.py` (requests one at a time, each
freed before the next, no preemption, no speculative decoding, prompts only), checked per
request against vLLM itself in `tests/prefix/test_exact_vllm.py`. `evicted_blocks` counts
hashes removed from the map, `inserted_blocks` hash insertions (copies included).

One compiled loop over the requests with a helper per phase, O(1) per block operation: the
free queue is a doubly linked list over physical block ids, each chain id a linked list of its
copies in insertion order. Physical ids are handed out in vLLM's order (1, 2, ...), so only the
ones a trace can reach are stored: the never-used tail of the pool is one sentinel node (id 0,
the null block's, which is never queued) standing for the range that has not been handed out
yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from yaotu_trace.errors import ConfigError, ResourceLimitError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.result import ReplayResult, hits_result


@dataclass(frozen=True, slots=True, kw_only=True)
class PhysicalBlocks:
    """The physical blocks of each request in vLLM's pool: `blocks[offsets[i]:offsets[i+1]]`
    (its hit blocks first; -1 throughout when the pool refused it); ids below `num_nodes`."""

    blocks: np.ndarray  # int32
    offsets: np.ndarray  # int64
    num_nodes: int


_VIRGIN = np.int32(0)  # the sentinel node: blocks next_virgin..N-1, never handed out yet
_MAX_NODES = 2**31 - 1  # physical ids and links are int32


@nb.njit(cache=True)
def _lookup(ids, start, cap, chead, in_free, owned):
    """`get_computed_blocks`: the leading run of chain ids with a cached copy, at most `cap`,
    their first copies written to `owned`. Returns (hit blocks, how many of them are free)."""
    h = 0
    queued_hits = 0
    while h < cap and chead[ids[start + h]] >= 0:
        p = chead[ids[start + h]]
        owned[h] = p
        queued_hits += np.int64(in_free[p])
        h += 1
    return h, queued_hits


@nb.njit(cache=True)
def _take_hits(owned, h, in_free, fprev, fnext, fhead, ftail, num_free):
    """Touch: the hit blocks that sit in the free queue leave it, before any pop.
    Returns the queue's ends and the free count."""
    for k in range(h):
        p = owned[k]
        if in_free[p] != 0:
            a = fprev[p]
            b = fnext[p]
            if a >= 0:
                fnext[a] = b
            else:
                fhead = b
            if b >= 0:
                fprev[b] = a
            else:
                ftail = a
            in_free[p] = 0
            num_free -= 1
    return fhead, ftail, num_free


@nb.njit(cache=True)
def _allocate(ids, start, full, h, total, owned, in_free, fprev, fnext, block_hash, cprev,
              cnext, chead, ctail, fhead, ftail, next_virgin, num_free, num_gpu_blocks):
    """Blocks h..total-1 of the request popped from the free queue's head, a popped hashed
    block losing its hash; each new full block (below `full`) gets its chain's hash.
    Returns (queue ends, next virgin id, free count, evicted, inserted).

    The block operations stay written out: as helpers inlined into this one the replay ran
    about 5x slower (`benchmarks/prefix_vs.py --only vllm`)."""
    evicted = 0
    inserted = 0
    for k in range(h, total):  # pop from the head; a popped hashed block is evicted
        p = fhead
        if p == _VIRGIN:
            p = next_virgin
            next_virgin += 1
            if next_virgin == num_gpu_blocks:  # the range is used up: drop the sentinel
                b = fnext[_VIRGIN]
                fhead = b
                if b >= 0:
                    fprev[b] = -1
                else:
                    ftail = np.int32(-1)
        else:
            b = fnext[p]
            fhead = b
            if b >= 0:
                fprev[b] = -1
            else:
                ftail = np.int32(-1)
            in_free[p] = 0
            c = block_hash[p]
            if c >= 0:
                a = cprev[p]
                b = cnext[p]
                if a >= 0:
                    cnext[a] = b
                else:
                    chead[c] = b
                if b >= 0:
                    cprev[b] = a
                else:
                    ctail[c] = a
                block_hash[p] = -1
                evicted += 1
        num_free -= 1
        owned[k] = p
        if k < full:  # a new full block is cached, a second copy or not
            c = ids[start + k]
            block_hash[p] = c
            t = ctail[c]
            cprev[p] = t
            cnext[p] = -1
            if t >= 0:
                cnext[t] = p
            else:
                chead[c] = p
            ctail[c] = p
            inserted += 1
    return fhead, ftail, next_virgin, num_free, evicted, inserted


@nb.njit(cache=True)
def _free(owned, total, block_hash, in_free, fprev, fnext, fhead, ftail, num_free):
    """`free`, in reverse block order: the hashless blocks, as a group in that order, go to the
    head (prepending them one by one from the front does that), the hashed to the tail.
    Returns the queue's ends and the free count."""
    for k in range(total):
        p = owned[k]
        if block_hash[p] < 0:
            fprev[p] = -1
            fnext[p] = fhead
            if fhead >= 0:
                fprev[fhead] = p
            else:
                ftail = p
            fhead = p
            in_free[p] = 1
            num_free += 1
    for k in range(total - 1, -1, -1):
        p = owned[k]
        if block_hash[p] >= 0:
            fprev[p] = ftail
            fnext[p] = -1
            if ftail >= 0:
                fnext[ftail] = p
            else:
                fhead = p
            ftail = p
            in_free[p] = 1
            num_free += 1
    return fhead, ftail, num_free


@nb.njit(cache=True, nogil=True)
def _vllm_pool(offsets, ids, max_hit, total_blocks, num_gpu_blocks, physical, links, copies,
               in_free, owned, hit_blocks):
    """Sequential replay of vLLM's block pool; returns (hit_blocks, evicted, inserted,
    rejected).

    `total_blocks[i]` = ceil(n/B) blocks request i allocates (its full blocks are
    `ids[offsets[i]:offsets[i+1]]`, a partial one after them when there are more);
    `links` has a column per physical id the trace can reach (ids 1.. are handed out in order).
    Per request: look up, admit or reject, take the hit blocks out of the free queue,
    allocate, free. The list operations are written out, with int32 links and the free
    queue's ends passed as scalars: the shared list helpers over arrays of list ends run about
    10x slower here. A non-empty `physical` (one slot per block of `total_blocks`, -1 filled)
    receives each admitted request's physical blocks in order, for `residency.py`.

    The arrays come from the caller (`_pool_arrays`): an array allocated in compiled code
    compiles numba's own `np.full` with it, and the pass compiled in 1.0–1.1 s on a first run
    where it took 1.6–2.1 s with them.
    """
    n = len(offsets) - 1
    # Free queue over physical ids; the sentinel _VIRGIN stands for the unused range.
    fprev = links[0]
    fnext = links[1]
    fhead = np.int32(-1)
    ftail = np.int32(-1)
    next_virgin = np.int64(1)  # as `_allocate` returns it: one signature of it, not two
    if num_gpu_blocks > 1:
        fhead = np.int32(_VIRGIN)
        ftail = np.int32(_VIRGIN)
    num_free = num_gpu_blocks - 1
    # The hash of each physical block (a chain id, -1 for none) and, per chain id, its copies
    # in insertion order (the first answers a lookup).
    block_hash = links[2]
    cprev = links[3]
    cnext = links[4]
    chead = copies[0]
    ctail = copies[1]
    evicted = 0
    inserted = 0
    rejected = 0
    log = 0
    for i in range(n):
        start = offsets[i]
        full = offsets[i + 1] - start
        total = total_blocks[i]
        log_at = log
        log += total
        if total == 0:
            continue
        h, queued_hits = _lookup(ids, start, max_hit[i], chead, in_free, owned)
        if total - h + queued_hits > num_free:
            rejected += 1
            continue
        hit_blocks[i] = h
        fhead, ftail, num_free = _take_hits(owned, h, in_free, fprev, fnext, fhead, ftail,
                                            num_free)
        fhead, ftail, next_virgin, num_free, gone, new = _allocate(
            ids, start, full, h, total, owned, in_free, fprev, fnext,
            block_hash, cprev, cnext, chead, ctail, fhead, ftail, next_virgin, num_free,
            num_gpu_blocks)
        evicted += gone
        inserted += new
        if physical.size:
            # An element loop: a slice assignment compiles numba's shape-mismatch message
            # (1.4 s of a first run).
            for b in range(total):
                physical[log_at + b] = owned[b]
        fhead, ftail, num_free = _free(owned, total, block_hash, in_free, fprev, fnext, fhead,
                                       ftail, num_free)
    return hit_blocks, evicted, inserted, rejected


def _pool_arrays(num_nodes: int, num_distinct: int, max_blocks: int, num_requests: int
                 ) -> tuple[np.ndarray, ...]:
    """`_vllm_pool`'s state, none of it linked or cached: per physical block its free-queue
    links, hash and copy links (int32, −1), per chain id its first and last copy (−1), the
    free flags, a request's blocks and the hits per request."""
    return (np.full((5, num_nodes), -1, dtype=np.int32),
            np.full((2, max(num_distinct, 1)), -1, dtype=np.int32),
            np.zeros(num_nodes, dtype=np.uint8), np.empty(max(max_blocks, 1), dtype=np.int32),
            np.zeros(num_requests, dtype=np.int64))


def replay_vllm(chains: BlockChains, num_gpu_blocks: int) -> ReplayResult:
    """Replay `chains` (built under the vllm preset's rules) through vLLM's block pool of
    `num_gpu_blocks` blocks, one global pool; per-request hits as vLLM reports them."""
    return replay_vllm_blocks(chains, num_gpu_blocks, physical=False)[0]


def replay_vllm_blocks(chains: BlockChains, num_gpu_blocks: int, *, physical: bool = True
                       ) -> tuple[ReplayResult, PhysicalBlocks | None]:
    """`replay_vllm`, and with `physical` the physical blocks each request held (the input of
    `residency.vllm_residency`)."""
    if isinstance(num_gpu_blocks, bool) or not isinstance(num_gpu_blocks, int | np.integer) or (
        num_gpu_blocks < 1
    ):
        raise ConfigError(f"capacity {num_gpu_blocks!r} must be at least 1 block "
                          "(vLLM's num_gpu_blocks; omit --capacity for an unlimited cache)")
    if chains.output_ids is not None:
        raise ConfigError("vLLM's exact replay caches prompt blocks only; drop --cache-outputs "
                          "or add --accounting clean")
    block = int(chains.block_size_tokens)
    prompt = np.asarray(chains.prompt_tokens, dtype=np.int64)
    total_blocks = np.maximum(-(-prompt // block), chains.num_blocks).astype(np.int64)
    reachable = int(total_blocks.sum())
    num_nodes = min(int(num_gpu_blocks) - 1, reachable) + 1
    if num_nodes >= _MAX_NODES:
        raise ResourceLimitError(f"{num_nodes:,} physical blocks exceed the 2^31 this replay "
                                 "supports; use a larger --block-size")
    memory.require(num_nodes * 21 + max(chains.num_distinct, 1) * 8,
                   f"vLLM's block pool over {num_nodes - 1:,} blocks",
                   "use a larger --block-size")
    log = (np.full(reachable, -1, dtype=np.int32) if physical
           else np.zeros(0, dtype=np.int32))
    hit, evicted, inserted, rejected = _vllm_pool(
        chains.offsets, chains.ids, chains.max_hit_blocks, total_blocks,
        np.int64(num_gpu_blocks), log,
        *_pool_arrays(num_nodes, chains.num_distinct, int(total_blocks.max(initial=0)),
                      chains.num_requests))
    result = hits_result(chains, hit, evicted_blocks=evicted, inserted_blocks=inserted,
                         rejected_requests=rejected)
    if not physical:
        return result, None
    offsets = np.zeros(total_blocks.size + 1, dtype=np.int64)
    np.cumsum(total_blocks, out=offsets[1:])
    return result, PhysicalBlocks(blocks=log, offsets=offsets, num_nodes=num_nodes)
