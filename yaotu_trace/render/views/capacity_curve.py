"""The `capacity_curve` section (`trace sweep`): capacities in blocks, tokens and bytes."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import (
    CONSOLE,
    MARKDOWN,
    Block,
    Column,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    View,
)

PER_INSTANCE_HEADER = ["instance", "requests", "unlimited", "knee", "50 %", "90 %", "99 %",
                       "full reuse"]


def view(section: Any) -> View:
    """The summary, the curve as a table, the capacities needed, per instance, definitions."""
    return [*_summary(section), _curve(section), *_needed(section), *_per_instance(section),
            Line(text=f"{section.metric}. Knee: {section.knee_definition}.", style="dim",
                 markdown=f"_{section.metric}. Knee: {section.knee_definition}._"),
            Notes(notes=section.notes, tight=True)]


def _summary(section: Any) -> list[Block]:
    rules = section.rules
    last_token = "on" if rules["last_token_rule"] else "off"
    model = f"{section.model}, " if section.model else ""
    kv = (f"{model}{fmt.count(section.kv_bytes_per_token)} B KV/token"
          if section.kv_bytes_per_token is not None else "KV bytes/token unknown")
    console = [
        ("rules", f"preset {section.preset}: B = {rules['block_size_tokens']}, "
                  f"{rules['touch_order']}, last-token rule {last_token}, partial blocks "
                  f"{'cached' if rules['cache_partial_blocks'] else 'not cached'}"),
        ("caches", f"{fmt.count(section.caches)} ({rules['scope']})"),
        ("requests / prompt tokens", f"{fmt.count(section.requests)} / "
                                     f"{fmt.count(section.prompt_tokens)}"),
        ("cacheable / distinct blocks", f"{fmt.count(section.cacheable_blocks)} / "
                                        f"{fmt.count(section.distinct_blocks)}"),
        ("KV size", kv),
        *_window_rows(section),
        ("unlimited capacity", f"{fmt.pct(section.unlimited_hit_ratio)} of prompt tokens hit "
                               f"({fmt.count(section.unlimited_hit_tokens)} tokens)"),
    ]
    markdown = (
        f"Preset `{section.preset}`: B = {rules['block_size_tokens']}, {rules['touch_order']}, "
        f"last-token rule {last_token}; {fmt.count(section.caches)} cache(s) "
        f"({rules['scope']}). Unlimited capacity: **{fmt.pct(section.unlimited_hit_ratio)}** "
        "of prompt tokens hit.")
    for label, text in _window_rows(section):
        markdown += f" {label.capitalize()}: {text}."

    return [Heading(text="Capacity curve (LRU, every capacity in one pass)",
                    markdown="Capacity curve (LRU)"),
            KeyValues(rows=console, only=CONSOLE),
            Line(text=markdown, only=MARKDOWN)]


def _window_rows(section: Any) -> list[tuple[str, str]]:
    w = getattr(section, "window", None)
    if not w:
        return []
    return [("measured", f"last {fmt.count(w['measured_requests'])} of "
                         f"{fmt.count(w['requests'])} requests (--warmup {w['warmup']}, "
                         f"{fmt.num(w['warmup_seconds'])} s)"),
            ("filled before the window", f"up to {fmt.count(w['distinct_blocks_before_window'])}"
                                         " blocks per cache")]


def _curve(section: Any) -> Grid:
    with_bytes = section.kv_bytes_per_token is not None
    header = ["blocks", "tokens", *(["KV bytes"] if with_bytes else []),
              "hit ratio (token-weighted)", "of unlimited", ""]
    columns = [Column(name=name) for name in header[:-1]] + [Column(name="", align="left",
                                                                    dim=True)]
    rows = [[*fmt.capacity_cells(p, with_bytes), fmt.pct(p.hit_ratio),
             fmt.pct(p.share_of_unlimited), _label(p)] for p in section.points]
    return Grid(header=header, rows=rows, columns=columns)


def _label(point: Any) -> str:
    """The point's label, and `never filled` when its cache had not filled before --warmup's
    window ended (kvcache-simulator omits such a budget)."""
    if point.filled_before_window is False:
        return ", ".join(t for t in (point.label, "not filled before window") if t)
    return str(point.label)


def _needed(section: Any) -> list[Block]:
    """The knee and the 50/90/99 % capacities (and, in the console, full reuse)."""
    with_bytes = section.kv_bytes_per_token is not None

    def shown(point: Any) -> str:
        return " · ".join(fmt.capacity_cells(point, with_bytes, " blocks"))

    key = ([section.knee] if section.knee is not None else []) + list(section.shares)
    console = []
    if section.knee is not None:
        k = section.knee
        console.append(("knee", f"{shown(k)} → {fmt.pct(k.hit_ratio)} "
                                f"({fmt.pct(k.share_of_unlimited)} of unlimited)"))
    console += [(f"{p.label} of unlimited reuse", f"{shown(p)} → {fmt.pct(p.hit_ratio)}")
                for p in section.shares]
    if section.full_reuse is not None:
        console.append(("all of unlimited reuse", shown(section.full_reuse)))
    markdown = [["knee" if p.label == "knee" else f"{p.label} of unlimited reuse", shown(p),
                 fmt.pct(p.hit_ratio)] for p in key]
    out: list[Block] = []
    if console:
        out += [Heading(text="Capacity needed", only=CONSOLE),
                KeyValues(rows=console, only=CONSOLE)]
    out.append(Grid(header=["capacity needed",
                            "blocks, tokens" + (", bytes" if with_bytes else ""),
                            "hit ratio (token-weighted)"],
                    rows=markdown, only=MARKDOWN))
    return out


def _per_instance(section: Any) -> list[Block]:
    if not section.per_instance:
        return []
    rows = [[r.label, fmt.count(r.requests), fmt.pct(r.unlimited_hit_ratio),
             fmt.count(r.knee_blocks), fmt.count(r.blocks_for_50), fmt.count(r.blocks_for_90),
             fmt.count(r.blocks_for_99), fmt.count(r.full_reuse_blocks)]
            for r in section.per_instance]
    columns = [Column(name=name, align="left" if name == "instance" else "right")
               for name in PER_INSTANCE_HEADER]
    return [Grid(header=PER_INSTANCE_HEADER, rows=rows, columns=columns, only=CONSOLE,
                 title="Per instance (blocks per cache)"),
            Line(text="Per instance (blocks per cache):", only=MARKDOWN),
            Grid(header=PER_INSTANCE_HEADER, rows=rows, only=MARKDOWN)]
