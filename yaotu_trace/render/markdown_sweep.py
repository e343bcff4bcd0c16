"""Markdown of the `capacity_curve` section."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.markdown import table


def capacity_curve_lines(section: Any) -> list[str]:
    """The curve table, the knee and the 50/90/99 % capacities."""
    with_bytes = section.kv_bytes_per_token is not None
    rules = section.rules
    lines = [
        "### Capacity curve (LRU)",
        "",
        f"Preset `{section.preset}`: B = {rules['block_size_tokens']}, {rules['touch_order']}, "
        f"last-token rule {'on' if rules['last_token_rule'] else 'off'}; "
        f"{fmt.count(section.caches)} cache(s) ({rules['scope']}). Unlimited capacity: "
        f"**{fmt.pct(section.unlimited_hit_ratio)}** of prompt tokens hit.",
        "",
    ]
    header = ["blocks", "tokens", *(["KV bytes"] if with_bytes else []), "hit ratio",
              "of unlimited", ""]
    rows = [[*fmt.capacity_cells(p, with_bytes), fmt.pct(p.hit_ratio),
             fmt.pct(p.share_of_unlimited), p.label] for p in section.points]
    lines += table(header, rows)
    lines += ["", "| capacity needed | blocks, tokens" + (", bytes" if with_bytes else "")
              + " | hit ratio |", "|---|---:|---:|"]
    key = ([section.knee] if section.knee is not None else []) + list(section.shares)
    for p in key:
        name = "knee" if p.label == "knee" else f"{p.label} of unlimited reuse"
        lines.append(f"| {name} | {' · '.join(fmt.capacity_cells(p, with_bytes, ' blocks'))} | "
                     f"{fmt.pct(p.hit_ratio)} |")
    if section.per_instance:
        lines += ["", "Per instance (blocks per cache):", ""]
        lines += table(
            ["instance", "requests", "unlimited", "knee", "50 %", "90 %", "99 %", "full reuse"],
            [[r.label, fmt.count(r.requests), fmt.pct(r.unlimited_hit_ratio),
              fmt.count(r.knee_blocks), fmt.count(r.blocks_for_50), fmt.count(r.blocks_for_90),
              fmt.count(r.blocks_for_99), fmt.count(r.full_reuse_blocks)]
             for r in section.per_instance],
        )
    lines += ["", f"_{section.metric}. Knee: {section.knee_definition}._"]
    lines += [f"> note: {note}" for note in section.notes]
    return lines
