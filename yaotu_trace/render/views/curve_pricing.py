"""The `curve_pricing` section of `trace sweep`: each capacity point's prefill saved in
GPU-hours and money per day, and each tier-curve point's net of its loads and memory."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, Notes, View
from yaotu_trace.render.views.prefill_pricing import money_text, rate_text


def _gib(value: float | None) -> str:
    if value is None:
        return fmt.MISSING
    return f"{value:,.0f} GiB" if value >= 10 else f"{value:.3g} GiB"


def _blocks(value: int | None) -> str:
    return "unlimited" if value is None else fmt.count(value)


def view(section: Any) -> View:
    """The capacity points, then the GPU size × tier size points."""
    s = section if isinstance(section, dict) else section.to_dict()
    rows = [[p["label"] or "", fmt.count(p["capacity_blocks"]), _gib(p["size_gib"]),
             fmt.pct(p["hit_ratio"]), fmt.seconds(p["prefill_saved_s"]),
             f"{fmt.num(p['gpu_hours_per_day'])} GPU-h", money_text(p["gpu_money_per_day"])]
            for p in s["capacity_points"]]
    out: list[Block] = [
        Heading(text="The curve priced (per day of the trace's traffic)"),
        Grid(header=["point", "blocks", "KV", "hit ratio", "prefill saved", "saves/day",
                     "GPU $/day"], rows=rows)]
    if s.get("tier_points"):
        tier_rows = []
        for p in s["tier_points"]:
            if "gpu" in p:
                g = p["gpu"]
                tier_rows.append([_blocks(p["gpu_capacity_blocks"]), "none",
                                  fmt.count(g["hit_tokens"]), fmt.MISSING,
                                  fmt.seconds(g["prefill_saved_s"]),
                                  f"{fmt.num(g['gpu_hours_per_day'])} GPU-h",
                                  money_text(g["gpu_money_per_day"]), fmt.MISSING])
                continue
            t = p["tier"]
            tier_rows.append([_blocks(p["gpu_capacity_blocks"]),
                              _gib(t["size_gib"]), fmt.count(t["hit_tokens"]),
                              fmt.seconds(t["load_s"]), fmt.seconds(t["prefill_saved_s"]),
                              f"{fmt.num(t['gpu_hours_per_day'])} GPU-h",
                              money_text(t["net_money_per_day"]),
                              rate_text(t["peak_bytes_per_s"])])
        out += [Heading(text="GPU pool × tier: the pool alone, then what the tier adds", level=4),
                Grid(header=["GPU blocks", "tier", "hits", "load", "saved", "net/day",
                             "net $/day", "peak load"], rows=tier_rows)]
    prices = s["prices"]
    notes = [f"{s['gpu']} × {s['gpus_per_replica']} per replica (bf16 peak × MFU 0.5); each "
             "capacity point replayed once more under the clean LRU (its hits are the curve's); "
             "the GPU pool's memory is in the GPU price; a tier's net is its prefill saved less "
             "its loads, in GPU money, less its memory at --memory-price (curve_pricing."
             "tier_points in the JSON has each part)"]
    if prices["gpu_per_hour"] is None:
        notes.append("no --gpu-price: GPU time stays in GPU-hours")
    if (s.get("tier_points") and prices["memory_per_gib_month"] is None
            and not prices.get("memory_per_gib_month_by_tier")):
        notes.append("no --memory-price: a tier's memory stays in GiB")
    out.append(Notes(notes=notes))
    return out
