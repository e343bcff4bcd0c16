"""The workload profile (`trace analyze`): arrivals, lengths, population and observed timing.

The terminal shows every number; Markdown, read in a pull request, keeps the arrivals, lengths
and timing tables.
"""

from __future__ import annotations

from yaotu_trace.data.workload_profile import Profile
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import CONSOLE, MARKDOWN, Block, Grid, Heading, KeyValues, View

DISTRIBUTION_HEADER = ["metric", "mean", "p50", "p90", "p99", "max", "n"]


def view(profile: Profile) -> View:
    """Arrivals, lengths, population (console), then observed timing when the trace has it."""
    return [*_arrivals(profile), *_lengths(profile), *_population(profile), *_timing(profile)]


def _arrivals(profile: Profile) -> list[Block]:
    a = profile.arrivals
    if a is None:
        return [Heading(text="Arrivals"), KeyValues(rows=[
            ("arrivals", "none in the trace: arrival and timing need a timestamp column")])]
    common = [
        ("span", fmt.seconds(a.span_s)),
        ("mean rate", f"{fmt.num(a.mean_rate_rps)} req/s"),
    ]
    console = [
        *common,
        ("peak (1 s bin)", f"{fmt.count(a.peak_rps)} req/s  ({fmt.num(a.peak_to_mean)}× mean)"),
        ("peak (1 min bin)", f"{fmt.count(a.peak_rpm)} req/min"),
        ("interarrival CV", f"{fmt.num(a.interarrival_cv)}  (Poisson = 1)"),
        ("per-second variance/mean", fmt.num(a.per_second_dispersion)),
        ("median / longest gap", f"{fmt.seconds(a.median_gap_s)} / {fmt.seconds(a.longest_gap_s)}"),
    ]
    markdown = [
        *common,
        ("peak (1 s bin)", f"{fmt.count(a.peak_rps)} req/s ({fmt.num(a.peak_to_mean)}× mean)"),
        ("peak (1 min bin)", f"{fmt.count(a.peak_rpm)} req/min"),
        ("interarrival CV", fmt.num(a.interarrival_cv)),
    ]
    return [Heading(text="Arrivals"), KeyValues(rows=console, only=CONSOLE),
            KeyValues(rows=markdown, only=MARKDOWN)]


def basis(profile: Profile) -> str:
    """Which requests lengths and timing describe ("" without a status column)."""
    if profile.successful_requests is None:
        return ""
    return (f"successful requests only: {fmt.count(profile.successful_requests)} of "
            f"{fmt.count(profile.requests)}")


def _titled(title: str, aside: str, sep: str = "  ") -> str:
    return f"{title}{sep}({aside})" if aside else title


def _lengths(profile: Profile) -> list[Block]:
    lengths = profile.lengths
    total = (f"total: {fmt.count(lengths.prompt_tokens_total)} prompt tokens, "
             f"{fmt.count(lengths.output_tokens_total)} output tokens")
    return [
        Heading(text=_titled("Lengths", basis(profile)),
                markdown=_titled("Lengths", "; ".join(filter(None, ("tokens", basis(profile)))),
                                 sep=" ")),
        Grid(header=DISTRIBUTION_HEADER, title=total, only=CONSOLE, rows=[
            fmt.distribution_row("prompt tokens", lengths.prompt_len, fmt.length),
            fmt.distribution_row("output tokens", lengths.output_len, fmt.length)]),
        Grid(header=DISTRIBUTION_HEADER, only=MARKDOWN, rows=[
            fmt.distribution_row("prompt", lengths.prompt_len, fmt.length),
            fmt.distribution_row("output", lengths.output_len, fmt.length)]),
    ]


def _population(profile: Profile) -> list[Block]:
    pop = profile.population
    return [
        Heading(text="Population  (– = column absent)", only=CONSOLE),
        KeyValues(only=CONSOLE, rows=[
            ("tenants", fmt.count(pop.tenants)),
            ("sessions", fmt.count(pop.sessions)),
            ("instances", fmt.count(pop.instances) + (
                f" ({fmt.count(pop.prefill_instances)} prefill + "
                f"{fmt.count(pop.decode_instances)} decode)"
                if pop.prefill_instances is not None else "")),
            ("models", fmt.count(pop.models)),
        ]),
    ]


def _timing(profile: Profile) -> list[Block]:
    t = profile.timing
    if t is None:
        return []
    rows = [
        fmt.distribution_row("queue time", t.queue_time_s, fmt.seconds),
        fmt.distribution_row("time to first token" + (" (client)" if t.ttft_source else ""),
                             t.ttft_s, fmt.seconds),
        fmt.distribution_row("inter-token gap" + (" (every request's)" if basis(profile)
                                                  and t.itl_s else "")
                             + (", hand-offs apart" if t.handoff_s else ""),
                             t.itl_s, fmt.seconds),
    ]
    if t.handoff_s is not None:
        rows.append(fmt.distribution_row("prefill-to-decode hand-off", t.handoff_s,
                                         fmt.seconds))
    out: list[Block] = [
        Heading(text=_titled("Observed timing", basis(profile)),
                markdown=_titled("Observed timing", basis(profile), sep=" ")),
        Grid(header=DISTRIBUTION_HEADER, title="", only=CONSOLE, rows=[
            *rows, fmt.distribution_row("end-to-end latency", t.e2e_s, fmt.seconds)]),
        Grid(header=DISTRIBUTION_HEADER, only=MARKDOWN, rows=[
            *rows, fmt.distribution_row("end-to-end", t.e2e_s, fmt.seconds)]),
    ]
    engine = []
    if t.concurrency_max is not None:
        engine.append(("requests in flight (mean / max)",
                       f"{fmt.num(t.concurrency_mean)} / {fmt.count(t.concurrency_max)}"))
    if t.preempted_requests is not None:
        engine.append(("preempted requests",
                       f"{fmt.count(t.preempted_requests)} ({fmt.pct(t.preempted_request_share)}), "
                       f"{fmt.count(t.preemptions_total)} preemptions"))
    if t.cached_tokens_total is not None:
        engine.append(("reported cached tokens (engine or provider)",
                       f"{fmt.count(t.cached_tokens_total)} "
                       f"({fmt.pct(t.cached_token_share)} of prompt tokens)"))
    if engine:
        out.append(KeyValues(rows=engine, only=CONSOLE))
    if t.cached_by_idle:
        out.append(Grid(
            header=["session idle before it", "requests", "reported cached share"],
            title="reported cached tokens by session idle time",
            rows=[[_idle_label(b.idle_from_s, b.idle_to_s), fmt.count(b.requests),
                   fmt.pct(b.cached_share)] for b in t.cached_by_idle]))
    return out


def _idle_label(lo: float | None, hi: float | None) -> str:
    """'1 – 5 min', '≥ 1 h', or the first request of its session."""
    if lo is None:
        return "first of its session"
    if hi is None:
        return f"≥ {_duration(lo)}"
    return f"< {_duration(hi)}" if lo == 0 else f"{_duration(lo)} – {_duration(hi)}"


def _duration(seconds: float) -> str:
    """A bucket edge in its own unit: 1 min, 5 min, 1 h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
