"""Markdown for the prefix replay section (`trace replay`)."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import replay_view as view
from yaotu_trace.render.markdown import table


def prefix_reuse_lines(section: Any) -> list[str]:
    """Headline, rules, waterfall, breakdowns, hot prefixes, observed vs replayed, notes."""
    s = view.as_dict(section)
    lines = ["### Prefix reuse (replay)", ""]
    lines += table(["metric", "value"], [list(r) for r in view.headline_rows(s)])
    lines += ["", "#### Effective rules", ""]
    lines += table(["rule", "value"], [list(r) for r in view.rule_rows(s)])
    wf = view.waterfall_rows(s)
    if wf:
        lines += ["", "#### Loss waterfall (hit tokens)", ""]
        lines += table(["step", "hit tokens", "lost", "of ideal"], wf)
    for key, title in (("per_tenant", "Per tenant"), ("per_instance", "Per instance")):
        if s.get(key):
            lines += ["", f"#### {title}", ""]
            lines += table([title.split()[1], "requests", "prompt tokens", "hit tokens",
                            "hit ratio"], view.group_rows(s[key]))
    lines += ["", "#### Hit share of the prompt", ""]
    lines += table(["share", "requests"], view.hit_length_rows(s))
    if s.get("hot_prefixes"):
        lines += ["", "#### Hot prefixes (reuse lost, tokens)", ""]
        lines += table(["prefix", "recomputed", "times", "why", "tenants", "example"],
                       view.hot_rows(s))
    observed = view.observed_rows(s)
    if observed:
        lines += ["", "#### Observed vs replayed", ""]
        lines += table(["metric", "value"], [list(r) for r in observed])
    lines += [""] + [f"> note: {note}" for note in s.get("notes", [])]
    return lines


def replay_grid_lines(section: Any) -> list[str]:
    """`--grid`: the table of rule sets, then notes."""
    s = view.as_dict(section)
    lines = [f"### Replay grid ({len(s['rows'])} rule sets)", ""]
    lines += table(view.GRID_HEADER, view.grid_rows(s))
    lines += [f"> note: {note}" for note in s.get("notes", [])]
    return lines
