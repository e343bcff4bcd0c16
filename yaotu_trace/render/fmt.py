"""The one place numbers, units and ratios are turned into text."""

from __future__ import annotations

MISSING = "–"


def count(value: int | float | None) -> str:
    """A whole count with thousands separators: 144,793,823."""
    if value is None:
        return MISSING
    return f"{round(value):,}"


def num(value: float | None, digits: int = 2) -> str:
    """A number with a sensible number of digits: large values lose their decimals."""
    if value is None:
        return MISSING
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:,.{digits}f}"


def pct(ratio: float | None, digits: int = 1) -> str:
    """A 0–1 ratio as a percentage: 0.4012 → 40.1 %."""
    if ratio is None:
        return MISSING
    return f"{100 * ratio:.{digits}f} %"


def seconds(value: float | None) -> str:
    """A duration with a unit that keeps it readable: 0.0123 → 12.3 ms, 3537 → 58.9 min."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    if magnitude == 0:
        return "0 s"
    if magnitude < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if magnitude < 1:
        return f"{value * 1e3:.1f} ms"
    if magnitude < 120:
        return f"{value:.2f} s"
    if magnitude < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.2f} h"


def tokens(value: float | None) -> str:
    """A token count, abbreviated: 3,200,000 → 3.2M tok."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if magnitude >= scale:
            return f"{value / scale:.3g}{unit} tok"
    return f"{value:.0f} tok"


def bytes_(value: float | None) -> str:
    """Bytes in binary units: 42949672960 → 40.0 GiB."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if magnitude >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def flops(value: float | None) -> str:
    """Floating-point operations with an SI prefix: 1.34e15 → 1.34 PFLOP."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}FLOP"
    return f"{value:.3g} FLOP"
