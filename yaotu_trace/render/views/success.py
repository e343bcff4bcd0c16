"""Success rate (`trace analyze`, `trace report`): completed / total, by status, by tenant and
instance, the windows with failures, and the commonest error texts."""

from __future__ import annotations

from yaotu_trace.data.success_profile import SuccessCount, SuccessProfile
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, KeyValues, Notes, View

GROUP_HEADER = ["requests", "successful", "success rate"]
# Windows shown: those with failures, the worst first, then in time order.
WINDOWS_SHOWN = 10


def view(success: SuccessProfile) -> View:
    """Overall and per status, then by tenant, instance and window, then the error texts."""
    s = success
    statuses = ", ".join(f"{name} {fmt.count(k)}" for name, k in s.by_status.items() if k)
    out: list[Block] = [
        Heading(text="Success"),
        KeyValues(rows=[
            ("completed", f"{fmt.count(s.successful)} of {fmt.count(s.requests)} "
                          f"({fmt.pct(s.success_rate)})"),
            ("by status", statuses),
        ]),
    ]
    out += _groups("tenant", s.by_tenant, s.tenants)
    out += _groups("instance", s.by_instance, s.instances)
    out += _windows(s)
    if s.errors:
        out.append(Grid(
            header=["error", "requests"],
            title=f"commonest error texts ({s.error_texts} distinct)",
            rows=[[e.error, fmt.count(e.requests)] for e in s.errors]))
    return out


def _groups(label: str, rows: tuple[SuccessCount, ...], total: int | None) -> list[Block]:
    """One row per group with failures (most first); nothing when every group succeeded."""
    failing = [r for r in rows if r.successful < r.requests]
    if total is None or not failing:
        return []
    return [Grid(header=[label, *GROUP_HEADER],
                 title=f"by {label} ({len(failing)} of {total} with failures)",
                 rows=[[r.name, fmt.count(r.requests), fmt.count(r.successful),
                        fmt.pct(r.success_rate)] for r in failing])]


def _windows(s: SuccessProfile) -> list[Block]:
    if s.windows is None or s.window_s is None:
        return []
    failing = [w for w in s.windows if w.successful < w.requests]
    if not failing:
        return []
    worst = sorted(failing, key=lambda w: (w.successful - w.requests, w.start_s))
    shown = sorted(worst[:WINDOWS_SHOWN], key=lambda w: w.start_s)
    out: list[Block] = [Grid(
        header=[f"window ({fmt.seconds(s.window_s)}) from", *GROUP_HEADER],
        title=f"over time ({fmt.seconds(s.window_s)} windows of arrivals; "
              f"{len(failing)} of {len(s.windows)} with failures)",
        rows=[[fmt.clock(w.start_s), fmt.count(w.requests), fmt.count(w.successful),
               fmt.pct(w.success_rate)] for w in shown])]
    if len(failing) > len(shown):
        out.append(Notes(notes=[f"the {len(shown)} windows with the most failures are shown; "
                                "every window is in the JSON output"]))
    return out
