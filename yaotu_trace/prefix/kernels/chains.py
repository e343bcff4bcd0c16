"""Block chains without their kernels: the layout of every request's blocks (spec §2).

`BlockChains` and everything about a chain build that is plain array bookkeeping live here:
which units form full and partial blocks (`BlockLayout`), the per-lane keys, the retry on a
detected collision, the split into prompt and output ids and the last-token cap. The three
passes over the units (interleaving prompt and output, hashing, numbering) are given as
`ChainKernels`: numba's in `blocks` for every run, numpy's in `numpy_passes` for a small trace,
so that analysing one does not start numba. Both give the same ids, as the same code drives them.
The hash's constants are named here for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from yaotu_trace.errors import ResourceLimitError, YaotuError
from yaotu_trace.prefix import memory
from yaotu_trace.prefix.rules import ReplayRules

# splitmix64's finalizer `mix`: z ^= z >> 30; z *= MUL_1; z ^= z >> 27; z *= MUL_2; z ^= z >> 31.
MIX_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_MUL_2 = np.uint64(0x94D049BB133111EB)
MIX_SHIFT_1 = np.uint64(30)
MIX_SHIFT_2 = np.uint64(27)
MIX_SHIFT_3 = np.uint64(31)
# Salts that keep a partial block's weight and a namespace apart from any token term.
PARTIAL_SALT = np.uint64(0xD6E8FEB86659FD93)
NAMESPACE_SALT = np.uint64(0xA0761D6478BD642F)
MAX_IDS = 2**31 - 1  # dense ids are int32
HASH_TRIES = 3  # fresh keys after a detected lane-A collision, then an error


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockChains:
    """Dense chain ids of every request's cacheable blocks, in prompt order.

    Request `i`'s cacheable blocks are `ids[offsets[i]:offsets[i+1]]` (block 1 first), worth B
    tokens each but its last, worth `last_block_tokens[i]` (B, or the length of a cached
    trailing partial block). Ids are numbered in first-appearance order over the requests in
    replay order (with `--cache-outputs`: request i's prompt blocks, then its output blocks,
    then request i+1).
    `max_hit_blocks[i]` caps the hit (the last-token rule `floor((n-1)/B)` when on, else the
    number of cacheable blocks). `output_offsets`/`output_ids` are the full blocks of
    prompt + output beyond the prompt's, inserted after the lookup, when outputs are cached.
    """

    offsets: np.ndarray  # int64, n_requests + 1
    ids: np.ndarray  # int32
    last_block_tokens: np.ndarray  # int32 per request (B when it has no blocks)
    num_distinct: int
    max_hit_blocks: np.ndarray  # int64 per request
    prompt_tokens: np.ndarray  # int64 per request
    block_size_tokens: int
    output_offsets: np.ndarray | None = None  # int64, n_requests + 1
    output_ids: np.ndarray | None = None  # int32, full B-token blocks only
    seed: int = 0

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return len(self.offsets) - 1

    @property
    def num_blocks(self) -> np.ndarray:
        """Cacheable blocks per request (int64)."""
        return np.diff(self.offsets)

    @property
    def block_tokens(self) -> np.ndarray:
        """Tokens of every block (int32, one per id), built on demand: at 1e10 tokens this is
        2.3 GB, so the kernels take B and `last_block_tokens` instead."""
        tokens = np.full(len(self.ids), self.block_size_tokens, dtype=np.int32)
        blocks = self.num_blocks
        has = blocks > 0
        tokens[self.offsets[1:][has] - 1] = self.last_block_tokens[has]
        return tokens

    def leading_tokens(self, rows: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """Tokens of the first `blocks[j]` blocks of request `rows[j]` (int64): B each, and
        the last block's own count where they reach it."""
        rows = np.asarray(rows, dtype=np.int64)
        k = np.asarray(blocks, dtype=np.int64)
        tokens = k * self.block_size_tokens
        whole = (k > 0) & (k == self.offsets[rows + 1] - self.offsets[rows])
        last = self.last_block_tokens[rows[whole]].astype(np.int64)
        tokens[whole] += last - self.block_size_tokens
        return tokens

    def of_requests(self, rows: np.ndarray) -> BlockChains:
        """The requests `rows`, in order, keeping their ids (a pool sees only its own
        requests; ids stay dense over the whole trace, which the kernels allow). Prompt
        blocks only."""
        offsets, index = segment_ranges(np.asarray(self.offsets, dtype=np.int64), rows)
        return BlockChains(offsets=offsets, ids=self.ids[index],
                           last_block_tokens=self.last_block_tokens[rows],
                           num_distinct=self.num_distinct,
                           max_hit_blocks=self.max_hit_blocks[rows],
                           prompt_tokens=self.prompt_tokens[rows],
                           block_size_tokens=self.block_size_tokens, seed=self.seed)

    def with_hit_cap(self, last_token_rule: bool) -> BlockChains:
        """The same chains with the last-token rule switched on or off (ids do not change)."""
        cap = hit_cap(self.num_blocks, self.prompt_tokens, self.block_size_tokens,
                      last_token_rule)
        return replace(self, max_hit_blocks=cap)

    def full_blocks_only(self) -> BlockChains:
        """The chains a build without cached partial blocks gives: each request's trailing
        partial block dropped, the ids numbered again in first appearance. A partial block's
        hash is salted apart from every full block's (`PARTIAL_SALT`), so the full blocks'
        ids keep their order of first appearance, and are that build's ids. The hit cap is
        the last-token rule's off (`with_hit_cap` sets it); prompt blocks only."""
        B = self.block_size_tokens
        blocks = self.num_blocks
        partial = (blocks > 0) & (self.last_block_tokens < B)
        keep = np.ones(len(self.ids), dtype=bool)
        keep[self.offsets[1:][partial] - 1] = False
        kept = self.ids[keep]
        present = np.zeros(self.num_distinct, dtype=bool)
        present[kept] = True
        renumbered = (np.cumsum(present) - 1)[kept]
        full = blocks - partial
        return BlockChains(
            offsets=offsets_of(full), ids=renumbered.astype(np.int32),
            last_block_tokens=np.full(self.num_requests, B, dtype=np.int32),
            num_distinct=int(np.count_nonzero(present)), max_hit_blocks=full.astype(np.int64),
            prompt_tokens=self.prompt_tokens, block_size_tokens=B, seed=self.seed)

    def request_of_block(self) -> np.ndarray:
        """Request index of every entry of `ids` (int64)."""
        return np.repeat(np.arange(self.num_requests, dtype=np.int64), self.num_blocks)

    # The reads a pass that only gathers ids makes, which `compact.CompactChains` answers too.

    @property
    def num_ids(self) -> int:
        """Prompt ids held."""
        return int(self.ids.size)

    def ids_at(self, positions: np.ndarray) -> np.ndarray:
        """The ids at `positions`."""
        return self.ids[positions]

    def ids_range(self, lo: int, hi: int) -> np.ndarray:
        """The ids at positions `lo..hi-1` (a view)."""
        return self.ids[max(int(lo), 0):int(hi)]

    def id_slices(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(start, ids) of each slice of `size` ids, in turn (views)."""
        for lo in range(0, self.ids.size, size):
            yield lo, self.ids[lo:lo + size]



@dataclass(frozen=True, slots=True, kw_only=True)
class PromptContent:
    """Every request's content, flattened: what a chain build reads.

    `offsets`/`values` are the prompt units: token ids (`source_block_size=None`) or source
    block ids of `source_block_size` tokens each (the last id may cover a partial block; ids
    are re-chained, so they need not be prefix hashes already); `prompt_len` counts tokens.
    `output_offsets`/`output_values` are the output token ids, chained after the prompt when
    the rules cache outputs (token traces only).
    """

    offsets: np.ndarray
    values: np.ndarray
    prompt_len: np.ndarray
    source_block_size: int | None = None
    output_offsets: np.ndarray | None = None
    output_values: np.ndarray | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockLayout:
    """Where every request's blocks lie in its units: what the hashing pass reads.

    Request i's units are `values[unit_offsets[i]:unit_offsets[i+1]]`; its first
    `full_blocks[i]` blocks take `units_per_block` units each, and `partial_tokens[i] > 0` adds
    a trailing partial block of that many tokens (its remaining units). Its blocks' hashes go
    to `block_offsets[i]..`; `namespaces[i]` keeps its chains apart from other namespaces'.
    """

    unit_offsets: np.ndarray  # int64 n+1
    values: np.ndarray  # int64 (or int32 tokens)
    units_per_block: int
    full_blocks: np.ndarray  # int64 per request
    partial_tokens: np.ndarray  # int64 per request
    namespaces: np.ndarray  # int64 per request
    block_offsets: np.ndarray  # int64 n+1 into the hashes


@dataclass(frozen=True, slots=True)
class ChainKernels:
    """The passes over the units a chain build needs.

    `interleave(off_a, val_a, off_b, val_b) -> (offsets, values)`: per request, a's units then
    b's. `chain_hashes(layout, keys, out_a, out_b)` fills both lanes of every block of a
    `BlockLayout`. `dense_ids(hash_a, hash_b, table_bits) -> (ids, distinct, collisions)`
    numbers lane A in first-appearance order, checking lane B.
    """

    interleave: Callable[..., tuple[np.ndarray, np.ndarray]]
    chain_hashes: Callable[..., None]
    dense_ids: Callable[..., tuple[np.ndarray, int, int]]


def frozen_input(array: np.ndarray, dtype: type) -> np.ndarray:
    """A contiguous read-only view (a copy only when the dtype or layout differs).

    Arrow buffers arrive read-only and NumPy arrays writable; numba compiles one specialisation
    per flavour, so every input goes in read-only and one cached signature serves both.
    """
    out: np.ndarray = np.ascontiguousarray(array, dtype=dtype).view()
    out.flags.writeable = False
    return out


def hash_keys(seed: int, attempt: int) -> np.ndarray:
    """Per lane: offset K0 and odd multipliers K1 (value) and K2 (position), from the seed:
    six outputs of splitmix64 started from the seed and the attempt. (Plain integers, not
    numpy.random, whose first generator costs 9 ms of a 0.3 s run; any keys serve, as only
    the ids' first appearances leave the chains.)"""
    state = _splitmix(int(seed) & _MASK_64) ^ _splitmix((int(attempt) << 16) ^ 0x59A0)
    keys = []
    for _ in range(6):
        state = (state + _GOLDEN_64) & _MASK_64
        keys.append(_splitmix(state))
    out = np.array(keys, dtype=np.uint64)
    out[[1, 2, 4, 5]] |= np.uint64(1)
    return out


_MASK_64 = (1 << 64) - 1
_GOLDEN_64 = 0x9E3779B97F4A7C15  # splitmix64's increment


def _splitmix(z: int) -> int:
    """splitmix64's finalizer on a Python integer (mod 2^64), as `MIX_*` define it."""
    z = ((z ^ (z >> int(MIX_SHIFT_1))) * int(MIX_MUL_1)) & _MASK_64
    z = ((z ^ (z >> int(MIX_SHIFT_2))) * int(MIX_MUL_2)) & _MASK_64
    return z ^ (z >> int(MIX_SHIFT_3))


def chain_bytes(blocks: int) -> int:
    """Memory the chains of `blocks` cacheable blocks hold: ids, tokens, lane B and the table."""
    table = 1 << max(10, int(np.ceil(np.log2(max(blocks, 1) * 2 + 1))))
    return int(blocks) * 16 + table * 12


def segment_ranges(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New offsets and the flat indices of `rows`' segments (in row order)."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    index = (np.repeat(offsets[rows] - new_offsets[:-1], lengths)
             + np.arange(int(new_offsets[-1]), dtype=np.int64))
    return new_offsets, index


def segment_positions(counts: np.ndarray) -> np.ndarray:
    """0-based position of every element within its segment, for segments of `counts`."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def offsets_of(counts: np.ndarray) -> np.ndarray:
    """Segment offsets (int64, n + 1) of segments of `counts`."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def hit_cap(blocks: np.ndarray, prompt_tokens: np.ndarray, block_size_tokens: int,
            last_token_rule: bool) -> np.ndarray:
    """The most leading blocks each request may hit (int64): all its `blocks`, or with the
    last-token rule at most `floor((prompt tokens - 1) / B)`."""
    if not last_token_rule:
        return np.asarray(blocks).astype(np.int64)
    last = np.maximum(prompt_tokens - 1, 0)
    return np.minimum(blocks, last // block_size_tokens).astype(np.int64)


def chain_layout(content: PromptContent, namespace_codes: np.ndarray | None,
                 rules: ReplayRules, kernels: ChainKernels) -> BlockChains:
    """Chain every request's prompt into dense block ids under `rules` (spec §2), with the
    passes of `kernels` (`blocks.build_block_chains` gives numba's).

    `namespace_codes` (int, per request) separate caches: model/adapter, plus tenant when
    isolated. Output content, when given with `rules.cache_outputs`, adds the full blocks of
    prompt + output as blocks to insert (token traces only).
    """
    source_block_size = content.source_block_size
    output_offsets, output_values = content.output_offsets, content.output_values
    offsets = frozen_input(content.offsets, np.int64)
    values = frozen_input(content.values, np.int64)
    prompt_len = np.array(content.prompt_len, dtype=np.int64)
    n = len(prompt_len)
    if len(offsets) != n + 1:
        raise ValueError(f"offsets has {len(offsets)} entries for {n} requests (want n + 1)")
    rules.check_source_block_size(source_block_size)
    block = int(rules.block_size_tokens)
    unit = 1 if source_block_size is None else int(source_block_size)
    per_block = block // unit
    ns = (np.zeros(n, dtype=np.int64) if namespace_codes is None
          else np.ascontiguousarray(namespace_codes, dtype=np.int64))
    full, partial = _block_counts(offsets, prompt_len, unit, per_block, block,
                                  rules.cache_partial_blocks)

    with_outputs = (rules.cache_outputs and output_offsets is not None
                    and output_values is not None and source_block_size is None)
    unit_offsets, unit_values, hashed_full = offsets, values, full
    if with_outputs:
        assert output_offsets is not None and output_values is not None  # with_outputs
        out_off = frozen_input(output_offsets, np.int64)
        out_val = frozen_input(output_values, np.int64)
        unit_offsets, unit_values = (frozen_input(a, np.int64)
                                     for a in kernels.interleave(offsets, values, out_off, out_val))
        hashed_full = (prompt_len + np.diff(out_off)) // block
        partial = np.zeros(n, dtype=np.int64)  # a partial prompt block is not a prefix of outputs

    hashed_blocks = hashed_full + (partial > 0)
    layout = BlockLayout(unit_offsets=unit_offsets, values=unit_values, units_per_block=per_block,
                         full_blocks=hashed_full, partial_tokens=partial, namespaces=ns,
                         block_offsets=offsets_of(hashed_blocks))
    all_ids, distinct = _dense_block_ids(layout, rules.seed, block, kernels)

    prompt_blocks = full + (partial > 0) if not with_outputs else prompt_len // block
    out_ids = out_offsets = None
    if with_outputs:
        ids, out_ids, out_offsets = _split_outputs(all_ids, hashed_blocks, prompt_blocks)
    else:
        ids = all_ids
    chain_offsets = offsets_of(prompt_blocks)
    return BlockChains(
        offsets=chain_offsets, ids=ids, last_block_tokens=last_block_tokens(partial, block),
        num_distinct=int(distinct),
        max_hit_blocks=hit_cap(prompt_blocks, prompt_len, block, rules.last_token_rule),
        prompt_tokens=prompt_len, block_size_tokens=block, output_offsets=out_offsets,
        output_ids=out_ids, seed=int(rules.seed))


def last_block_tokens(partial_tokens: np.ndarray, block: int) -> np.ndarray:
    """Tokens of each request's last block (int32): its cached partial block's, else B."""
    partial = np.asarray(partial_tokens)
    return np.where(partial > 0, partial, block).astype(np.int32)


def _block_counts(offsets: np.ndarray, prompt_len: np.ndarray, unit: int, per_block: int,
                  block: int, cache_partial: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per request, its full blocks and the tokens of its trailing partial block (0 unless
    partial blocks are cached), counting only the tokens the content covers."""
    units = np.diff(offsets)
    covered = np.minimum(prompt_len, units * unit)
    full_units = np.minimum(units, prompt_len // unit)
    full = full_units // per_block
    partial = np.zeros(len(prompt_len), dtype=np.int64)
    if cache_partial:
        rest = covered - full * block
        partial = np.where(units > full * per_block, rest, 0).astype(np.int64)
    return full, partial


def _dense_block_ids(layout: BlockLayout, seed: int, block: int, kernels: ChainKernels
                     ) -> tuple[np.ndarray, int]:
    """Every block's chained hash turned into a dense id, re-keyed on the (never yet seen)
    event that two different chains collide on both 64-bit lanes."""
    total = int(layout.block_offsets[-1])
    if total > MAX_IDS:
        raise ResourceLimitError(
            f"{total} blocks exceed the 2^31 ids this replay supports; use a larger --block-size"
        )
    # Both hash lanes of every block (16 B) live next to the chains until the ids are dense.
    memory.require(chain_bytes(total) + 16 * total,
                   f"chaining {total:,} blocks of {block} token(s)", "use a larger --block-size")
    table_bits = max(10, int(np.ceil(np.log2(max(total, 1) * 2 + 1))))
    for attempt in range(HASH_TRIES):
        keys = hash_keys(seed, attempt)
        hash_a = np.empty(total, dtype=np.uint64)
        hash_b = np.empty(total, dtype=np.uint64)
        kernels.chain_hashes(layout, keys, hash_a, hash_b)
        all_ids, distinct, collisions = kernels.dense_ids(hash_a, hash_b, np.int64(table_bits))
        del hash_a, hash_b
        if collisions == 0:
            return all_ids, distinct
    raise YaotuError(f"block hashing collided {HASH_TRIES} times in a row ({total} blocks); "
                     "this should not happen: report it with the trace")


def _split_outputs(all_ids: np.ndarray, hashed_blocks: np.ndarray, prompt_blocks: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prompt's block ids, the output's, and the output's per-request offsets."""
    position = segment_positions(hashed_blocks)
    is_prompt = position < np.repeat(prompt_blocks, hashed_blocks)
    return (np.ascontiguousarray(all_ids[is_prompt]), np.ascontiguousarray(all_ids[~is_prompt]),
            offsets_of(hashed_blocks - prompt_blocks))
