"""The `principal` section (`trace diagnose`): shown by no renderer, the verdict names it."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render.blocks import View


def view(section: Any) -> View:
    """Nothing: the principal axis is named by the verdict line."""
    return []
