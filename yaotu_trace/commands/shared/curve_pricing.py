"""The `curve_pricing` section of `trace sweep`: every capacity-curve point and every tier-curve
point in GPU-hours and money per day of the trace's traffic (`--gpu`, `--gpu-price`,
`--memory-price`, `--link`).

A point's saving needs each request's hits (the prefill a hit saves grows with its offset in
the prompt), which the one-pass curve does not keep: each capacity-curve point is replayed once
more under the clean LRU the curve is (its hits are the curve's, checked), and each tier-curve
point is priced from the exact replay that drew it. The GPU pool's memory is in the GPU price;
a tier's is at `--memory-price`. No price is used that the user did not give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.catalog.models import find_model
from yaotu_trace.catalog.prices import GIB, Prices
from yaotu_trace.commands.shared.pricing import (
    PricingOptions,
    TierServed,
    prefill_compute,
    pricing_section,
)
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.sim.fetch import Compute, Link

# The fields of a priced tier kept on each tier-curve point.
TIER_FIELDS = ("hit_tokens", "prefill_saved_s", "load_s", "ttft_saved_s", "gpu_hours_per_day",
               "gpu_money_per_day", "memory_money_per_day", "net_money_per_day",
               "peak_bytes_per_s", "slower_requests")


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePricer:
    """Prices one point from its per-request hits, on the trace's requests and span."""

    compute: Compute
    kv_bytes_per_token: int
    links: dict[str, Link]
    prices: Prices
    gpu: str
    request_id: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray

    @classmethod
    def of(cls, loaded: Trace, model: str | None, kv_bytes_per_token: int | None,
           pricing: PricingOptions) -> CurvePricer:
        """Refused in one line without the model (FLOPs, KV bytes) or the GPU."""
        from yaotu_trace.sim.fetch import links_with

        assert pricing.gpu is not None
        if model is None:
            raise ConfigError("pricing the curve needs the model's FLOPs and KV bytes per "
                              "token: add --model")
        spec = find_model(model)
        kv = kv_bytes_per_token or spec.kv_bytes_per_token
        req = loaded.requests
        return cls(compute=prefill_compute(spec, pricing.gpu, pricing.tp, kv),
                   kv_bytes_per_token=kv, links=links_with(pricing.links),
                   prices=pricing.prices(), gpu=pricing.gpu,
                   request_id=req["request_id"].astype(str).to_numpy(dtype=object),
                   arrival_s=req["arrival_s"].to_numpy(dtype=np.float64),
                   prompt_tokens=req["prompt_len"].to_numpy(dtype=np.int64))

    def _section(self, gpu_hits: np.ndarray, tiers: tuple[TierServed, ...],
                 pool_bytes: float | None) -> dict[str, Any]:
        return pricing_section(
            request_id=self.request_id, arrival_s=self.arrival_s,
            prompt_tokens=self.prompt_tokens, gpu_hit_tokens=gpu_hits, tiers=tiers,
            compute=self.compute, kv_bytes_per_token=self.kv_bytes_per_token, links=self.links,
            prices=self.prices, gpu=self.gpu, gpu_pool_bytes=pool_bytes)

    def head(self) -> dict[str, Any]:
        """What every point shares: the GPU, the prices, the span, prefill without a cache."""
        s = self._section(np.zeros_like(self.prompt_tokens), (), None)
        return {k: s[k] for k in ("gpu", "gpus_per_replica", "span_s", "prices",
                                  "kv_bytes_per_token", "prefill_s_without_cache")}

    def gpu_point(self, gpu_hits: np.ndarray, pool_bytes: float | None) -> dict[str, Any]:
        """The GPU pool's hits: prefill saved, GPU-hours and money per day."""
        c = self._section(np.asarray(gpu_hits), (), pool_bytes)["gpu_cache"]
        return {"hit_tokens": c["hit_tokens"], "prefill_saved_s": c["prefill_saved_s"],
                "gpu_hours_per_day": c["gpu_hours_per_day"],
                "gpu_money_per_day": c["gpu_money_per_day"],
                "size_gib": None if pool_bytes is None else pool_bytes / GIB}

    def tier_point(self, gpu_hits: np.ndarray, name: str, tier_hits: np.ndarray,
                   size_bytes: float) -> dict[str, Any]:
        """One tier below the pool: its loads against the prefill it saves, net per day."""
        s = self._section(np.asarray(gpu_hits), (TierServed(
            name=name, size_bytes=size_bytes, hit_tokens=np.asarray(tier_hits)),), None)
        t = s["tiers"][0]
        out = {k: t.get(k) for k in TIER_FIELDS if k != "slower_requests"}
        out["slower_requests"] = s["fetch"]["slower_requests"]
        out["size_gib"] = size_bytes / GIB
        return out
