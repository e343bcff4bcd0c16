"""Rich tables for the prefix replay section (`trace replay`)."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from yaotu_trace.render import replay_view as view
from yaotu_trace.render.console import grid_table, heading, kv_table


def prefix_reuse_renderables(section: Any) -> list[RenderableType]:
    """Headline, rules, waterfall, breakdowns, hot prefixes, observed vs replayed, notes."""
    s = view.as_dict(section)
    out: list[RenderableType] = [
        heading("Prefix reuse (replay)"),
        kv_table(view.headline_rows(s)),
        heading("Effective rules"),
        kv_table(view.rule_rows(s)),
    ]
    wf = view.waterfall_rows(s)
    if wf:
        out += [heading("Loss waterfall (hit tokens)"),
                grid_table(["step", "hit tokens", "lost", "of ideal"], wf)]
    for key, title in (("per_tenant", "Per tenant"), ("per_instance", "Per instance")):
        if s.get(key):
            out += [heading(title), grid_table([title.split()[1], "requests", "prompt tokens",
                                                "hit tokens", "hit ratio"],
                                               view.group_rows(s[key]))]
    out += [heading("Hit share of the prompt"),
            grid_table(["share", "requests"], view.hit_length_rows(s))]
    if s.get("hot_prefixes"):
        out += [heading("Hot prefixes (reuse lost, tokens)"),
                grid_table(["prefix", "recomputed", "times", "why", "tenants", "example"],
                           view.hot_rows(s))]
    observed = view.observed_rows(s)
    if observed:
        out += [heading("Observed vs replayed"), kv_table(observed)]
    out += [Text(f"note: {note}", style="yellow") for note in s.get("notes", [])]
    return out


def replay_grid_renderables(section: Any) -> list[RenderableType]:
    """`--grid`: the table of rule sets, then notes."""
    s = view.as_dict(section)
    out: list[RenderableType] = [
        heading(f"Replay grid ({len(s['rows'])} rule sets, {s['requests']:,} requests, "
                f"{s['prompt_tokens']:,} prompt tokens)"),
        grid_table(view.GRID_HEADER, view.grid_rows(s)),
    ]
    out += [Text(f"note: {note}", style="yellow") for note in s.get("notes", [])]
    return out
