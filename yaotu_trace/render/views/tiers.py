"""The `tiers` section (`trace analyze --tier`, `trace diagnose --tier`): which source served
what with tiers below the GPU pool."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Grid, Heading, Line, Notes, View
from yaotu_trace.render.views.prefix_reuse import TIER_HEADER, tier_legend, tier_rows


def view(section: Any) -> View:
    """The GPU pool, each tier and the total, as `trace replay` shows them, and the replay's
    notes on the tiers (`trace replay` prints them with its other notes)."""
    blocks = section.get("gpu_capacity_blocks")
    pool = ("an unlimited GPU pool" if blocks is None
            else f"a GPU pool of {fmt.count(blocks)} blocks of {section['block_size_tokens']} "
                 "tokens")
    text = (f"Preset {section['preset']}, {pool}, {section['policy']} rules; hit tokens by "
            "the source that served them (trace replay --tier has the waterfall).")
    return [Heading(text="Tiers below the GPU"), Line(text=text, style="dim"),
            Grid(header=TIER_HEADER, rows=tier_rows({  # the GPU row in tokens, as the tiers
                "tiers": section, "rules": {"block_size_tokens": section["block_size_tokens"]}})),
            Line(text=tier_legend(section), style="dim"),
            Notes(notes=section.get("notes", []))]
