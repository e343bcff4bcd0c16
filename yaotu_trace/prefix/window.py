"""The measurement window (`--warmup`): hits counted only after a warm-up (replay-spec §6).

A replay that starts from a cold cache counts misses no running engine would see; peers such
as kvcache-simulator therefore replay every request but count hits only over a later window
(its last 50 % of requests). `--warmup W` does the same: every request still looks up and
touches the cache in arrival order, and the totals (hits, prompt tokens, the hit ratios, the
waterfall, the curve) are summed over the requests after the first W only.

W is a share of the requests (`0.5`, `50%`; `floor(n · share)` requests, kvcache-simulator's
rounding), a number of requests (`1000`, `1000req`), or seconds of trace time from the first
arrival (`600s`, `10min`, `2h`: the requests that arrive before then). A window that leaves
nothing to measure is a ConfigError, not an empty report: a hit ratio of nothing is no answer.

A capacity whose cache never filled before the window is marked (kvcache-simulator omits such
budgets: they were never under memory pressure). A cache that loses blocks only to eviction,
and evicts only when full, holds min(distinct blocks inserted so far, C) blocks; so it filled
before the window iff the warm-up inserted at least C distinct blocks. With several caches
(one per instance, or per tenant) each must have filled.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.prefix.kernels.chains import BlockChains

WarmupKind = Literal["share", "requests", "seconds"]

_SECONDS_PER_UNIT = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}
_FORM = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(?P<unit>%|req|s|sec|min|h)?"
                   r"\s*$", re.IGNORECASE)
_HELP = ("give a share of requests (0.5 or 50%), a number of requests (1000 or 1000req) or "
         "trace time (600s, 10min, 2h)")


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmupSpec:
    """`--warmup` as parsed: a share of requests, a number of requests, or seconds."""

    text: str
    kind: WarmupKind
    value: float


def parse_warmup(text: str) -> WarmupSpec:
    """`--warmup` text → its spec; a bad value is a one-line ConfigError naming the forms."""
    match = _FORM.match(str(text))
    if match is None:
        raise ConfigError(f"--warmup {text!r} is not a window: {_HELP}")
    number, unit = match["num"], (match["unit"] or "").lower()
    value = float(number)
    if not math.isfinite(value):
        raise ConfigError(f"--warmup {text!r} is not a window: {_HELP}")
    if unit == "%":
        if value >= 100:
            raise ConfigError(f"--warmup {text}: a share must be below 100% so that some "
                              "requests are measured")
        return WarmupSpec(text=text, kind="share", value=value / 100)
    if unit in _SECONDS_PER_UNIT:
        return WarmupSpec(text=text, kind="seconds", value=value * _SECONDS_PER_UNIT[unit])
    whole = re.fullmatch(r"[0-9]+", number) is not None
    if unit == "req" or whole:
        if not whole:
            raise ConfigError(f"--warmup {text}: a number of requests is whole (1000req)")
        return WarmupSpec(text=text, kind="requests", value=float(int(number)))
    if value >= 1:
        raise ConfigError(f"--warmup {text}: a share of requests is below 1 (0.5, or 50%); "
                          "a number of requests is whole (1000)")
    return WarmupSpec(text=text, kind="share", value=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasurementWindow:
    """Which requests are counted: every one from `warmup_requests` on (replay order).

    `filled_before_window` and `distinct_blocks_before_window` concern a finite capacity only
    (None when the cache is unlimited or the count was not asked for).
    """

    warmup: str
    warmup_requests: int
    requests: int
    warmup_seconds: float  # trace time the warm-up covers: first measured arrival − first
    first_measured_arrival_s: float
    capacity_blocks: int | None = None
    distinct_blocks_before_window: int | None = None  # the least over the caches
    caches: int = 1

    @property
    def measured_requests(self) -> int:
        """Requests whose hits are counted."""
        return self.requests - self.warmup_requests

    @property
    def filled_before_window(self) -> bool | None:
        """Whether every cache of `capacity_blocks` was full when the window began."""
        if self.capacity_blocks is None or self.distinct_blocks_before_window is None:
            return None
        return self.distinct_blocks_before_window >= self.capacity_blocks

    def mask(self) -> np.ndarray:
        """True for every measured request, in replay order."""
        out = np.zeros(self.requests, dtype=bool)
        out[self.warmup_requests:] = True
        return out

    def with_fill(self, capacity_blocks: int | None, distinct_blocks: int | None,
                  caches: int = 1) -> MeasurementWindow:
        """The window with the fill count of one capacity."""
        return MeasurementWindow(
            warmup=self.warmup, warmup_requests=self.warmup_requests, requests=self.requests,
            warmup_seconds=self.warmup_seconds,
            first_measured_arrival_s=self.first_measured_arrival_s,
            capacity_blocks=capacity_blocks, distinct_blocks_before_window=distinct_blocks,
            caches=caches)

    def describe(self) -> str:
        """One line for the report's notes."""
        line = (f"measurement window: hits counted over the last {self.measured_requests} of "
                f"{self.requests} requests; the first {self.warmup_requests} "
                f"({self.warmup_seconds:.1f} s of trace time, --warmup {self.warmup}) only warm "
                "the cache")
        if self.filled_before_window is False:
            line += (f"; the cache of {self.capacity_blocks} blocks never filled before the "
                     f"window ({self.distinct_blocks_before_window} distinct blocks inserted"
                     + (" in the emptiest cache" if self.caches > 1 else "") + ")")
        return line

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins."""
        return {
            "warmup": self.warmup,
            "warmup_requests": self.warmup_requests,
            "measured_requests": self.measured_requests,
            "requests": self.requests,
            "warmup_seconds": self.warmup_seconds,
            "first_measured_arrival_s": self.first_measured_arrival_s,
            "capacity_blocks": self.capacity_blocks,
            "distinct_blocks_before_window": self.distinct_blocks_before_window,
            "filled_before_window": self.filled_before_window,
        }


def measurement_window(spec: WarmupSpec | str, arrival_s: np.ndarray) -> MeasurementWindow:
    """The window of `spec` over requests arriving at `arrival_s` (sorted, replay order)."""
    if isinstance(spec, str):
        spec = parse_warmup(spec)
    arrival = np.asarray(arrival_s, dtype=np.float64)
    n = int(arrival.size)
    if spec.kind == "share":
        warmup = math.floor(n * spec.value)
    elif spec.kind == "requests":
        warmup = int(spec.value)
    else:
        start = float(arrival[0]) if n else 0.0
        warmup = int(np.searchsorted(arrival, start + spec.value, side="left"))
    if warmup >= n:
        raise ConfigError(f"--warmup {spec.text} covers all {n} requests, so none is left to "
                          "measure; give a shorter window")
    first = float(arrival[0]) if n else 0.0
    start_s = float(arrival[warmup])
    return MeasurementWindow(warmup=spec.text, warmup_requests=warmup, requests=n,
                             warmup_seconds=start_s - first, first_measured_arrival_s=start_s)


def distinct_blocks_before(
    offsets: np.ndarray,
    ids: np.ndarray,
    warmup_requests: int,
    cache_codes: np.ndarray | None = None,
    output_offsets: np.ndarray | None = None,
    output_ids: np.ndarray | None = None,
) -> tuple[int, int]:
    """(the fewest distinct blocks any cache received during the warm-up, number of caches).

    `cache_codes` gives each request's cache (instance, per-tenant cache); without it there is
    one. A cache that receives its first request only after the warm-up counts 0.
    """
    n = len(offsets) - 1
    codes = (np.zeros(n, dtype=np.int64) if cache_codes is None
             else np.asarray(cache_codes, dtype=np.int64))
    caches = np.unique(codes)
    w = warmup_requests
    parts = [(offsets, ids)]
    if output_offsets is not None and output_ids is not None:
        parts.append((output_offsets, output_ids))
    pair_codes, pair_ids = [], []
    for off, values in parts:
        off = np.asarray(off, dtype=np.int64)
        lengths = np.diff(off[: w + 1])
        pair_codes.append(np.repeat(codes[:w], lengths))
        pair_ids.append(np.asarray(values[off[0]:off[w]], dtype=np.int64))
    all_codes = np.concatenate(pair_codes)
    all_ids = np.concatenate(pair_ids)
    if all_ids.size == 0:
        return 0, int(caches.size)
    span = int(all_ids.max()) + 1
    keys = np.unique(all_codes * span + all_ids)
    per_cache = np.bincount(np.searchsorted(caches, keys // span), minlength=caches.size)
    return int(per_cache.min()), int(caches.size)


def measured_only(chains: BlockChains, warmup_requests: int) -> BlockChains:
    """The chains with the warm-up requests' lookups and prompts left out of the counts.

    Their blocks stay, so they still touch the cache: a request that may hit no block (cap 0)
    and has no prompt tokens adds nothing to the sweep's histograms or totals.
    """
    max_hit = np.array(chains.max_hit_blocks, dtype=np.int64, copy=True)
    prompt = np.array(chains.prompt_tokens, dtype=np.int64, copy=True)
    max_hit[:warmup_requests] = 0
    prompt[:warmup_requests] = 0
    return replace(chains, max_hit_blocks=max_hit, prompt_tokens=prompt)
