"""Fetch versus recompute, priced: what loading a tier's hit costs against the prefill it saves.

A tier below the GPU **saves** the prefill of the tokens it serves and **adds** their transfer
(Mooncake FAST'25 Eq. 2: reusing a prefix of p tokens pays iff `p·kv_b / B < FLOPs(p) / G`,
B the load bandwidth, G the compute rate). Per request, with its GPU hit g and the tokens
`e_t` each tier served right after it (in tier order, cpu then disk then remote, as the
engines stitch the run):

- load_t = α_t + e_t · kv_bytes_per_token / B_t, where a tier's path is its links in series
  (disk: NVMe then PCIe; remote: the NIC then PCIe): B_t = the slowest link, α_t = the sum of
  their latencies;
- prefill saved_t = FLOPs of those tokens at their offset / G, with the roofline's FLOPs
  (`sim/config.StepCost`: `2·N_lin·e + attn·e·(p + e/2)` for e tokens after a prefix of p) and
  G = bf16 peak × MFU × TP;
- TTFT saved = Σ_t (prefill saved_t − load_t); a request whose loads take longer than the
  prefill they save is slower with the tier (counted and named).

Loads from several tiers are taken one after another and never overlap the prefill of the
rest (no layer-by-layer pipelining): the added time is an upper bound, the saving a lower one.
A pure function of per-request hit tokens, so it prices any tiered replay (`prefix/tiers`).

Link defaults, each with its source (override with `--link NAME=BANDWIDTH[,LATENCY]`):
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from yaotu_trace.errors import ConfigError
from yaotu_trace.sim.config import StepCost


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One edge of a tier's path to the GPU: bandwidth (bytes/s) and per-transfer latency."""

    name: str
    bytes_per_s: float
    latency_s: float
    source: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"name": self.name, "bytes_per_s": self.bytes_per_s,
                "latency_s": self.latency_s, "source": self.source}


LINKS: Final[Mapping[str, Link]] = {
    "pcie": Link(name="pcie", bytes_per_s=63.0e9, latency_s=0.0,
                 source="PCIe 5.0 x16, one direction: 32 GT/s × 16 lanes × 128/130 ÷ 8 = 63 GB/s "
                        "[computed from the PCIe 5.0 line rate; pinned copies reach less]; "
                        "latency 0 [proposed default: a DMA's setup is microseconds]"),
    "nvme": Link(name="nvme", bytes_per_s=5.0e9, latency_s=100e-6,
                 source="NVMe about 5 GB/s (vLLM 0.34 kv_offload/tiering/backpressure.py); "
                        "100 µs per read (SGLang 0.5.23 HiCache `sim` storage backend default)"),
    "nic": Link(name="nic", bytes_per_s=12.5e9, latency_s=0.57e-3,
                source="100 Gb/s per GPU (Mooncake pairs each A800 with a 100/200 Gb/s NIC, "
                       "cost-model §2.4); 0.57 ms per transfer (Mooncake Transfer Engine, "
                       "cost-model §8)"),
}
# A tier's links, from where its KV lives to the GPU.
PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "cpu": ("pcie",), "disk": ("nvme", "pcie"), "remote": ("nic", "pcie")}
PEAK_WINDOW_S: Final = 60.0  # the busiest minute of loads
NAMED = 10  # requests named where loading is slower than recomputing

__doc__ = (__doc__ or "") + "".join(
    f"\n- {link.name}: {link.source}" for link in LINKS.values()) + "\n"

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([kmgt]i?)?([bB])/s\s*$", re.I)
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(s|ms|us|µs|ns)\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_link(text: str) -> Link:
    """`pcie=32GB/s`, `nic=200Gb/s,0.5ms` (B/s bytes, b/s bits) as a link override."""
    name, sep, value = text.partition("=")
    name = name.strip().lower()
    if not sep or name not in LINKS:
        raise ConfigError(f"--link {text!r} must be NAME=BANDWIDTH[,LATENCY] with NAME one of "
                          f"{', '.join(LINKS)} (e.g. pcie=32GB/s or nic=200Gb/s,0.5ms)")
    rate_text, _, latency_text = value.partition(",")
    rate = _RATE.match(rate_text)
    if rate is None or float(rate.group(1)) <= 0:
        raise ConfigError(f"--link {text!r}: the bandwidth must be a positive number with a "
                          "unit, GB/s (bytes) or Gb/s (bits), e.g. 32GB/s")
    scale = _PREFIX[(rate.group(2) or "").lower()]
    bytes_per_s = float(rate.group(1)) * scale / (8.0 if rate.group(3) == "b" else 1.0)
    latency = LINKS[name].latency_s
    if latency_text.strip():
        t = _TIME.match(latency_text)
        if t is None:
            raise ConfigError(f"--link {text!r}: the latency must be a number with a unit "
                              "(s, ms, us), e.g. 0.5ms")
        latency = float(t.group(1)) * _SECONDS[t.group(2)]
    return Link(name=name, bytes_per_s=bytes_per_s, latency_s=latency,
                source=f"given: --link {text.strip()}")


