"""Rich tables of the `capacity_curve` section: capacities in blocks, tokens and bytes."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from yaotu_trace.render import fmt
from yaotu_trace.render.console import heading, kv_table


def capacity_curve_renderables(section: Any) -> list[RenderableType]:
    """The curve as a table, the knee and the 50/90/99 % capacities, then definitions."""
    with_bytes = section.kv_bytes_per_token is not None
    rules = section.rules
    model = f"{section.model}, " if section.model else ""
    kv = (f"{model}{fmt.count(section.kv_bytes_per_token)} B KV/token" if with_bytes
          else "KV bytes/token unknown")
    summary = kv_table([
        ("rules", f"preset {section.preset}: B = {rules['block_size_tokens']}, "
                  f"{rules['touch_order']}, last-token rule "
                  f"{'on' if rules['last_token_rule'] else 'off'}, partial blocks "
                  f"{'cached' if rules['cache_partial_blocks'] else 'not cached'}"),
        ("caches", f"{fmt.count(section.caches)} ({rules['scope']})"),
        ("requests / prompt tokens", f"{fmt.count(section.requests)} / "
                                     f"{fmt.count(section.prompt_tokens)}"),
        ("cacheable / distinct blocks", f"{fmt.count(section.cacheable_blocks)} / "
                                        f"{fmt.count(section.distinct_blocks)}"),
        ("KV size", kv),
        ("unlimited capacity", f"{fmt.pct(section.unlimited_hit_ratio)} of prompt tokens hit "
                               f"({fmt.count(section.unlimited_hit_tokens)} tokens)"),
    ])
    out: list[RenderableType] = [heading("Capacity curve (LRU, every capacity in one pass)"),
                                 summary]

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("blocks", "tokens", *(("KV bytes",) if with_bytes else ())):
        table.add_column(column, justify="right")
    table.add_column("hit ratio", justify="right")
    table.add_column("of unlimited", justify="right")
    table.add_column("", style="dim")
    for p in section.points:
        table.add_row(*fmt.capacity_cells(p, with_bytes), fmt.pct(p.hit_ratio),
                      fmt.pct(p.share_of_unlimited), p.label)
    out.append(table)

    key_rows = []
    if section.knee is not None:
        k = section.knee
        key_rows.append(("knee", f"{' · '.join(fmt.capacity_cells(k, with_bytes, ' blocks'))} → "
                                 f"{fmt.pct(k.hit_ratio)} ({fmt.pct(k.share_of_unlimited)} "
                                 "of unlimited)"))
    for p in section.shares:
        shown = " · ".join(fmt.capacity_cells(p, with_bytes, " blocks"))
        key_rows.append((f"{p.label} of unlimited reuse", f"{shown} → {fmt.pct(p.hit_ratio)}"))
    if section.full_reuse is not None:
        f = section.full_reuse
        shown = " · ".join(fmt.capacity_cells(f, with_bytes, " blocks"))
        key_rows.append(("all of unlimited reuse", shown))
    if key_rows:
        out += [heading("Capacity needed"), kv_table(key_rows)]
    if section.per_instance:
        per = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Per instance (blocks per cache)",
                    title_justify="left")
        for column in ("instance", "requests", "unlimited", "knee", "50 %", "90 %", "99 %",
                       "full reuse"):
            per.add_column(column, justify="left" if column == "instance" else "right")
        for row in section.per_instance:
            per.add_row(row.label, fmt.count(row.requests), fmt.pct(row.unlimited_hit_ratio),
                        fmt.count(row.knee_blocks), fmt.count(row.blocks_for_50),
                        fmt.count(row.blocks_for_90), fmt.count(row.blocks_for_99),
                        fmt.count(row.full_reuse_blocks))
        out.append(per)
    out.append(Text(f"{section.metric}. Knee: {section.knee_definition}.", style="dim"))
    out += [Text(f"note: {note}", style="yellow") for note in section.notes]
    return out
