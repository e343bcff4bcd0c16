"""The one place numbers, units and ratios are turned into text."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from yaotu_trace.data.clock import LAST_DATE_S, UNIX_CLOCK_S

if TYPE_CHECKING:
    from yaotu_trace.data.report import Distribution

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


def as_given(value: float | None, digits: int = 6) -> str:
    """A number as its source wrote it, up to `digits` significant digits: 619.85, 1,369."""
    if value is None:
        return MISSING
    if float(value).is_integer():
        return f"{round(value):,}"
    return f"{value:,.{digits}g}"


def length(value: float | None) -> str:
    """A token length: whole values without decimals (13, not 13.00), others to one decimal."""
    if value is None:
        return MISSING
    if float(value).is_integer() or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


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


def clock(value: float | None) -> str:
    """A time on a trace's clock: a UTC date and time when the clock is Unix seconds (at or
    above 2001-09-09, `UNIX_CLOCK_S`, and no later than year 9999), else seconds from the
    clock's origin as `seconds` writes them (1.7e9 s is no duration of 472,222 h but a moment
    of 2023)."""
    if value is None:
        return MISSING
    if UNIX_CLOCK_S <= value <= LAST_DATE_S:
        return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return seconds(value)


def tokens(value: float | None) -> str:
    """A token count, abbreviated: 3,200,000 → 3.2M tok."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    units = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
    for k, (unit, scale) in enumerate(units):
        if magnitude >= scale:
            if k and float(f"{magnitude / scale:.3g}") >= 1000:
                unit, scale = units[k - 1]  # 999,600 is 1M, not "1e+03k"
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


def bytes_rate(value: float | None) -> str:
    """Bytes per second in binary units: 6515152213 → 6.1 GiB/s."""
    return MISSING if value is None else f"{bytes_(value)}/s"


def flops(value: float | None) -> str:
    """Floating-point operations with an SI prefix: 1.34e15 → 1.34 PFLOP."""
    if value is None:
        return MISSING
    magnitude = abs(value)
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}FLOP"
    return f"{value:.3g} FLOP"


def capacity_cells(point: Any, with_bytes: bool, unit: str = "") -> list[str]:
    """A cache capacity as blocks (with `unit` appended), tokens and, when known, bytes."""
    cells = [count(point.capacity_blocks) + unit, tokens(point.capacity_tokens)]
    if with_bytes:
        cells.append(bytes_(point.capacity_bytes))
    return cells


def distribution_row(
    label: str, dist: Distribution | None, show: Callable[[float | None], str],
) -> list[str]:
    """Label, mean, P50, P90, P99, max (each through `show`) and count; dashes when empty."""
    if dist is None or dist.count == 0:
        return [label, MISSING, MISSING, MISSING, MISSING, MISSING, "0"]
    return [label, show(dist.mean), show(dist.p50), show(dist.p90), show(dist.p99),
            show(dist.max), count(dist.count)]
