"""The `prefill_pricing` section: what the prefix cache and each tier below it save in prefill
GPU time, what the tiers add in loads, host memory and bandwidth, in GPU-hours and money per
day of the trace's traffic (`--gpu`, `--tp`, `--link`, `--gpu-price`, `--memory-price`).

The cache's saving is the prefill of its hit tokens (the roofline at MFU 0.5, cost-model
§2.2); a tier's is priced by `sim/fetch.py` (its loads against the prefill they save) and its
size at `--memory-price`. No price is used that the user did not give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.catalog.gpus import find_gpu
from yaotu_trace.catalog.models import ModelSpec, find_model
from yaotu_trace.catalog.prices import (
    GIB,
    Prices,
    gpu_hours_per_day,
    gpu_money_per_day,
    memory_money_per_day,
)
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.options import ReplayOptions

if TYPE_CHECKING:
    from yaotu_trace.sim.fetch import Compute, Link

DEFAULT_MBU = 0.7  # unused by prefill, required by the roofline (cost-model §2.4)


@dataclass(frozen=True, slots=True, kw_only=True)
class PricingOptions:
    """What prices a replay: the GPU of a replica and how many (`--gpu`, `--tp`), the links
    of the tiers' paths (`--link NAME=BANDWIDTH[,LATENCY]`), and the user's prices."""

    gpu: str | None = None
    tp: int = 1
    links: tuple[str, ...] = ()
    gpu_price: str | None = None
    memory_price: str | None = None

    @property
    def asked(self) -> bool:
        """Whether any of them is given."""
        return (self.gpu is not None or bool(self.links) or self.gpu_price is not None
                or self.memory_price is not None)

    def prices(self) -> Prices:
        """The prices, each refused in one line when it is not a number."""
        return Prices.parse(self.gpu_price, self.memory_price)

    def check(self) -> None:
        """Refuse, before any work, what cannot be priced."""
        self.prices()
        if self.links:
            # NOTE: the engine model's modules load only when a run is priced (start-up).
            from yaotu_trace.sim.fetch import links_with

            links_with(self.links)
        if self.gpu is None and self.asked:
            raise ConfigError("pricing prefill needs the GPU it runs on: add --gpu (and --model "
                              "for the FLOPs and KV bytes per token)")
        if self.gpu is not None:
            find_gpu(self.gpu)
        if self.tp < 1:
            raise ConfigError(f"--tp {self.tp} must be at least 1 GPU per replica")


@dataclass(frozen=True, slots=True, kw_only=True)
class TierServed:
    """One tier of a replay: its name, its size in bytes, the tokens it served per request.
    `held` says the size is what an unlimited tier held at the end, not a size given."""

    name: str
    size_bytes: float | None
    hit_tokens: np.ndarray
    held: bool = False


def prefill_compute(model: ModelSpec, gpu: str, tp: int, kv_bytes_per_token: int) -> Compute:
    """The replica's prefill rate: `gpu`'s bf16 peak × MFU 0.5 × `tp` (cost-model §2.2)."""
    from yaotu_trace.sim.fetch import Compute
    from yaotu_trace.sim.roofline import step_cost_for
    from yaotu_trace.sim.scenario import DEFAULT_MFU

    if tp < 1:
        raise ConfigError(f"--tp {tp} must be at least 1 GPU per replica")
    cost = step_cost_for(model, find_gpu(gpu), tp=tp, mfu=DEFAULT_MFU, mbu=DEFAULT_MBU,
                         overhead_ms=0.0, kv_bytes_per_token=kv_bytes_per_token)
    return Compute.of(cost, gpus=tp)


def _money(gpu_seconds: float, span_s: float, prices: Prices) -> dict[str, float | None]:
    return {"gpu_seconds": gpu_seconds, "gpu_hours_per_day": gpu_hours_per_day(gpu_seconds, span_s),
            "gpu_money_per_day": gpu_money_per_day(gpu_seconds, span_s, prices)}


def pricing_section(*, request_id: np.ndarray, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
                    gpu_hit_tokens: np.ndarray, tiers: Sequence[TierServed], compute: Compute,
                    kv_bytes_per_token: int, links: Mapping[str, Link], prices: Prices,
                    gpu: str, gpu_pool_bytes: float | None) -> dict[str, Any]:
    """The section's JSON-ready dict."""
    from yaotu_trace.sim.fetch import price_fetches

    arrival = np.asarray(arrival_s, dtype=np.float64)
    span = float(arrival.max() - arrival.min()) if arrival.size else 0.0
    g = np.asarray(gpu_hit_tokens, dtype=np.int64)
    saved_s = float(compute.prefill_s(g, np.zeros_like(g)).sum())
    full_s = float(compute.prefill_s(np.asarray(prompt_tokens), np.zeros_like(g)).sum())
    section: dict[str, Any] = {
        "gpu": gpu, "gpus_per_replica": compute.gpus, "span_s": span,
        "prices": prices.to_dict(), "kv_bytes_per_token": int(kv_bytes_per_token),
        "prefill_s_without_cache": full_s,
        "gpu_cache": {"hit_tokens": int(g.sum()), "prefill_saved_s": saved_s,
                      "size_bytes": gpu_pool_bytes,
                      **_money(saved_s * compute.gpus, span, prices)},
        "tiers": [], "fetch": None,
        "notes": _pool_notes(gpu_pool_bytes, gpu, compute.gpus, kv_bytes_per_token),
    }
    if not tiers:
        return section
    fetch = price_fetches(request_id=request_id, arrival_s=arrival, gpu_hit_tokens=g,
                          tier_hits=[(t.name, t.hit_tokens) for t in tiers], compute=compute,
                          kv_bytes_per_token=kv_bytes_per_token, links=links,
                          prompt_tokens=prompt_tokens)
    for tier, price in zip(tiers, fetch.tiers, strict=True):
        gpu_s = price.ttft_saved_s * compute.gpus
        memory = (None if tier.size_bytes is None
                  else memory_money_per_day(tier.size_bytes, prices, tier.name))
        money = _money(gpu_s, span, prices)
        net = (None if money["gpu_money_per_day"] is None or memory is None
               else money["gpu_money_per_day"] - memory)
        section["tiers"].append({
            **price.to_dict(), "size_bytes": tier.size_bytes, "size_held_at_end": tier.held,
            "size_gib": None if tier.size_bytes is None else tier.size_bytes / GIB,
            "hit_share": price.hit_tokens / int(np.sum(prompt_tokens)) if len(g) else 0.0,
            **money, "memory_money_per_day": memory, "net_money_per_day": net})
    section["fetch"] = fetch.to_dict()
    return section


