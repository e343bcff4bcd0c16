"""The residency section (`trace replay --residency`): capacity misses explained, reuse
distances, what a TTL keeps, vLLM's residency histograms and the most reused prefixes.

Takes the section as `Residency.to_dict()`; every number is already in it.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, KeyValues, Line, Notes, View

QUANTILE_KEYS = ("p50", "p90", "p99")


def _ttl_label(seconds: float) -> str:
    if seconds >= 3600:
        return f"{fmt.num(seconds / 3600, 0)} h"
    if seconds >= 60:
        return f"{fmt.num(seconds / 60, 0)} min"
    return f"{fmt.num(seconds, 0)} s"


def miss_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """How many requests lost reuse to capacity, and how long their blocks had sat idle."""
    m = s["capacity_misses"]
    capacity = ("unlimited" if s["capacity_blocks"] is None
                else f"{fmt.count(s['capacity_blocks'])} blocks ({s['accounting']})")
    pool, *below = str(s["tier"]).split("+")
    tier = f"{pool}, {capacity}"
    if below:  # the GPU pool's capacity, and the tiers under it
        names = below[0] if len(below) == 1 else f"{', '.join(below[:-1])} and {below[-1]}"
        tier = f"{pool}, {capacity}, with the {names} tier{'s' if len(below) > 1 else ''} below"
    rows = [
        ("tier", tier),
        ("reusable (held before, same caches)", f"{fmt.count(s['reusable_tokens'])} tokens"),
        ("hit", f"{fmt.count(s['hit_tokens'])} tokens"),
        ("lost to capacity", f"{fmt.count(m['tokens'])} tokens in "
                             f"{fmt.count(m['requests'])} requests"),
        ("explained (evicted block named)",
         "not followed under this policy (note below)" if m["explained_requests"] is None
         else fmt.count(m["explained_requests"])),
    ]
    if m["rejected_requests"]:
        rows.append(("refused by the pool", fmt.count(m["rejected_requests"])))
    idle = m.get("idle_at_eviction_s")
    if idle:
        rows.append(("idle at eviction p50 / p90 / p99 / max",
                     " / ".join(fmt.seconds(idle[k]) for k in (*QUANTILE_KEYS, "max"))))
    return rows


def distance_rows(s: dict[str, Any]) -> list[list[str]]:
    """Reuse distance of hits and of capacity misses, in seconds and in distinct blocks."""
    rows = []
    for key, label in (("hits", "hits"), ("capacity_misses", "capacity misses")):
        d = s["reuse_distance"][key]
        sec, blk = d["seconds"], d["distinct_blocks"]
        rows.append([label, fmt.count(d["blocks"]), fmt.count(d["tokens"]),
                     " / ".join(fmt.seconds(sec[k]) for k in QUANTILE_KEYS),
                     " / ".join(fmt.count(blk[k]) for k in QUANTILE_KEYS)])
    return rows


def ttl_rows(s: dict[str, Any]) -> list[list[str]]:
    """What each cache lifetime keeps of the reusable tokens."""
    return [[_ttl_label(r["ttl_s"]), fmt.count(r["kept_tokens"]), fmt.pct(r["kept_share"]),
             fmt.pct(r["hit_ratio"])] for r in s["ttl"]]


def histogram_rows(s: dict[str, Any]) -> list[list[str]]:
    """vLLM's three histograms as the replay computes them, and the engine's where exported
    (its quantiles read from its buckets, beside the replay's read the same way)."""
    rows = []
    for h in s["histograms"].values():
        q = h["quantiles_s"]
        name = h["metric"].removeprefix("vllm:kv_block_").removesuffix("_seconds")
        rows.append([name, "replay", fmt.count(h["count"]), fmt.seconds(h["mean_s"]),
                     *(fmt.seconds(q[k]) for k in QUANTILE_KEYS)])
        engine = h.get("engine")
        if engine:
            rows.append([name, "replay (buckets)", "", "",
                         *(fmt.seconds(engine.get(f"replay_{k}_s")) for k in QUANTILE_KEYS)])
            rows.append([name, "engine (buckets)", fmt.count(engine["count"]),
                         fmt.seconds(engine["mean_s"]),
                         *(fmt.seconds(engine.get(f"{k}_s")) for k in QUANTILE_KEYS)])
    return rows


def prefix_rows(prefixes: list[dict[str, Any]]) -> list[list[str]]:
    """The most reused prefixes."""
    return [[fmt.count(p["prefix_tokens"]), fmt.count(p["requests"]),
             fmt.count(p["reused_tokens"]),
             ", ".join(p["tenants"][:4]) + (" …" if len(p["tenants"]) > 4 else "")
             or fmt.MISSING, p["example_request_id"]] for p in prefixes]


def view(section: Any) -> View:
    """Misses, distances, TTL, histograms, reused prefixes, notes."""
    s = section if isinstance(section, dict) else section.to_dict()
    out: list[Block] = [Heading(text="KV residency: capacity misses explained"),
                        KeyValues(rows=miss_rows(s))]
    out += [Heading(text="Reuse distance (p50 / p90 / p99)", level=4),
            Grid(header=["lookups", "blocks", "tokens", "seconds", "distinct blocks"],
                 rows=distance_rows(s)),
            Line(text=f"{fmt.count(s['reuse_distance']['cold_blocks'])} lookup blocks were "
                      "never held before (cold)", style="dim")]
    if s["ttl"]:
        five = next((r for r in s["ttl"] if r["ttl_s"] == 300), None)
        out += [Heading(text="Cache lifetime (TTL, refreshed on use)", level=4),
                Grid(header=["TTL", "kept tokens", "of reusable", "hit ratio"],
                     rows=ttl_rows(s))]
        if five is not None:
            out.append(Line(text=f"a 5-minute cache lifetime keeps {fmt.pct(five['kept_share'])}"
                                 " of the reusable tokens"))
    if s["histograms"]:
        out += [Heading(text="vLLM residency histograms (vllm:kv_block_*_seconds)", level=4),
                Grid(header=["histogram", "from", "count", "mean", "p50", "p90", "p99"],
                     rows=histogram_rows(s))]
    top = s["top_reused_prefixes"]
    for key, title in (("by_requests", "Most reused prefixes (by requests)"),
                       ("by_tokens", "Most reused prefixes (by reused tokens)")):
        if top[key]:
            out += [Heading(text=title, level=4),
                    Grid(header=["prefix", "requests", "reused tokens", "tenants", "example"],
                         rows=prefix_rows(top[key]))]
    out.append(Notes(notes=s.get("notes", [])))
    return out
