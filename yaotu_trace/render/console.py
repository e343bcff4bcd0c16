"""Rich tables for people. Width and colour are passed in; the terminal is never inspected here."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from yaotu_trace.data.report import InputSummary, Report, to_builtins
from yaotu_trace.profile.workload import Profile
from yaotu_trace.render import find_renderer, fmt

SectionRenderer = Callable[[Any], list[RenderableType]]

# Section name → "module:function" returning rich renderables. Sections without an entry are
# shown as a generic key/value table, so a new section is never invisible.
SECTION_RENDERERS: dict[str, str] = {
    "profile": "yaotu_trace.render.console:profile_renderables",
    "prefix_reuse": "yaotu_trace.render.console_replay:prefix_reuse_renderables",
    "replay_grid": "yaotu_trace.render.console_replay:replay_grid_renderables",
    "capacity_curve": "yaotu_trace.render.console_sweep:capacity_curve_renderables",
    "axes": "yaotu_trace.render.console_diagnose:axes_renderables",
    "principal": "yaotu_trace.render.console_diagnose:principal_renderables",
    "verdict": "yaotu_trace.render.console_diagnose:verdict_renderables",
    "ledger": "yaotu_trace.render.console_diagnose:ledger_renderables",
    "findings": "yaotu_trace.render.console_diagnose:findings_renderables",
    "simulation": "yaotu_trace.render.console_simulate:simulation_renderables",
    "comparison": "yaotu_trace.render.console_simulate:comparison_renderables",
    "checks": "yaotu_trace.render.console_check:checks_renderables",
}

# Sections shown before the input summary.
LEAD_SECTIONS: tuple[str, ...] = ("verdict",)


def render_console(report: Report, *, width: int = 100, color: bool = False) -> str:
    """Render every section of the report as rich tables into a string."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
    )
    # A lead section (the diagnose verdict) opens the output, before the input summary.
    for name in LEAD_SECTIONS:
        if report.sections.get(name) is not None:
            for renderable in _section_renderer(name, report.sections[name])(report.sections[name]):
                console.print(renderable)
    for renderable in input_renderables(report.input, report.command):
        console.print(renderable)
    for name, section in report.sections.items():
        if section is None or name in LEAD_SECTIONS:
            continue
        for renderable in _section_renderer(name, section)(section):
            console.print(renderable)
    return buffer.getvalue()


# A section whose value type has its own renderer (the same key can carry different values in
# different commands: `prefix_reuse` is the full replay in `trace replay`, an overview in
# `trace analyze`).
TYPE_RENDERERS: dict[str, str] = {
    "ReuseOverview": "yaotu_trace.render.console:reuse_overview_renderables",
}


def _section_renderer(name: str, section: object = None) -> SectionRenderer:
    renderer = find_renderer(SECTION_RENDERERS, TYPE_RENDERERS, name, section)
    if renderer is not None:
        return renderer
    return lambda section: [generic_table(name, to_builtins(section))]


def heading(text: str) -> Text:
    """A section heading, bold, with a blank line before it."""
    return Text("\n" + text, style="bold")


def kv_table(rows: Iterable[tuple[str, str]], title: str | None = None) -> Table:
    """A two-column table of labelled values."""
    table = Table(box=box.SIMPLE_HEAD, show_header=False, title=title, title_justify="left",
                  pad_edge=False)
    table.add_column("what", style="dim", no_wrap=True)
    table.add_column("value", justify="right")
    for label, value in rows:
        table.add_row(label, value)
    return table


