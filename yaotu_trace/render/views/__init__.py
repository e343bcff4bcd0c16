"""The one registry of section views: which view draws a report section, for every renderer.

A view is a module of this package with a `view(section) -> list[Block]` function: the
section's headings, tables and notes, computed once from the section and drawn by the console,
Markdown and HTML renderers alike (`render/blocks.py` has the vocabulary). The HTML page draws
a few sections its own way (pictures, the verdict); it shows every other section with a view
from its blocks, so a new section appears on the page without editing `html.py`.

Adding an `analyze` section is its builder (in `commands/`) plus its view file here, named
below by the section's key. An entry that does not import is a bug and raises; a section with
no entry on purpose is shown as a generic key/value table, so it is never invisible.
`tests/render/test_views.py` imports every entry and checks that every view file is listed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from yaotu_trace.render.blocks import View

ViewFunction = Callable[[Any], View]

# Section key → view module of this package.
SECTION_VIEWS: dict[str, str] = {
    "profile": "profile",
    "success": "success",
    "prefix_reuse": "prefix_reuse",
    "observed_vs_replayed": "observed",
    "replay_grid": "replay_grid",
    "kv_residency": "kv_residency",
    "observed_tiers": "observed_tiers",
    "prefill_pricing": "prefill_pricing",
    "capacity_curve": "capacity_curve",
    "capacity_table": "capacity_table",
    "tier_curve": "tier_curve",
    "curve_pricing": "curve_pricing",
    "tiers": "tiers",
    "axes": "axes",
    "principal": "principal",
    "verdict": "verdict",
    "ledger": "ledger",
    "findings": "findings",
    "simulation": "simulation",
    "comparison": "comparison",
    "checks": "checks",
    "bench_summary": "bench_summary",
    "comparable": "diff",
    "conditions": "diff",
    "fairness": "diff",
    # `trace report --before`: the diff of the two runs, and the run before.
    "diff": "two_runs",
    "before": "two_runs",
}

# Section value type → view module, ahead of the key: the same key can carry different values
# in different commands (`prefix_reuse` is the full replay in `trace replay`, an overview in
# `trace analyze`). A list section is looked up by the type of its items (`trace diff`'s
# `axes` are AxisChange values, `trace diagnose`'s AxisReport ones).
TYPE_VIEWS: dict[str, str] = {
    "ReuseOverview": "reuse_overview",
    "AxisChange": "diff",
    "ChangeLedger": "diff",
    "MatchSummary": "diff",
}


def find_view(name: str, section: object) -> ViewFunction | None:
    """The view registered for the section's value type, else for its key; None when neither
    has an entry. Raises ImportError or AttributeError when an entry does not resolve."""
    target = view_name(name, section)
    return None if target is None else load_view(target)


def view_name(name: str, section: object) -> str | None:
    """The view module registered for the section (by value type, or its items' type for a
    list, else by key), or None."""
    kind = type(section).__name__
    if isinstance(section, list | tuple) and section:
        kind = type(section[0]).__name__
    return TYPE_VIEWS.get(kind) or SECTION_VIEWS.get(name)


def load_view(target: str) -> ViewFunction:
    """The `view` function of the module `target` of this package."""
    module = importlib.import_module(f"{__name__}.{target}")
    view: ViewFunction = module.view
    return view