def links_with(overrides: Sequence[str] = ()) -> dict[str, Link]:
    """The default links with `--link` overrides laid over them."""
    links = dict(LINKS)
    for text in overrides:
        link = parse_link(text)
        links[link.name] = link
    return links


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute:
    """What recomputing costs: the roofline's FLOPs per token and the replica's FLOP rate."""

    linear_params: float
    attention_flops_per_token_pair: float
    flops_per_s: float  # bf16 peak × MFU × TP
    gpus: int = 1  # GPUs per replica, for GPU-seconds

    @classmethod
    def of(cls, cost: StepCost, gpus: int = 1) -> Compute:
        """From a roofline step cost (`sim/roofline.step_cost_for`)."""
        return cls(linear_params=cost.linear_params,
                   attention_flops_per_token_pair=cost.attention_flops_per_token_pair,
                   flops_per_s=cost.flops_per_s, gpus=gpus)

    def prefill_s(self, tokens: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """Seconds to prefill `tokens` after `prefix` tokens (float64 arrays)."""
        e = np.asarray(tokens, dtype=np.float64)
        p = np.asarray(prefix, dtype=np.float64)
        flops = 2.0 * self.linear_params * e + self.attention_flops_per_token_pair * e * (
            p + e / 2.0)
        return flops / self.flops_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class TierPrice:
    """One tier's loads against the prefill they save, over the trace."""

    name: str
    path: tuple[str, ...]
    bytes_per_s: float
    latency_s: float
    hit_tokens: int
    requests: int  # requests the tier served
    loaded_bytes: int
    load_s: float
    prefill_saved_s: float
    peak_bytes_per_s: float  # the busiest PEAK_WINDOW_S of loads, by arrival
    break_even_tokens: int | None  # Eq. 2: the shortest prefix (from 0) worth fetching

    @property
    def ttft_saved_s(self) -> float:
        """Prefill saved − load added."""
        return self.prefill_saved_s - self.load_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"name": self.name, "path": list(self.path), "bytes_per_s": self.bytes_per_s,
                "latency_s": self.latency_s, "hit_tokens": self.hit_tokens,
                "requests": self.requests, "loaded_bytes": self.loaded_bytes,
                "load_s": self.load_s, "prefill_saved_s": self.prefill_saved_s,
                "ttft_saved_s": self.ttft_saved_s, "peak_bytes_per_s": self.peak_bytes_per_s,
                "break_even_tokens": self.break_even_tokens}


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPricing:
    """Fetch versus recompute over a trace: per tier, and per request where it matters."""

    tiers: tuple[TierPrice, ...]
    requests: int
    prefill_s: float  # Σ prefill after the GPU hit, without the tiers
    load_s: float
    prefill_saved_s: float
    slower_requests: int  # load added > prefill saved
    slower_examples: tuple[tuple[str, float], ...]  # (request id, seconds lost), worst first
    gpu_seconds_saved: float  # (prefill saved − load added) × GPUs per replica
    span_s: float  # the trace's arrival span, for rates per day
    kv_bytes_per_token: int
    links: tuple[Link, ...]
    ttft_saved_s: np.ndarray  # per request

    @property
    def ttft_change_share(self) -> float:
        """Σ TTFT saved / Σ prefill without the tiers (negative: the tiers save time)."""
        saved = self.prefill_saved_s - self.load_s
        return -saved / self.prefill_s if self.prefill_s else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {
            "requests": self.requests, "prefill_s": self.prefill_s, "load_s": self.load_s,
            "prefill_saved_s": self.prefill_saved_s,
            "ttft_saved_s": self.prefill_saved_s - self.load_s,
            "ttft_change_share": self.ttft_change_share,
            "slower_requests": self.slower_requests,
            "slower_examples": [{"request_id": r, "seconds_lost": s}
                                for r, s in self.slower_examples],
            "gpu_seconds_saved": self.gpu_seconds_saved, "span_s": self.span_s,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "tiers": [t.to_dict() for t in self.tiers],
            "links": [link.to_dict() for link in self.links],
        }


