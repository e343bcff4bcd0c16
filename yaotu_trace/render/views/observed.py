"""Observed against replayed hits over time (`trace analyze` on a capture whose cached_tokens
are the engine's own): the same blocks `trace replay` shows under its prefix reuse."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render.blocks import View
from yaotu_trace.render.views.prefix_reuse import as_dict, reconciliation_blocks


def view(section: Any) -> View:
    """Windows, the requests that differ most, the shortfall stretch and the likely reasons."""
    return reconciliation_blocks({"observed_over_time": as_dict(section)})
