"""The gate's levels, apart from the checks: `trace check --fail-on`'s choices cost
`trace --help` no check machinery.

`--fail-on` takes a comma-separated list: at most one diagnosis level (`warning` or
`bottleneck`, judged on the trace checked), any of the change gates (`regressed`,
`not-comparable`, judged on the diff against `--before`), and `observed-shortfall` (the
engine's own cached tokens below the exact replay for a stretch of time; its margins in
percentage points and per cent of the replayed hits as `observed-shortfall:POINTS:PERCENT`,
2 and 10 by default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from yaotu_trace.errors import ConfigError


class FailOn(StrEnum):
    """Lowest axis status that fails the diagnosis gate."""

    WARNING = "warning"
    BOTTLENECK = "bottleneck"


class DiffGate(StrEnum):
    """What fails the change gate of `trace check --before`."""

    REGRESSED = "regressed"  # an axis got worse beyond the run-to-run noise
    NOT_COMPARABLE = "not-comparable"  # a condition of a fair comparison differs


# With --before and no change gate named, both apply: a comparison that is not fair proves
# nothing, and a regression is what the gate is for.
DEFAULT_DIFF_GATES = frozenset(DiffGate)
WORDS: dict[str, FailOn | DiffGate] = {m.value: m for m in (*FailOn, *DiffGate)}
OBSERVED = "observed-shortfall"
CHOICES = (*WORDS, OBSERVED)


@dataclass(frozen=True, slots=True)
class ObservedGate:
    """`observed-shortfall`: fail when, over a stretch of time, the observed hits fall below
    the replayed ones by at least `points` of the prompt tokens and `relative` of the replayed
    hits (both as ratios)."""

    points: float = 0.02
    relative: float = 0.10


@dataclass(frozen=True, slots=True)
class Gates:
    """A parsed `--fail-on`: the diagnosis level and the change gates it names."""

    level: FailOn | None = None
    diff: frozenset[DiffGate] = frozenset()
    observed: ObservedGate | None = None


def parse_fail_on(spec: str | Iterable[str], where: str = "--fail-on") -> Gates:
    """`warning`, `regressed,not-comparable`, `bottleneck,regressed` or a list of such words;
    an unknown word or two levels is a ConfigError naming `where`."""
    words = [spec] if isinstance(spec, str) else list(spec)
    parts = [p.strip().lower() for word in words for p in str(word).split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{where}: empty; give one of {', '.join(CHOICES)}")
    levels: list[FailOn] = []
    diff: set[DiffGate] = set()
    observed: ObservedGate | None = None
    for part in parts:
        if part == OBSERVED or part.startswith(OBSERVED + ":"):
            observed = _observed(part, where)
            continue
        match WORDS.get(part):
            case FailOn() as level:
                levels.append(level)
            case DiffGate() as gate:
                diff.add(gate)
            case None:
                raise ConfigError(f"{where}: {part!r} is not one of {', '.join(CHOICES)}")
    if len(set(levels)) > 1:
        raise ConfigError(f"{where}: give one diagnosis level, not both {levels[0]} and "
                          f"{levels[1]} (warning already fails on bottleneck)")
    return Gates(level=levels[0] if levels else None, diff=frozenset(diff), observed=observed)


def _observed(part: str, where: str) -> ObservedGate:
    """`observed-shortfall` or `observed-shortfall:POINTS:PERCENT` (e.g. `:3:15`)."""
    margins = part.split(":")[1:]
    if not margins:
        return ObservedGate()
    try:
        points, percent = (float(m) for m in margins)
    except ValueError:
        raise ConfigError(f"{where}: {part!r}: give the margins as observed-shortfall:POINTS:"
                          "PERCENT, e.g. observed-shortfall:2:10") from None
    if not (0 < points <= 100 and 0 < percent <= 100):
        raise ConfigError(f"{where}: {part!r}: both margins must be above 0 and at most 100")
    return ObservedGate(points=points / 100, relative=percent / 100)