def path_of(tier: str, links: Mapping[str, Link]) -> tuple[float, float, tuple[str, ...]]:
    """(bandwidth, latency, link names) of `tier`'s path: the slowest link, latencies summed."""
    names = PATHS[str(tier)]
    return (min(links[n].bytes_per_s for n in names), sum(links[n].latency_s for n in names),
            names)


def break_even_tokens(compute: Compute, kv_bytes_per_token: int, bytes_per_s: float,
                      latency_s: float, limit: int = 1 << 22) -> int | None:
    """Eq. 2 with a latency: the fewest tokens p (from offset 0) whose fetch beats their
    prefill, `α + p·kv_b/B < FLOPs(p)/G`; None when no p up to `limit` does."""
    def wins(p: int) -> bool:
        load = latency_s + p * kv_bytes_per_token / bytes_per_s
        return bool(load < compute.prefill_s(np.array([p]), np.array([0]))[0])

    if not wins(limit):
        return None
    lo, hi = 0, limit  # wins(hi); the gain grows with p (prefill is convex, the load linear)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wins(mid):
            hi = mid
        else:
            lo = mid
    return hi


def price_fetches(*, request_id: np.ndarray, arrival_s: np.ndarray, gpu_hit_tokens: np.ndarray,
                  tier_hits: Sequence[tuple[str, np.ndarray]], compute: Compute,
                  kv_bytes_per_token: int, links: Mapping[str, Link] | None = None,
                  prompt_tokens: np.ndarray) -> FetchPricing:
    """Per request, each tier's load time against the prefill its tokens would cost."""
    links = dict(LINKS if links is None else links)
    g = np.asarray(gpu_hit_tokens, dtype=np.int64)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    arrival = np.asarray(arrival_s, dtype=np.float64)
    n = g.size
    offset = g.copy()
    total_load = np.zeros(n)
    total_saved = np.zeros(n)
    prices = []
    for name, hits in tier_hits:
        e = np.asarray(hits, dtype=np.int64)
        bandwidth, latency, path = path_of(name, links)
        served = e > 0
        nbytes = e * int(kv_bytes_per_token)
        load = np.where(served, latency + nbytes / bandwidth, 0.0)
        saved = np.where(served, compute.prefill_s(e, offset), 0.0)
        offset = offset + e
        total_load += load
        total_saved += saved
        prices.append(TierPrice(
            name=str(name), path=path, bytes_per_s=bandwidth, latency_s=latency,
            hit_tokens=int(e.sum()), requests=int(served.sum()), loaded_bytes=int(nbytes.sum()),
            load_s=float(load.sum()), prefill_saved_s=float(saved.sum()),
            peak_bytes_per_s=_peak_rate(arrival, nbytes),
            break_even_tokens=break_even_tokens(compute, kv_bytes_per_token, bandwidth,
                                                latency)))
    ttft_saved = total_saved - total_load
    slower = (total_load > total_saved) & (total_load > 0)
    worst = np.flatnonzero(slower)
    worst = worst[np.argsort(ttft_saved[worst], kind="stable")][:NAMED]
    prefill = compute.prefill_s(np.maximum(prompt - g, 0), g)
    span = float(arrival.max() - arrival.min()) if n else 0.0
    return FetchPricing(
        tiers=tuple(prices), requests=n, prefill_s=float(prefill.sum()),
        load_s=float(total_load.sum()), prefill_saved_s=float(total_saved.sum()),
        slower_requests=int(slower.sum()),
        slower_examples=tuple((str(request_id[i]), float(-ttft_saved[i])) for i in worst),
        gpu_seconds_saved=float(ttft_saved.sum()) * compute.gpus, span_s=span,
        kv_bytes_per_token=int(kv_bytes_per_token),
        links=tuple(links[k] for k in sorted({n for p in prices for n in p.path})),
        ttft_saved_s=ttft_saved)


def _peak_rate(arrival_s: np.ndarray, nbytes: np.ndarray, window_s: float = PEAK_WINDOW_S
               ) -> float:
    """Bytes per second in the busiest window of `window_s` (by arrival, windows from the
    first arrival)."""
    if arrival_s.size == 0 or not nbytes.any():
        return 0.0
    slot = np.floor((arrival_s - arrival_s.min()) / window_s).astype(np.int64)
    return float(np.bincount(slot, weights=nbytes.astype(np.float64)).max() / window_s)