def _pool_notes(pool_bytes: float | None, gpu: str, gpus: int,
                kv_bytes_per_token: int) -> list[str]:
    """What the section says when the GPU pool priced holds more KV than the replica's GPUs
    have memory, weights aside: a `--capacity` in another block size than the trace's (an
    engine's num_gpu_blocks of 16 tokens read as the trace's 512-token blocks is 32 times
    the pool) prices a pool that cannot exist."""
    spec = find_gpu(gpu)
    memory = spec.memory_bytes * gpus
    if pool_bytes is None or pool_bytes <= memory:
        return []
    return [f"the GPU pool ({pool_bytes / GIB:,.1f} GiB of KV, "
            f"{pool_bytes / kv_bytes_per_token:,.0f} tokens) is more than the memory of {gpus} "
            f"× {spec.name} ({memory / 1e9:,.0f} GB, "
            f"{memory / kv_bytes_per_token:,.0f} tokens of KV before the weights): --capacity "
            "counts blocks of the trace's block size; give the engine's pool in tokens "
            "(--capacity Ntok) or a --tp that holds it"]


def _held_tokens(tier: Mapping[str, Any]) -> int:
    """The tokens a tier's memory price counts: its size, or for an unlimited tier (which
    never evicts) what it holds at the end, its largest."""
    if not tier.get("unlimited"):
        return int(tier["capacity_tokens"])
    return (int(tier["stored_chunks"]) - int(tier["evicted_chunks"])) * int(tier["chunk_tokens"])


def price_replay(loaded: Trace, options: ReplayOptions, rules: Any, columns: dict[str, Any],
                 pricing: PricingOptions, tiers: dict[str, Any] | None) -> dict[str, Any]:
    """The `prefill_pricing` section of one replay (`columns`: its `--out` columns, `tiers`
    its tiers section): the cache's and its tiers' prefill saved, loads added, GPU-hours and
    money per day. Refused in one line without `--model`."""
    assert pricing.gpu is not None
    if options.model is None:
        raise ConfigError("pricing prefill needs the model's FLOPs and KV bytes per token: add "
                          "--model")
    from yaotu_trace.sim.fetch import links_with

    model = find_model(options.model)
    kv = options.kv_bytes() or model.kv_bytes_per_token
    compute = prefill_compute(model, pricing.gpu, pricing.tp, kv)
    pool = (None if rules.capacity_blocks is None
            else float(rules.capacity_blocks) * rules.block_size_tokens * kv)
    served = tuple(
        TierServed(name=t["name"], size_bytes=float(_held_tokens(t)) * kv,
                   hit_tokens=np.asarray(columns[f"{t['name']}_hit_tokens"]),
                   held=bool(t.get("unlimited")))
        for t in (tiers or {}).get("tiers", ()))
    gpu_hits = columns.get("gpu_hit_tokens", columns["hit_tokens"])
    return pricing_section(
        request_id=np.asarray(columns["request_id"], dtype=object),
        arrival_s=loaded.requests["arrival_s"].to_numpy(dtype=np.float64),
        prompt_tokens=np.asarray(columns["prompt_tokens"]),
        gpu_hit_tokens=np.asarray(gpu_hits), tiers=served, compute=compute,
        kv_bytes_per_token=kv, links=links_with(pricing.links), prices=pricing.prices(),
        gpu=pricing.gpu, gpu_pool_bytes=pool)
