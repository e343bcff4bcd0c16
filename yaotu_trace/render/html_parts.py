"""Small HTML pieces shared by the report pages: tables, figures and quantities.

Each returns a string of markup; text is escaped here or by the caller, as each says.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from yaotu_trace.render import fmt


def num(value: Any, how: Callable[[Any], str] = fmt.num) -> str:
    """`how(value)`, or the missing mark for None."""
    return fmt.MISSING if value is None else how(value)


def table(header: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """A table of cells already escaped; the columns in `numeric` right-aligned."""
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(caption: str, body: str, note: str | None = None) -> str:
    """A captioned figure around `body` (markup), with an optional note below."""
    extra = f'<p class="note">{escape(note)}</p>' if note else ""
    return f"<figure><figcaption>{escape(caption)}</figcaption>{body}{extra}</figure>"


class NotDrawn(str):
    """A figure the trace cannot support: its markup says what it needs, and `caption` and
    `why` let a page gather such figures into one line instead of drawing empty panels."""

    caption: str
    why: str
    timing: bool


# How a trace without request timing gets its timing pictures: modelled times.
SIMULATE_HINT = "trace report --simulate --model M --gpu G"


def unavailable(caption: str, why: str, *, timing: bool = False) -> str:
    """The figure a trace cannot support, saying what it needs; `timing` when modelled request
    times (`SIMULATE_HINT`) would fill it."""
    out = NotDrawn(figure(caption, f'<div class="unavailable">Not drawn on this trace: '
                          f"{escape(why)}.</div>"))
    out.caption, out.why, out.timing = caption, why, timing
    return out


# The same for a page of two observed runs (`--simulate` models one run): simulate each.
TWO_RUN_SIMULATE_HINT = ("trace simulate TRACE --model M --gpu G --out run.parquet "
                         "--steps-out run.steps.parquet", " for each run, then compare the two")


def not_drawn_line(figures: list[str], fill: tuple[str, str] = (SIMULATE_HINT, "")) -> str:
    """One short note naming the figures left out and what each needs ('' when none is), and
    how the timing ones can be filled (`fill`: the command, then words after it)."""
    missing = [f for f in figures if isinstance(f, NotDrawn)]
    if not missing:
        return ""
    items = "; ".join(f"{escape(f.caption.lower())} ({escape(f.why)})" for f in missing)
    timing = [f.caption.lower() for f in missing if f.timing]
    hint = (f" The timing panels ({escape(', '.join(timing))}) can be filled with modelled "
            f"times: <code>{escape(fill[0])}</code>{escape(fill[1])}." if timing else "")
    return f'<p class="note not-drawn">Not drawn: {items}.{hint}</p>'


def status(word: str) -> str:
    """A status word in its colour (ok, warning, bottleneck, same, differs, improved, ...)."""
    return f'<span class="status {escape(word)}">{escape(word)}</span>'


def amount(value: Any, unit: str | None) -> str:
    """A value in its unit: ratios as percentages, seconds, bytes and tokens shortened."""
    if value is None:
        return fmt.MISSING
    match unit:
        case "ratio":
            return fmt.pct(value)
        case "s":
            return fmt.seconds(value)
        case "bytes":
            return fmt.bytes_(value)
        case "bytes/s":
            return fmt.bytes_rate(value)
        case "tokens":
            return fmt.tokens(value)
    return f"{fmt.num(value)} {unit or ''}".strip()


def quantity(q: dict[str, Any]) -> str:
    """`name: value` in bold with its basis below, for a ledger cell."""
    return (f"{escape(str(q.get('name')))}: <b>{escape(amount(q.get('value'), q.get('unit')))}"
            f"</b><br><small>{escape(str(q.get('basis') or ''))}</small>")
