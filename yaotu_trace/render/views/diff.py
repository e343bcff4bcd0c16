"""`trace diff`: whether the comparison is fair, the conditions, the match, the per-axis changes
and the ledger of the change. One view for the command's sections, told apart by value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from yaotu_trace.data.run_diff import (
    AxisChange,
    AxisState,
    ChangeLedger,
    Condition,
    LedgerItem,
    MatchSummary,
)
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import (
    Block,
    Cell,
    Column,
    Grid,
    Heading,
    KeyValues,
    Line,
    Notes,
    Styled,
    View,
)

CHANGE_STYLE = {"improved": "green", "regressed": "red", "unchanged": "", "unknown": "dim"}
STATUS_STYLE = {"same": "green", "differs": "red", "unknown": "dim"}



def view(section: Any) -> View:
    """The blocks of one `trace diff` section (see the module docstring)."""
    if isinstance(section, bool):
        return _comparable(section)
    if isinstance(section, MatchSummary):
        return _matched(section)
    if isinstance(section, ChangeLedger):
        return _ledger(section)
    items = list(section)
    if items and isinstance(items[0], Condition):
        return _conditions(items)
    if items and isinstance(items[0], AxisChange):
        return _axes(items)
    return _fairness([str(s) for s in items])


def _comparable(comparable: bool) -> View:
    text = ("comparable: every condition holds or is unknown" if comparable
            else "not comparable: a condition differs between the runs (see below)")
    return [Line(text=text, style="bold green" if comparable else "bold red",
                 markdown=f"**{text}**")]


def _conditions(conditions: Sequence[Condition]) -> View:
    rows: list[list[Cell]] = [[c.name, Styled(c.status, STATUS_STYLE[c.status]),
                               _side(c.before), _side(c.after)] for c in conditions]
    return [Heading(text="Conditions"),
            _left_grid(["condition", "status", "before", "after"], rows),
            Notes(notes=[f"{c.name}: {c.detail}" for c in conditions])]


def _left_grid(header: list[str], rows: list[list[Cell]]) -> Grid:
    """A grid of words: every column left-aligned, in the console and in Markdown."""
    return Grid(header=header, rows=rows, markdown_align="l" * len(header),
                columns=[Column(name=name, align="left", no_wrap=k == 0)
                         for k, name in enumerate(header)])


def _side(value: object) -> str:
    """A condition's evidence on one side, short: numbers formatted, mappings flattened."""
    if value is None:
        return fmt.MISSING
    if isinstance(value, dict):
        return "; ".join(f"{k} {_side(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_side(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return fmt.count(value)
    if isinstance(value, float):
        return fmt.as_given(value, 4) if abs(value) < 1000 else fmt.count(value)
    return str(value)


def _fairness(steps: list[str]) -> View:
    if not steps:
        return []
    return [Heading(text="To make the comparison fair"), Notes(notes=steps)]


def _matched(m: MatchSummary) -> View:
    return [Heading(text="Matched requests"), KeyValues(rows=[
        ("matched by", m.basis),
        ("matched", f"{fmt.count(m.matched)} of {fmt.count(m.before_requests)} before "
                    f"({fmt.pct(m.before_share)}), of {fmt.count(m.after_requests)} after "
                    f"({fmt.pct(m.after_share)})"),
        ("arrival order (rank correlation)", fmt.num(m.order_correlation, 3)),
        ("arrival span after / before", fmt.num(m.span_ratio, 3)),
        ("inter-arrival gaps that agree", fmt.pct(m.gap_agreement)),
        ("axes judged on", m.judged_on),
    ])]


def _axes(axes: Sequence[AxisChange]) -> View:
    out: list[Block] = [
        Heading(text="Axes, before → after"),
        _left_grid(["axis", "before", "after", "change"],
                   [[a.name, _state(a.before), _state(a.after),
                     Styled(a.change, CHANGE_STYLE[a.change])] for a in axes]),
        Notes(notes=[f"{a.name} {a.change}: {a.reason}" for a in axes]),
    ]
    rows: list[list[Cell]] = [[a.name, m.name, _value(m.before, m.unit), _value(m.after, m.unit),
             "±" + _value(m.noise, m.unit) if m.noise is not None else fmt.MISSING,
             Styled(m.change, CHANGE_STYLE[m.change])]
            for a in axes for m in a.measures]
    if rows:
        title = "key measures (noise: 95 % bootstrap half-width over requests)"
        out.append(Line(text=title, style="bold", markdown=f"**{title}**"))
        out.append(Grid(header=["axis", "measure", "before", "after", "noise", "change"],
                        rows=rows))
    return out


def _state(state: AxisState) -> str:
    cause = f" ({state.cause})" if state.cause else ""
    score = "" if state.score is None else f", {fmt.pct(state.score)}"
    return f"{state.status}{cause}{score}"


def _value(value: float | None, unit: str) -> str:
    if unit == "ratio":
        return fmt.pct(value, 2)
    if unit == "s":
        return fmt.seconds(value)
    return fmt.num(value)


def _ledger(ledger: ChangeLedger) -> View:
    out: list[Block] = [Heading(text="Ledger of the change (before − after)")]
    for title, items in (("work saved", ledger.saved), ("work added", ledger.added)):
        if not items:
            out.append(Line(text=f"{title}: none measured"))
            continue
        out.append(Line(text=title, style="bold", markdown=f"**{title}**"))
        out.append(Grid(header=["quantity", "amount"], rows=[[i.name, _amount(i)] for i in items]))
        out.append(Notes(notes=[f"{i.name}: {i.basis}" for i in items]))
    if ledger.unmeasured:
        out.append(Notes(notes=[f"not measured — {u}" for u in ledger.unmeasured]))
    return out


def _amount(item: LedgerItem) -> str:
    match item.unit:
        case "tokens":
            return fmt.tokens(item.value)
        case "bytes":
            return fmt.bytes_(item.value)
        case "s":
            return fmt.seconds(item.value)
        case _:
            return f"{fmt.count(item.value)} {item.unit}"

