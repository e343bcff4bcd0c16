"""The `capacity_table` section (`trace sweep --capacities`): curve and replay side by side."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Column, Grid, Heading, Line, Notes, View


def view(section: Any) -> View:
    """One row per asked capacity: its size, the curve's hit ratio and the replay's."""
    with_bytes = section.kv_bytes_per_token is not None
    curve = f"curve ({section.curve_model})"
    replayed = f"replay ({section.replay_model})"
    header = ["capacity", "blocks", "tokens", *(["KV bytes"] if with_bytes else []), curve,
              replayed, "replay − curve"]
    rows = []
    for r in section.rows:
        if r.capacity_blocks is None:
            size = ["unlimited", "", *([""] if with_bytes else [])]
        else:
            size = fmt.capacity_cells(r, with_bytes)
        diff = r.replay_hit_tokens - r.curve_hit_tokens
        rows.append([r.label, *size, fmt.pct(r.curve_token_weighted_hit_ratio),
                     fmt.pct(r.replay_token_weighted_hit_ratio),
                     "0" if diff == 0 else f"{diff:+,} tok"])
    columns = [Column(name=h, align="left" if h == "capacity" else "right",
                      no_wrap=h in (curve, replayed)) for h in header]
    definition = (f"hit ratio = {section.hit_ratio_definition}, per cache at each capacity; "
                  f"the curve is the one-pass {section.curve_model} model, the replay follows "
                  f"preset {section.preset}'s accounting ({section.replay_model})")
    return [Heading(text="Listed capacities (hit ratio, token-weighted)"),
            Grid(header=header, rows=rows, columns=columns, markdown_align="l" + "r" * (
                len(header) - 1)),
            Line(text=definition + ".", style="dim", markdown=f"_{definition}._"),
            Notes(notes=section.notes, tight=True)]
