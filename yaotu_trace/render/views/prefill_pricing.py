"""The `prefill_pricing` section: what the GPU cache and each tier save in prefill, what the
tiers add in loads and memory, in GPU-hours and money per day of the trace's traffic."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, KeyValues, Notes, View


def money_text(value: float | None) -> str:
    if value is None:
        return fmt.MISSING
    return f"{'−' if value < 0 else ''}${abs(value):,.2f}"


def rate_text(bytes_per_s: float | None) -> str:
    return fmt.MISSING if bytes_per_s is None else f"{bytes_per_s / 1e9:,.2f} GB/s"


def cache_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The GPU prefix cache: its hits as prefill GPU time saved, per day."""
    c = s["gpu_cache"]
    rows = [
        ("GPU", f"{s['gpu']} × {s['gpus_per_replica']} per replica (bf16 peak × MFU 0.5)"),
        ("trace span", fmt.seconds(s["span_s"])),
        ("prefill without any cache", fmt.seconds(s["prefill_s_without_cache"])),
        ("GPU cache hits", f"{fmt.count(c['hit_tokens'])} tokens, "
                           f"{fmt.seconds(c['prefill_saved_s'])} of prefill saved"),
        ("GPU cache saves per day", f"{fmt.num(c['gpu_hours_per_day'])} GPU-h"
                                    + ("" if c["gpu_money_per_day"] is None
                                       else f", {money_text(c['gpu_money_per_day'])}")),
    ]
    if c.get("size_bytes") is not None:
        rows.append(("GPU pool", f"{c['size_bytes'] / 2**30:,.1f} GiB of KV (in the GPU price)"))
    return rows


def tier_rows(s: dict[str, Any]) -> list[list[str]]:
    """Each tier: its size, hits, the prefill they save against the loads they add, and its
    busiest minute of loads."""
    rows = []
    for t in s["tiers"]:
        size = fmt.MISSING if t["size_gib"] is None else f"{t['size_gib']:,.1f} GiB"
        rows.append([t["name"], size, fmt.count(t["hit_tokens"]), fmt.pct(t["hit_share"]),
                     fmt.seconds(t["prefill_saved_s"]), fmt.seconds(t["load_s"]),
                     rate_text(t["peak_bytes_per_s"])])
    return rows


def tier_day_rows(s: dict[str, Any]) -> list[list[str]]:
    """Each tier per day of the trace's traffic: the GPU time it saves, in hours and money,
    its memory's price and the net. A table of its own: joined to the one above, its eleven
    columns folded numbers onto two lines in a 100-character console."""
    return [[t["name"], f"{fmt.num(t['gpu_hours_per_day'])} GPU-h",
             money_text(t["gpu_money_per_day"]), money_text(t["memory_money_per_day"]),
             money_text(t["net_money_per_day"])] for t in s["tiers"]]


def view(section: Any) -> View:
    """The cache's saving, then each tier's ledger."""
    s = section if isinstance(section, dict) else section.to_dict()
    out: list[Block] = [Heading(text="Prefill priced (GPU-hours and money per day of traffic)"),
                        KeyValues(rows=cache_rows(s))]
    notes = []
    if s["tiers"]:
        out += [Heading(text="Tiers: fetch versus recompute", level=4),
                Grid(header=["tier", "size", "hits", "of prompt", "prefill saved", "load added",
                             "peak load"], rows=tier_rows(s)),
                Grid(header=["tier", "saves per day", "GPU $/day", "memory $/day", "net $/day"],
                     rows=tier_day_rows(s))]
        f = s["fetch"]
        notes.append(f"{fmt.count(f['slower_requests'])} request(s) load more slowly than they "
                     "would recompute" + ("" if not f["slower_examples"] else ": " + ", ".join(
                         e["request_id"] for e in f["slower_examples"][:5])))
        notes += [f"{link['name']}: {link['source']}" for link in f["links"]]
        notes += [f"{t['name']} is unlimited: its size is what it held at the end (it never "
                  "evicts), priced so" for t in s["tiers"] if t.get("size_held_at_end")]
        notes += _memory_price_notes(s)
    if s["prices"]["gpu_per_hour"] is None:
        notes.append("no --gpu-price: GPU time stays in GPU-hours")
    notes += s.get("notes", [])
    out.append(Notes(notes=notes))
    return out


def _memory_price_notes(s: dict[str, Any]) -> list[str]:
    """Which $/GiB-month priced each tier's memory, when --memory-price gave more than one."""
    own = s["prices"].get("memory_per_gib_month_by_tier") or {}
    if not own:
        return []
    common = s["prices"]["memory_per_gib_month"]
    prices = [(t["name"], own.get(t["name"], common)) for t in s["tiers"]]
    said = [f"{name} ${price:g}" if price is not None else f"{name} none"
            for name, price in prices]
    return ["memory priced per GiB-month (--memory-price): " + ", ".join(said)]