def generic_table(name: str, data: Any, prefix: str = "") -> RenderableType:
    """Fallback for a section with no dedicated renderer: flattened key/value rows."""
    rows: list[tuple[str, str]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and len(value) > 12:
            rows.append((path, f"[{len(value)} items]"))
        else:
            rows.append((path, "–" if value is None else str(value)))

    walk(data, prefix)
    return Group(heading(name.replace("_", " ").title()), kv_table(rows))


def input_renderables(summary: InputSummary, command: str) -> list[RenderableType]:
    """What was read, and any data-quality notes."""
    content = {
        "prompt_tokens": "token ids",
        "prompt_block_ids": f"block ids ({summary.source_block_size} tokens each)",
        None: "lengths only",
    }[summary.content]
    rows = [
        ("file", summary.path),
        ("format", summary.format),
        ("requests", fmt.count(summary.requests)),
        ("prompt content", content),
    ]
    if summary.step_rows is not None:
        rows.append(("engine steps", fmt.count(summary.step_rows)))
    out: list[RenderableType] = [Text(f"yaotu-trace {command}", style="bold"), kv_table(rows)]
    out.extend(Text(f"note: {note}", style="yellow") for note in summary.notes)
    return out


def grid_table(header: list[str], rows: list[list[str]]) -> Table:
    """A table with a header: the first column a dim label, the others right-aligned values."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for k, name in enumerate(header):
        table.add_column(name, justify="left" if k == 0 else "right",
                         style="dim" if k == 0 else None, no_wrap=k == 0)
    for row in rows:
        table.add_row(*row)
    return table


def distribution_table(rows: list[list[str]], title: str) -> Table:
    """Percentile table: one row per metric, columns mean / p50 / p90 / p99 / max / n."""
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    table.add_column("metric", style="dim", no_wrap=True)
    for column in ("mean", "p50", "p90", "p99", "max", "n"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def profile_renderables(profile: Profile) -> list[RenderableType]:
    """The workload profile: arrivals, lengths, population and observed timing."""
    a = profile.arrivals
    arrivals = kv_table(
        [
            ("span", fmt.seconds(a.span_s)),
            ("mean rate", f"{fmt.num(a.mean_rate_rps)} req/s"),
            ("peak (1 s bin)", f"{fmt.count(a.peak_rps)} req/s  ({fmt.num(a.peak_to_mean)}× mean)"),
            ("peak (1 min bin)", f"{fmt.count(a.peak_rpm)} req/min"),
            ("interarrival CV", f"{fmt.num(a.interarrival_cv)}  (Poisson = 1)"),
            ("per-second variance/mean", fmt.num(a.per_second_dispersion)),
            ("median / longest gap",
             f"{fmt.seconds(a.median_gap_s)} / {fmt.seconds(a.longest_gap_s)}"),
        ]
    )
    lengths = profile.lengths
    length_table = distribution_table(
        [
            fmt.distribution_row("prompt tokens", lengths.prompt_len, fmt.length),
            fmt.distribution_row("output tokens", lengths.output_len, fmt.length),
        ],
        title=f"total: {fmt.count(lengths.prompt_tokens_total)} prompt tokens, "
        f"{fmt.count(lengths.output_tokens_total)} output tokens",
    )
    pop = profile.population
    population = kv_table(
        [
            ("tenants", fmt.count(pop.tenants)),
            ("sessions", fmt.count(pop.sessions)),
            ("instances", fmt.count(pop.instances)),
            ("models", fmt.count(pop.models)),
        ]
    )
    out: list[RenderableType] = [
        heading("Arrivals"),
        arrivals,
        heading("Lengths"),
        length_table,
        heading("Population  (– = column absent)"),
        population,
    ]
    timing = profile.timing
    if timing is not None:
        out += [
            heading("Observed timing"),
            distribution_table(
                [
                    fmt.distribution_row("queue time", timing.queue_time_s, fmt.seconds),
                    fmt.distribution_row("time to first token", timing.ttft_s, fmt.seconds),
                    fmt.distribution_row("inter-token gap", timing.itl_s, fmt.seconds),
                    fmt.distribution_row("end-to-end latency", timing.e2e_s, fmt.seconds),
                ],
                title="",
            ),
        ]
        rows = []
        if timing.concurrency_max is not None:
            rows.append(("requests in flight (mean / max)",
                         f"{fmt.num(timing.concurrency_mean)} / "
                         f"{fmt.count(timing.concurrency_max)}"))
        if timing.preempted_requests is not None:
            rows.append(("preempted requests",
                         f"{fmt.count(timing.preempted_requests)} "
                         f"({fmt.pct(timing.preempted_request_share)}), "
                         f"{fmt.count(timing.preemptions_total)} preemptions"))
        if timing.cached_tokens_total is not None:
            rows.append(("engine-reported cached tokens",
                         f"{fmt.count(timing.cached_tokens_total)} "
                         f"({fmt.pct(timing.cached_token_share)} of prompt tokens)"))
        if rows:
            out.append(kv_table(rows))
    return out


def reuse_overview_renderables(overview: Any) -> list[RenderableType]:
    """`trace analyze`'s prefix-reuse overview: reachable reuse and the KV it needs."""
    out: list[RenderableType] = [heading(f"Prefix reuse  (preset {overview.preset}, "
                                         "unlimited capacity)")]
    if not overview.available:
        return [*out, Text(f"not available: {overview.reason}")]
    rows = [
        ("hit ratio (token-weighted)", fmt.pct(overview.hit_ratio)),
        ("saved / remaining prefill", f"{fmt.count(overview.saved_prefill_tokens)} / "
                                      f"{fmt.count(overview.remaining_prefill_tokens)} tokens"),
        ("block size", f"{overview.block_size_tokens} tokens"),
        ("cacheable / distinct blocks", f"{fmt.count(overview.cacheable_blocks)} / "
                                        f"{fmt.count(overview.distinct_blocks)}"),
    ]
    points = [("knee", overview.knee)] + [(f"{p.label} of the reuse", p) for p in overview.shares]
    for label, point in points:
        if point is not None:
            rows.append((f"LRU capacity for {label}",
                         f"{fmt.count(point.capacity_blocks)} blocks "
                         f"({fmt.tokens(point.capacity_tokens)}) → {fmt.pct(point.hit_ratio)}"))
    out.append(kv_table(rows))
    out += [Text(f"note: {note}", style="yellow") for note in overview.notes]
    out.append(Text("details: trace replay (loss waterfall, hot prefixes), trace sweep (curve)",
                    style="dim"))
    return out
