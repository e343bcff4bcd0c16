"""`trace replay --grid`: one row per rule set, in grid order, then notes."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Grid, Heading, Notes, View
from yaotu_trace.render.views.prefix_reuse import as_dict, onoff

GRID_HEADER = ["block size", "tenant isolation", "capacity", "hit ratio (token-weighted)",
               "saved tokens", "remaining tokens"]


def grid_rows(s: dict[str, Any]) -> list[list[str]]:
    """`trace replay --grid`: one row per rule set, in grid order."""
    return [[str(r["block_size_tokens"]), onoff(r["tenant_isolation"]), str(r["capacity"]),
             fmt.pct(r["hit_ratio"]), fmt.count(r["saved_prefill_tokens"]),
             fmt.count(r["remaining_prefill_tokens"])] for r in s["rows"]]


def view(section: Any) -> View:
    """The table of rule sets, then notes."""
    s = as_dict(section)
    return [
        Heading(text=f"Replay grid ({len(s['rows'])} rule sets, {s['requests']:,} requests, "
                     f"{s['prompt_tokens']:,} prompt tokens)",
                markdown=f"Replay grid ({len(s['rows'])} rule sets)"),
        Grid(header=GRID_HEADER, rows=grid_rows(s)),
        Notes(notes=s.get("notes", []), tight=True),
    ]
