"""The diagnosis gate's levels, apart from the checks: `trace check --fail-on`'s choices cost
`trace --help` no check machinery."""

from __future__ import annotations

from enum import StrEnum


class FailOn(StrEnum):
    """Lowest axis status that fails the diagnosis gate."""

    WARNING = "warning"
    BOTTLENECK = "bottleneck"
