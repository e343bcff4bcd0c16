"""`trace analyze`'s prefix-reuse overview: reachable reuse and the KV capacity it needs."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import CONSOLE, MARKDOWN, Heading, KeyValues, Line, Notes, View

# The hit rates shown next to the primary one, by rates.py key: AIPerf's is the number users
# of `aiperf analyze-trace` compare with.
SHOWN_RATES = ("request_averaged_tokens", "full_blocks", "aiperf_request_averaged_blocks")


def view(overview: Any) -> View:
    """Hit ratio, saved and remaining prefill, and the LRU capacities of the knee and shares."""
    preset = f"preset {overview.preset}, " if overview.preset else ""
    head = Heading(text=f"Prefix reuse  ({preset}unlimited capacity)",
                   markdown=f"Prefix reuse ({preset}unlimited capacity)")
    if not overview.available:
        return [head, Line(text=f"not available: {overview.reason}",
                           markdown=f"Not available: {overview.reason}.")]
    saved, remaining = overview.saved_prefill_tokens, overview.remaining_prefill_tokens
    hit = ("hit ratio (token-weighted)", fmt.pct(overview.hit_ratio))
    others = [(f"hit ratio ({r['label']})", fmt.pct(r["value"]))
              for key in SHOWN_RATES if (r := overview.hit_rates.get(key)) is not None]
    points = [("knee", overview.knee)] + [(f"{p.label} of the reuse", p) for p in overview.shares]
    console = [
        hit,
        *others,
        ("saved / remaining prefill", f"{fmt.count(saved)} / {fmt.count(remaining)} tokens"),
        ("block size", f"{overview.block_size_tokens} tokens"),
        ("cacheable / distinct blocks", f"{fmt.count(overview.cacheable_blocks)} / "
                                        f"{fmt.count(overview.distinct_blocks)}"),
    ]
    console += [(f"LRU capacity for {label}", f"{_size(p)} → {fmt.pct(p.hit_ratio)}")
                for label, p in points if p is not None]
    markdown = [hit, *others, ("saved prefill tokens", fmt.count(saved)),
                ("remaining prefill tokens", fmt.count(remaining))]
    window = getattr(overview, "window", None)
    if window:
        measured = ("measured requests", f"last {fmt.count(window['measured_requests'])} of "
                    f"{fmt.count(window['requests'])} (--warmup {window['warmup']})")
        console.insert(1, measured)
        markdown.insert(1, measured)
    markdown += [(f"LRU capacity for {label}", _size(p)) for label, p in points if p is not None]
    return [
        head,
        KeyValues(rows=console, only=CONSOLE),
        KeyValues(rows=markdown, only=MARKDOWN),
        Notes(notes=overview.notes, only=CONSOLE),
        Line(text="details: trace replay (loss waterfall, hot prefixes), trace sweep (curve)",
             style="dim", only=CONSOLE),
    ]


def _size(point: Any) -> str:
    """`5,313 blocks (85k tok, 10.4 GiB)`: the bytes only when the KV bytes per token are
    known (`--model`), so a run without a model reads as before."""
    blocks, *size = fmt.capacity_cells(point, point.capacity_bytes is not None, " blocks")
    return f"{blocks} ({', '.join(size)})"
