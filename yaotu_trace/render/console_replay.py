"""Rich tables for the prefix replay section (`trace replay`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from yaotu_trace.render import replay_view as view
from yaotu_trace.render.console import heading, kv_table


def _table(header: list[str], rows: list[list[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for k, name in enumerate(header):
        table.add_column(name, justify="left" if k == 0 else "right",
                         style="dim" if k == 0 else None, no_wrap=k == 0)
    for row in rows:
        table.add_row(*row)
    return table


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
                _table(["step", "hit tokens", "lost", "of ideal"], wf)]
    for key, title in (("per_tenant", "Per tenant"), ("per_instance", "Per instance")):
        if s.get(key):
            out += [heading(title), _table([title.split()[1], "requests", "prompt tokens",
                                            "hit tokens", "hit ratio"], view.group_rows(s[key]))]
    out += [heading("Hit share of the prompt"),
            _table(["share", "requests"], view.hit_length_rows(s))]
    if s.get("hot_prefixes"):
        out += [heading("Hot prefixes (reuse lost, tokens)"),
                _table(["prefix", "recomputed", "times", "why", "tenants", "example"],
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
        _table(view.GRID_HEADER, view.grid_rows(s)),
    ]
    out += [Text(f"note: {note}", style="yellow") for note in s.get("notes", [])]
    return out
