"""The `tier_curve` section (`trace sweep --tier`): hit ratio at every GPU size × tier size."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Column, Grid, Heading, Line, View


def view(section: Any) -> View:
    """One row per GPU size, one column per tier size (and the GPU pool alone)."""
    chunk = section["chunk_tokens"]
    tier = section["tier"]
    header = ["GPU pool", "GPU alone",
              *(f"{tier} {fmt.tokens(c * chunk)}" for c in section["tier_capacity_chunks"])]
    rows = []
    for gpu, alone, ratios in zip(section["gpu_capacity_blocks"], section["gpu_hit_ratio"],
                                  section["hit_ratio"], strict=True):
        label = "unlimited" if gpu is None else f"{fmt.count(gpu)} blocks"
        rows.append([label, fmt.pct(alone), *(fmt.pct(r) for r in ratios)])
    definition = (f"token-weighted hit ratio (GPU plus the {tier} tier) under "
                  f"{section['policy']} rules; each cell is one exact replay")
    if section.get("tier_sizes") == "doublings":  # around a pool the --tier size is under
        definition += (f"; the {tier} sizes are the --tier size and its doublings, as it is no "
                       "larger than the GPU pool")
    return [Heading(text=f"GPU size × {tier} tier size"),
            Grid(header=header, rows=rows,
                 columns=[Column(name=header[0], align="left", no_wrap=True), *(
                     Column(name=h) for h in header[1:])],
                 markdown_align="l" + "r" * (len(header) - 1)),
            Line(text=definition + ".", style="dim", markdown=f"_{definition}._"),
            *([Line(text=section["note"] + ".", style="dim", markdown=f"_{section['note']}._")]
              if section.get("note") else [])]
