"""Markdown for pull-request comments and CI step summaries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaotu_trace.data.report import Report, to_builtins
from yaotu_trace.profile.workload import Profile
from yaotu_trace.render import find_renderer, fmt

# Section name → "module:function" returning Markdown lines; others get a generic list.
SECTION_RENDERERS: dict[str, str] = {
    "profile": "yaotu_trace.render.markdown:profile_lines",
    "prefix_reuse": "yaotu_trace.render.markdown_replay:prefix_reuse_lines",
    "replay_grid": "yaotu_trace.render.markdown_replay:replay_grid_lines",
    "capacity_curve": "yaotu_trace.render.markdown_sweep:capacity_curve_lines",
    "axes": "yaotu_trace.render.markdown_diagnose:axes_lines",
    "principal": "yaotu_trace.render.markdown_diagnose:principal_lines",
    "verdict": "yaotu_trace.render.markdown_diagnose:verdict_lines",
    "ledger": "yaotu_trace.render.markdown_diagnose:ledger_lines",
    "findings": "yaotu_trace.render.markdown_diagnose:findings_lines",
    "simulation": "yaotu_trace.render.markdown_simulate:simulation_lines",
    "comparison": "yaotu_trace.render.markdown_simulate:comparison_lines",
    "checks": "yaotu_trace.render.markdown_check:checks_lines",
}


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    s = report.input
    lines = [
        f"## yaotu-trace {report.command}: `{s.path}`",
        "",
        f"{fmt.count(s.requests)} requests, format `{s.format}`.",
        "",
    ]
    lines += [f"> note: {note}" for note in s.notes]
    for name, section in report.sections.items():
        if section is not None:
            lines += ["", *_renderer(name, section)(section)]
    return "\n".join(lines).rstrip() + "\n"


TYPE_RENDERERS: dict[str, str] = {
    "ReuseOverview": "yaotu_trace.render.markdown:reuse_overview_lines",
}


def _renderer(name: str, section: object = None) -> Callable[[Any], list[str]]:
    renderer = find_renderer(SECTION_RENDERERS, TYPE_RENDERERS, name, section)
    if renderer is not None:
        return renderer
    return lambda section: generic_lines(name, to_builtins(section))


def generic_lines(name: str, data: Any) -> list[str]:
    """Fallback: a two-column table of flattened keys."""
    lines = [f"### {name.replace('_', ' ').title()}", "", "| metric | value |", "|---|---:|"]

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and len(value) > 12:
            lines.append(f"| {path} | [{len(value)} items] |")
        else:
            lines.append(f"| {path} | {'–' if value is None else value} |")

    walk(data, "")
    return lines


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; the first column left-aligned, the rest right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def profile_lines(profile: Profile) -> list[str]:
    """The workload profile as Markdown tables."""
    a = profile.arrivals
    lines = ["### Arrivals", ""]
    lines += table(
        ["metric", "value"],
        [
            ["span", fmt.seconds(a.span_s)],
            ["mean rate", f"{fmt.num(a.mean_rate_rps)} req/s"],
            ["peak (1 s bin)", f"{fmt.count(a.peak_rps)} req/s ({fmt.num(a.peak_to_mean)}× mean)"],
            ["peak (1 min bin)", f"{fmt.count(a.peak_rpm)} req/min"],
            ["interarrival CV", fmt.num(a.interarrival_cv)],
        ],
    )
    header = ["metric", "mean", "p50", "p90", "p99", "max", "n"]
    lines += ["", "### Lengths (tokens)", ""]
    lines += table(header, [fmt.distribution_row("prompt", profile.lengths.prompt_len, fmt.length),
                            fmt.distribution_row("output", profile.lengths.output_len, fmt.length)])
    t = profile.timing
    if t is not None:
        lines += ["", "### Observed timing", ""]
        lines += table(header, [
            fmt.distribution_row("queue time", t.queue_time_s, fmt.seconds),
            fmt.distribution_row("time to first token", t.ttft_s, fmt.seconds),
            fmt.distribution_row("inter-token gap", t.itl_s, fmt.seconds),
            fmt.distribution_row("end-to-end", t.e2e_s, fmt.seconds),
        ])
    return lines


def reuse_overview_lines(overview: Any) -> list[str]:
    """`trace analyze`'s prefix-reuse overview as Markdown."""
    lines = [f"### Prefix reuse (preset {overview.preset}, unlimited capacity)", ""]
    if not overview.available:
        return [*lines, f"Not available: {overview.reason}."]
    rows = [
        ["hit ratio (token-weighted)", fmt.pct(overview.hit_ratio)],
        ["saved prefill tokens", fmt.count(overview.saved_prefill_tokens)],
        ["remaining prefill tokens", fmt.count(overview.remaining_prefill_tokens)],
    ]
    points = [("knee", overview.knee)] + [(f"{p.label} of the reuse", p) for p in overview.shares]
    rows += [[f"LRU capacity for {label}",
              f"{fmt.count(p.capacity_blocks)} blocks ({fmt.tokens(p.capacity_tokens)})"]
             for label, p in points if p is not None]
    return lines + table(["metric", "value"], rows)
