"""What a section view is made of: headings, key/value tables, grids, lines, notes and panels.

A view (`render/views/<section>.py`) turns a section into a list of these blocks once; the
console and Markdown renderers draw any list of blocks, so neither knows a section. Where the
two outputs say different things on purpose (a panel per axis in a terminal, a status table in
a pull-request comment), the view marks a block `only=CONSOLE` or `only=MARKDOWN`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Format = Literal["console", "markdown"]
CONSOLE: Format = "console"
MARKDOWN: Format = "markdown"


@dataclass(frozen=True, slots=True)
class Styled:
    """A table cell with a console style; always drawn as text, never read as rich markup."""

    text: str
    style: str = ""


Cell = str | Styled


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """How the console lays out one column of a grid (Markdown only aligns it)."""

    name: str
    align: Literal["left", "right"] = "right"
    dim: bool = False
    no_wrap: bool = False
    overflow: Literal["fold"] | None = None
    ratio: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """`only` limits a block to one output; `tight` joins it to the Markdown line above it
    (otherwise a blank line separates blocks)."""

    only: Format | None = None
    tight: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Heading(Block):
    """A section or sub-section title; `markdown` replaces the text in Markdown."""

    text: str
    level: int = 3
    markdown: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Line(Block):
    """One line of text: `style` in the console, `markdown` (verbatim) in Markdown."""

    text: str
    style: str = ""
    markdown: str | None = None
    escape: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyValues(Block):
    """Labelled values: a header-less two-column table in the console, `header` in Markdown."""

    rows: Sequence[tuple[str, str]]
    header: tuple[str, str] = ("metric", "value")
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Grid(Block):
    """A table with a header. Without `columns` the console dims the first (label) column and
    right-aligns the others; Markdown left-aligns the first and right-aligns the rest unless
    `markdown_align` ("l"/"r" per column) says otherwise, and escapes `|` in every cell."""

    header: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    title: str | None = None
    columns: Sequence[Column] | None = None
    markdown_align: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Notes(Block):
    """Caveats about the numbers above: yellow `note:` lines, Markdown quotes."""

    notes: Sequence[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Panel(Block):
    """A framed group of blocks titled in `style` (the console's view of one diagnosis axis)."""

    title: str
    style: str = ""
    blocks: Sequence[Block] = field(default_factory=tuple)
    empty: str = "no measurement"


View = list[Block]
