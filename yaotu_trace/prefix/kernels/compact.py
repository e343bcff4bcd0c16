"""Block chains held as runs of consecutive ids, for an analysis that keeps them between passes.

Ids are numbered in first-appearance order, so a request's new blocks take consecutive ids, and
a prompt that repeats an earlier one repeats that prompt's runs. The ids of the 1e9-token scale
trace are 62.4 million blocks in 1.24 million runs: held as runs they take 2 % of the flat
int32 array. An analysis that replays the same chains more than once (the loss waterfall, then
its namespaced replays, then the hot prefixes) keeps them this way and expands them to the flat
array only for a pass that needs it, so that two flat copies (shared and namespaced ids, 2.3 GB
each at 1e10 tokens) or one beside the ideal pass's prefix table are never held at once.

NumPy only, slice by slice (`SLICE` ids at a time): nothing here compiles.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains, offsets_of

# Ids per slice of a compaction or an expansion: its int64 temporaries stay near 32 MB.
SLICE = 1 << 22
# Ids held flat when they make more than one run per this many (a run takes 12 bytes, an id 4),
# past a few thousand runs.
FLAT_BELOW = 4
RUN_SLACK = 4096


@dataclass(frozen=True, slots=True)
class IdRuns:
    """An int32 id array as runs: run r covers positions `starts[r]..starts[r+1]` and holds
    `first_ids[r]`, `first_ids[r] + 1`, … Ids that do not run (more than one run per
    `FLAT_BELOW` ids, where runs would take more than the ids) are held `flat` instead."""

    starts: np.ndarray  # int64, runs + 1 (the last is the array's length)
    first_ids: np.ndarray  # int32, one per run
    flat: np.ndarray | None = None  # the ids themselves (read-only), when they do not run

    @classmethod
    def of(cls, ids: np.ndarray) -> IdRuns:
        """The runs of `ids` (a run breaks wherever an id is not its predecessor + 1)."""
        ids = np.asarray(ids)
        breaks = [np.zeros(1 if ids.size else 0, dtype=np.int64)]
        held = 1
        for lo in range(1, ids.size, SLICE):
            hi = min(lo + SLICE, ids.size)
            # int32 differences of ids in [0, 2^31) cannot overflow
            step = np.subtract(ids[lo:hi], ids[lo - 1:hi - 1], dtype=np.int32)
            breaks.append(np.flatnonzero(step != 1).astype(np.int64) + lo)
            held += breaks[-1].size
            if held > ids.size // FLAT_BELOW + RUN_SLACK:
                flat = np.ascontiguousarray(ids, dtype=np.int32).view()
                flat.flags.writeable = False
                return cls(starts=np.array([0, ids.size], dtype=np.int64),
                           first_ids=np.zeros(1, dtype=np.int32), flat=flat)
        at = np.concatenate(breaks)
        return cls(starts=np.append(at, np.int64(ids.size)),
                   first_ids=np.ascontiguousarray(ids[at], dtype=np.int32))

    @property
    def size(self) -> int:
        """Ids held."""
        return int(self.starts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes the runs (or the flat ids) take."""
        if self.flat is not None:
            return int(self.flat.nbytes)
        return int(self.starts.nbytes + self.first_ids.nbytes)

    def range(self, lo: int, hi: int) -> np.ndarray:
        """The ids at positions `lo..hi-1` (int32; a new array unless they are held flat)."""
        lo, hi = max(int(lo), 0), min(int(hi), self.size)
        if self.flat is not None:
            return self.flat[lo:max(hi, lo)]
        if hi <= lo:
            return np.zeros(0, dtype=np.int32)
        a = int(np.searchsorted(self.starts, lo, side="right")) - 1
        b = int(np.searchsorted(self.starts, hi, side="left"))
        # Steps of one but where a run starts, then a running sum: one pass, no temporaries.
        out = np.ones(hi - lo, dtype=np.int32)
        out[0] = self.first_ids[a] + (lo - self.starts[a])
        if b > a + 1:
            first = self.first_ids[a:b].astype(np.int64)
            ends = first[:-1] + np.diff(self.starts[a:b]) - 1  # each run's last id
            out[self.starts[a + 1:b] - lo] = first[1:] - ends
        np.cumsum(out, dtype=np.int32, out=out)
        return out

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The ids at `positions` (int32)."""
        pos = np.asarray(positions, dtype=np.int64)
        if self.flat is not None:
            return self.flat[pos]
        run = np.searchsorted(self.starts, pos, side="right") - 1
        return (self.first_ids[run].astype(np.int64) + (pos - self.starts[run])).astype(np.int32)

    def segments(self, starts: np.ndarray, ends: np.ndarray) -> IdRuns:
        """The runs of the ids at positions `starts[j]..ends[j]-1`, one segment after another
        (a partition's requests, gathered without their flat ids)."""
        lo = np.asarray(starts, dtype=np.int64)
        hi = np.asarray(ends, dtype=np.int64)
        keep = hi > lo
        lo, hi = lo[keep], hi[keep]
        if self.flat is not None:
            index = np.repeat(lo - offsets_of(hi - lo)[:-1], hi - lo) + np.arange(
                int((hi - lo).sum()), dtype=np.int64)
            return IdRuns.of(self.flat[index])
        a = np.searchsorted(self.starts, lo, side="right") - 1
        b = np.searchsorted(self.starts, hi, side="left")
        count = b - a  # runs each segment touches
        run = np.repeat(a - offsets_of(count)[:-1], count) + np.arange(int(count.sum()),
                                                                        dtype=np.int64)
        seg = np.repeat(np.arange(lo.size, dtype=np.int64), count)
        first = np.maximum(self.starts[run], lo[seg])  # clipped to the segment
        last = np.minimum(self.starts[run + 1], hi[seg])
        ids = self.first_ids[run].astype(np.int64) + (first - self.starts[run])
        return IdRuns(starts=offsets_of(last - first), first_ids=ids.astype(np.int32))

    def expand(self) -> np.ndarray:
        """The whole id array: a new int32 array (a pass may relabel it in place), or the flat
        ids themselves, read-only, when they are held so."""
        if self.flat is not None:
            return self.flat
        out = np.empty(self.size, dtype=np.int32)
        for lo in range(0, self.size, SLICE):
            hi = min(lo + SLICE, self.size)
            out[lo:hi] = self.range(lo, hi)
        return out


@dataclass(frozen=True, slots=True)
class CompactChains:
    """`BlockChains` whose prompt ids are held as `IdRuns`: what a pass that only gathers ids
    reads (the hot prefixes, the ideal pass) without the flat array."""

    frame: BlockChains  # every field but the prompt ids, which are empty here
    runs: IdRuns

    @classmethod
    def of(cls, chains: BlockChains) -> CompactChains:
        """`chains` held as runs (their output ids, if any, stay flat)."""
        return cls(frame=replace(chains, ids=np.zeros(0, dtype=np.int32)),
                   runs=IdRuns.of(chains.ids))

    def expand(self) -> BlockChains:
        """The flat chains again, with ids of their own (writable) unless they are held flat."""
        return replace(self.frame, ids=self.runs.expand())

    @property
    def offsets(self) -> np.ndarray:
        """int64 n+1 into the (flat) ids."""
        return self.frame.offsets

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return self.frame.num_requests

    @property
    def num_blocks(self) -> np.ndarray:
        """Cacheable blocks per request (int64)."""
        return self.frame.num_blocks

    @property
    def num_distinct(self) -> int:
        """Distinct ids."""
        return self.frame.num_distinct

    @property
    def block_size_tokens(self) -> int:
        """Tokens per block."""
        return self.frame.block_size_tokens

    @property
    def num_ids(self) -> int:
        """Prompt ids held (the flat array's length)."""
        return self.runs.size

    def with_hit_cap(self, last_token_rule: bool) -> CompactChains:
        """The same chains with the last-token rule switched on or off."""
        return replace(self, frame=self.frame.with_hit_cap(last_token_rule))

    def leading_tokens(self, rows: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """Tokens of the first `blocks[j]` blocks of request `rows[j]` (int64)."""
        return self.frame.leading_tokens(rows, blocks)

    def ids_at(self, positions: np.ndarray) -> np.ndarray:
        """The ids at `positions` of the flat array."""
        return self.runs.at(positions)

    def ids_range(self, lo: int, hi: int) -> np.ndarray:
        """The ids at positions `lo..hi-1` of the flat array."""
        return self.runs.range(lo, hi)

    def id_slices(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(start, ids) of each slice of `size` ids of the flat array, in turn."""
        for lo in range(0, self.num_ids, size):
            yield lo, self.runs.range(lo, lo + size)
