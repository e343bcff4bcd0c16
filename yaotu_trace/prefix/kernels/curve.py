"""The LRU capacity curve from stack-distance histograms, and the checked inputs of a pass.

`sweep` measures the histograms with its compiled kernels, `numpy_passes` with numpy for a
small trace; both read their blocks as `SweepBlocks` and hand the histograms to
`curve_from_histograms`, so the inputs' checks, the curve, its knee and its share capacities
come from one piece of code whichever pass ran. Nothing here imports numba.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.rules import TouchOrder

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from yaotu_trace.prefix.kernels.chains import BlockChains

TOUCH_ORDERS: Final = tuple(order.value for order in TouchOrder)
DEFAULT_SHARES: Final = (0.5, 0.9, 0.99)
MAX_INT32_IDS: Final = 2**31 - 1  # the passes number blocks and times in int32


def _pinned(array: Any, dtype: Any) -> NDArray[Any]:
    """A C-contiguous, writable array of `dtype` (numba compiles once per dtype/layout/flags)."""
    out = np.ascontiguousarray(array, dtype=dtype)
    if not out.flags.writeable:
        out = out.copy()
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class DistanceHistograms:
    """Hit tokens and hit blocks by the capacity (in blocks) at which they start to hit.

    Index `d` is a capacity in blocks: `hit_tokens[d]` tokens hit at every capacity ≥ d. Index 0
    is always empty. The length is (distinct blocks) + 2.
    """

    hit_tokens: NDArray[np.int64]
    hit_blocks: NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelBlocks:
    """`SweepBlocks` pinned to the passes' dtypes (int64 offsets and caps, int32 ids and
    tokens) and checked, outputs always present (empty without them), `n_ids` known."""

    offsets: NDArray[np.int64]
    ids: NDArray[np.int32]
    block_size_tokens: int
    last_block_tokens: NDArray[np.int32]
    max_hit_blocks: NDArray[np.int64]
    n_ids: int
    output_offsets: NDArray[np.int64]
    output_ids: NDArray[np.int32]

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return int(self.offsets.shape[0]) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepBlocks:
    """The blocks a stack-distance pass reads: each request's lookup blocks, and the output
    blocks it touches after them but never looks up.

    Request r's blocks are `ids[offsets[r]:offsets[r + 1]]`, block 1 first: dense chain ids
    (0..n_ids-1; equal ids are the same cached block), each worth `block_size_tokens` tokens
    but its last, worth `last_block_tokens[r]` (B, or a cached partial block's length);
    `max_hit_blocks[r]` caps its hit (the last-token rule).
    `n_ids` counts the distinct ids, outputs included (None: the largest id + 1).
    `output_offsets`/`output_ids` are the blocks it inserts after its prompt's
    (`--cache-outputs`).
    """

    offsets: NDArray[Any]
    ids: NDArray[Any]
    block_size_tokens: int
    last_block_tokens: NDArray[Any]
    max_hit_blocks: NDArray[Any]
    n_ids: int | None = None
    output_offsets: NDArray[Any] | None = None
    output_ids: NDArray[Any] | None = None

    @classmethod
    def of(cls, chains: BlockChains) -> SweepBlocks:
        """The blocks of `chains`."""
        return cls(offsets=chains.offsets, ids=chains.ids,
                   block_size_tokens=chains.block_size_tokens,
                   last_block_tokens=chains.last_block_tokens,
                   max_hit_blocks=chains.max_hit_blocks, n_ids=chains.num_distinct,
                   output_offsets=chains.output_offsets, output_ids=chains.output_ids)

    def checked(self) -> KernelBlocks:
        """The arrays in the passes' dtypes, checked: the kernels index without bounds checks."""
        offsets64 = _pinned(self.offsets, np.int64)
        n_requests = offsets64.shape[0] - 1
        ids32 = _pinned(self.ids, np.int32)
        if self.output_offsets is None or self.output_ids is None:
            out_off = np.zeros(n_requests + 1, dtype=np.int64)
            out_ids = np.zeros(0, dtype=np.int32)
        else:
            out_off = _pinned(self.output_offsets, np.int64)
            out_ids = _pinned(self.output_ids, np.int32)
        n_ids = self.n_ids
        if n_ids is None:
            n_ids = max(int(ids32.max()) + 1 if len(ids32) else 0,
                        int(out_ids.max()) + 1 if len(out_ids) else 0)
        if n_ids > MAX_INT32_IDS:
            raise ConfigError(f"{n_ids} distinct blocks exceed the sweep's int32 ids; "
                              "use a larger --block-size")
        for name, values in (("ids", ids32), ("output ids", out_ids)):
            if len(values) and (int(values.min()) < 0 or int(values.max()) >= n_ids):
                raise ValueError(f"{name} must lie in 0..{n_ids - 1} (dense chain ids)")
        tokens32 = _pinned(self.last_block_tokens, np.int32)
        cap64 = _pinned(self.max_hit_blocks, np.int64)
        if (n_requests < 0 or offsets64[0] < 0 or offsets64[-1] > len(ids32)
                or np.any(np.diff(offsets64) < 0)):
            raise ValueError("offsets must be non-decreasing indices into ids")
        if len(tokens32) != n_requests or len(cap64) != n_requests:
            raise ValueError("last_block_tokens and max_hit_blocks need one entry per request")
        if len(out_off) != n_requests + 1 or (n_requests and (
                out_off[0] < 0 or out_off[-1] > len(out_ids) or np.any(np.diff(out_off) < 0))):
            raise ValueError("output offsets must be n_requests + 1 indices into output ids")
        return KernelBlocks(offsets=offsets64, ids=ids32,
                            block_size_tokens=int(self.block_size_tokens),
                            last_block_tokens=tokens32, max_hit_blocks=cap64, n_ids=int(n_ids),
                            output_offsets=out_off, output_ids=out_ids)


def checked_touch_order(touch_order: str) -> TouchOrder:
    """`touch_order` as a `TouchOrder`, or a ConfigError naming them."""
    order_name = str(touch_order)
    if order_name not in TOUCH_ORDERS:
        raise ConfigError(f"touch order {order_name!r} is not one of {', '.join(TOUCH_ORDERS)}")
    return TouchOrder(order_name)


def partition_order(partitions: NDArray[Any] | None, n_requests: int
                    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Requests grouped by partition (stable), and where each partition starts."""
    if partitions is not None and len(partitions) != n_requests:
        raise ValueError("partitions needs one code per request")
    if partitions is None:
        return (np.arange(n_requests, dtype=np.int64),
                np.array([0, n_requests], dtype=np.int64))
    codes = np.asarray(partitions)
    order = _pinned(np.argsort(codes, kind="stable"), np.int64)
    sorted_codes = codes[order]
    cuts = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
    return order, _pinned(np.concatenate(([0], cuts, [n_requests])), np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityCurve:
    """Achieved hits as an exact step function of the LRU capacity (per cache, in blocks).

    `step_capacities_blocks[i]` is the i-th capacity at which the hits grow, and
    `step_hit_tokens[i]` / `step_hit_blocks[i]` the hits from that capacity up to the next step.
    Below the first step nothing hits; from the last step on the hits equal the unlimited ones.
    With scope `instance` every instance has a cache of this capacity.

    The knee is Kneedle's point of maximum curvature for a concave curve: with capacity scaled
    to [0, 1] over [0, capacity reaching the unlimited hits] and hits scaled to [0, 1] of the
    unlimited hits, the step start farthest above the chord y = x (largest y − x). Past it, each
    extra block buys less than the average block up to full reuse.
    """

    block_size_tokens: int
    touch_order: TouchOrder
    kv_bytes_per_token: int | None
    partitions: int
    prompt_tokens_total: int
    full_blocks_total: int
    unlimited_hit_tokens: int
    unlimited_hit_blocks: int
    step_capacities_blocks: NDArray[np.int64]
    step_hit_tokens: NDArray[np.int64]
    step_hit_blocks: NDArray[np.int64]
    knee_capacity_blocks: int | None = field(default=None)
    share_capacities_blocks: dict[float, int | None] = field(default_factory=dict)
    # With `sweep(..., per_instance=True)`: each partition's own curve, by partition code.
    instance_codes: tuple[int, ...] = ()
    instance_curves: tuple[CapacityCurve, ...] = ()

    def hit_tokens_at(self, capacities_blocks: Any) -> NDArray[np.int64]:
        """Hit tokens at each capacity (in blocks per cache) of an array-like."""
        return self._at(self.step_hit_tokens, capacities_blocks)

    def hit_blocks_at(self, capacities_blocks: Any) -> NDArray[np.int64]:
        """Hit blocks (partial cached blocks count as one) at each capacity in blocks."""
        return self._at(self.step_hit_blocks, capacities_blocks)

    def hit_ratio_at(self, capacities_blocks: Any) -> NDArray[np.float64]:
        """Token-weighted hit ratio (Σ hit tokens / Σ prompt tokens) at each capacity."""
        total = max(self.prompt_tokens_total, 1)
        return self.hit_tokens_at(capacities_blocks).astype(np.float64) / total

    def block_hit_ratio_over_full_blocks_at(self, capacities_blocks: Any) -> NDArray[np.float64]:
        """Σ hit blocks / Σ full prompt blocks: the block-counted ratio of Mooncake's Figure 9."""
        total = max(self.full_blocks_total, 1)
        return self.hit_blocks_at(capacities_blocks).astype(np.float64) / total

    def capacity_for_share(self, share: float) -> int | None:
        """Smallest capacity (blocks) whose hit tokens reach `share` of the unlimited hits."""
        if not 0.0 < share <= 1.0:
            raise ConfigError(f"share {share} must be in (0, 1]")
        if self.unlimited_hit_tokens == 0:
            return None
        target = share * self.unlimited_hit_tokens
        i = int(np.searchsorted(self.step_hit_tokens, target - 1e-9 * target, side="left"))
        i = min(i, len(self.step_hit_tokens) - 1)
        return int(self.step_capacities_blocks[i])

    @property
    def unlimited_hit_ratio(self) -> float:
        """Token-weighted hit ratio with unlimited capacity."""
        return self.unlimited_hit_tokens / max(self.prompt_tokens_total, 1)

    @property
    def full_reuse_capacity_blocks(self) -> int:
        """Smallest capacity (blocks) that achieves the unlimited hits (0 when nothing hits)."""
        return int(self.step_capacities_blocks[-1]) if len(self.step_capacities_blocks) else 0

    def to_tokens(self, capacity_blocks: Any) -> Any:
        """Capacities in tokens (blocks · block size)."""
        return np.asarray(capacity_blocks, dtype=np.int64) * self.block_size_tokens

    def to_bytes(self, capacity_blocks: Any) -> Any:
        """Capacities in KV bytes per cache, or None without KV bytes per token."""
        if self.kv_bytes_per_token is None:
            return None
        return self.to_tokens(capacity_blocks) * self.kv_bytes_per_token

    def sample_capacities(self, points: int) -> NDArray[np.int64]:
        """`points` capacities (blocks), log-spaced from the first step to full reuse.

        The knee and the 50/90/99 % capacities are always included, so a table shows them.
        """
        if points < 2:
            raise ConfigError(f"--points must be >= 2, got {points}")
        if not len(self.step_capacities_blocks):
            return np.array([1], dtype=np.int64)
        low = max(int(self.step_capacities_blocks[0]), 1)
        high = max(self.full_reuse_capacity_blocks, low)
        grid = np.unique(np.round(np.geomspace(low, high, points)).astype(np.int64))
        extra = [self.knee_capacity_blocks, *self.share_capacities_blocks.values()]
        keep = np.array([c for c in extra if c is not None], dtype=np.int64)
        return np.unique(np.concatenate([grid, keep]))

    def _at(self, values: NDArray[np.int64], capacities_blocks: Any) -> NDArray[np.int64]:
        caps = np.asarray(capacities_blocks, dtype=np.int64)
        i = np.searchsorted(self.step_capacities_blocks, caps, side="right") - 1
        out = np.where(i >= 0, values[np.maximum(i, 0)] if len(values) else 0, 0)
        return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveTerms:
    """What every curve of one sweep shares: the block size, the touch order, the KV bytes per
    token (capacities in bytes; None: not known) and the shares of the unlimited hits whose
    capacities it reports."""

    block_size_tokens: int
    touch_order: TouchOrder
    kv_bytes_per_token: int | None = None
    shares: tuple[float, ...] = DEFAULT_SHARES


def curve_from_histograms(
    histograms: DistanceHistograms,
    terms: CurveTerms,
    prompt_tokens: NDArray[Any],
    *,
    partitions: int = 1,
    instance_codes: tuple[int, ...] = (),
    instance_curves: tuple[CapacityCurve, ...] = (),
) -> CapacityCurve:
    """Turn the distance histograms of requests with `prompt_tokens` into the exact step
    curve, its knee and share capacities."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    block_size_tokens = terms.block_size_tokens
    tok = histograms.hit_tokens
    blk = histograms.hit_blocks
    steps = np.flatnonzero((tok != 0) | (blk != 0)).astype(np.int64)
    cum_tok = np.cumsum(tok)[steps] if len(steps) else np.zeros(0, dtype=np.int64)
    cum_blk = np.cumsum(blk)[steps] if len(steps) else np.zeros(0, dtype=np.int64)
    curve = CapacityCurve(
        block_size_tokens=block_size_tokens,
        touch_order=terms.touch_order,
        kv_bytes_per_token=terms.kv_bytes_per_token,
        partitions=partitions,
        prompt_tokens_total=int(prompt.sum()),
        full_blocks_total=int((prompt // block_size_tokens).sum()),
        unlimited_hit_tokens=int(tok.sum()),
        unlimited_hit_blocks=int(blk.sum()),
        step_capacities_blocks=steps,
        step_hit_tokens=cum_tok.astype(np.int64),
        step_hit_blocks=cum_blk.astype(np.int64),
        instance_codes=instance_codes,
        instance_curves=instance_curves,
    )
    knee = _knee(steps, cum_tok)
    share_caps = {s: curve.capacity_for_share(s) for s in terms.shares}
    object.__setattr__(curve, "knee_capacity_blocks", knee)
    object.__setattr__(curve, "share_capacities_blocks", share_caps)
    return curve


def _knee(steps: NDArray[np.int64], cum_tok: NDArray[np.int64]) -> int | None:
    """Kneedle on the step starts: the capacity maximising (hit share − capacity share)."""
    if not len(steps) or cum_tok[-1] <= 0:
        return None
    x = steps.astype(np.float64) / float(steps[-1])
    y = cum_tok.astype(np.float64) / float(cum_tok[-1])
    return int(steps[int(np.argmax(y - x))])
