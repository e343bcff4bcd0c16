"""Two runs' pictures on shared axes, so that a page of two runs compares heights, not scales.

Each picture of the report page is a `Picture`: a drawing function of (its section, `Bounds`)
and the extent its own data needs. On a one-run page a picture is drawn with bounds None (its
own axes); on a two-run page both runs' extents are joined and both drawings take the union, so
the same height means the same value on either side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from yaotu_trace.render import svg

Section = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Axis ranges to force on a chart (None: from its own data).

    `log_x` says whether the x range is on a log axis: a log and a linear range are not joined
    (each keeps its own x). `zoomed_y` marks a value axis that starts above zero to show small
    differences (a waterfall of small losses): two such ranges are joined only where they
    overlap, since the union of two windows far apart would show neither run's differences.
    """

    x: svg.Range | None = None
    y: svg.Range | None = None
    log_x: bool = False
    zoomed_y: bool = False

    def union(self, other: Bounds) -> Bounds:
        """The smallest bounds holding both; an axis only one side has is that side's."""
        same_kind = self.log_x == other.log_x
        x = _join(self.x, other.x) if same_kind else None
        y = _join(self.y, other.y)
        zoomed = self.zoomed_y or other.zoomed_y
        if zoomed and self.y and other.y and not _overlap(self.y, other.y):
            y = None
        return Bounds(x=x, y=y, log_x=self.log_x if same_kind else False, zoomed_y=zoomed)


def _join(a: svg.Range | None, b: svg.Range | None) -> svg.Range | None:
    if a is None or b is None:
        return a or b
    return min(a[0], b[0]), max(a[1], b[1])


def _overlap(a: svg.Range, b: svg.Range) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def x_of(bounds: Bounds | None) -> svg.Range | None:
    """The x range to force, if any."""
    return None if bounds is None else bounds.x


def y_of(bounds: Bounds | None) -> svg.Range | None:
    """The y range to force, if any."""
    return None if bounds is None else bounds.y


def histogram_bounds(edges: list[float], counts: list[int], log_x: bool = False) -> Bounds:
    """A histogram's own axes as bounds, as `svg.histogram_chart` takes them alone."""
    x, y = svg.histogram_axes(edges, counts, log_x)
    return Bounds(x=x, y=y, log_x=log_x)


def headroom(top: float, share: float = 0.05) -> float:
    """A value axis's top over `top`, as a chart leaves it (1 when nothing is above 0)."""
    return top * (1 + share) if top > 0 else 1.0


class Picture(NamedTuple):
    """One picture of the page: how to draw it, and the axes its own data needs (None when
    the run has nothing to draw there)."""

    draw: Callable[[Section, Bounds | None], str]
    extent: Callable[[Section], Bounds | None]


def shared_bounds(picture: Picture, sections: Iterable[Section]) -> Bounds | None:
    """The union of the runs' extents for one picture; None when no run has its data."""
    joined: Bounds | None = None
    for section in sections:
        own = picture.extent(section)
        if own is not None:
            joined = own if joined is None else joined.union(own)
    return joined


def drawn_pair(picture: Picture, before: Section, after: Section) -> tuple[str, str]:
    """The picture of both runs, on the axes that hold both."""
    bounds = shared_bounds(picture, (before, after))
    return picture.draw(before, bounds), picture.draw(after, bounds)
