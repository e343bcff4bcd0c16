"""The top of a two-run page: is the comparison fair, what changed per axis, the ledger.

Drawn from the JSON of a run diff (docs/json.md, `trace diff`): its conditions with each
side's evidence, each axis before and after with its key measures against the run-to-run noise,
and the work the change saves and adds. `render/html.py` puts the two runs' pictures below.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.html_parts import amount, num, status, table

# Evidence of a condition is a number, a label or a small mapping; deeper values are cut.
EVIDENCE_ITEMS = 8


def diff_sections(diff: Mapping[str, Any]) -> str:
    """The comparison, the axis changes and the ledger of the change, as `<section>`s."""
    return _comparison(diff) + _axis_changes(diff) + _change_ledger(diff)


def _comparison(diff: Mapping[str, Any]) -> str:
    comparable = bool(diff.get("comparable"))
    headline = "Comparable" if comparable else "Not comparable"
    differing = [str(c.get("name")) for c in diff.get("conditions") or []
                 if c.get("status") == "differs"]
    why = ("every condition of a fair comparison is held fixed or could not be checked"
           if comparable else "these conditions differ: " + ", ".join(differing))
    parts = [f'<section id="comparison"><h2>Is the comparison fair?</h2>'
             f'<div class="verdict{" calm" if comparable else ""}"><strong>{headline}</strong>'
             f"<p>{escape(why)}.</p>"]
    parts += [f"<p>To compare fairly: {escape(str(advice))}</p>"
              for advice in diff.get("fairness") or []]
    parts.append("</div>")
    matched = diff.get("matched")
    if isinstance(matched, Mapping):
        parts.append(f"<p>{escape(_match_line(matched))}</p>")
    rows = [[escape(str(c.get("name"))), status(str(c.get("status"))),
             escape(evidence(c.get("before"))), escape(evidence(c.get("after"))),
             escape(str(c.get("detail") or ""))]
            for c in diff.get("conditions") or [] if isinstance(c, Mapping)]
    if rows:
        parts.append(table(["condition", "status", "before", "after", "detail"], rows))
    parts.append("</section>")
    return "".join(parts)


def _match_line(matched: Mapping[str, Any]) -> str:
    """`280 requests matched by request_id: 100.0 % of the 280 before, 93.3 % of the 300
    after.`"""
    before = f"{num(matched.get('before_share'), fmt.pct)} of the " \
             f"{fmt.count(matched.get('before_requests'))} before"
    after = f"{num(matched.get('after_share'), fmt.pct)} of the " \
            f"{fmt.count(matched.get('after_requests'))} after"
    line = (f"{fmt.count(matched.get('matched'))} requests matched by {matched.get('basis')}: "
            f"{before}, {after}")
    if matched.get("judged_on"):
        line += f"; the axes are judged on {matched['judged_on']}"
    return line + "."


def _axis_changes(diff: Mapping[str, Any]) -> str:
    axes = [a for a in diff.get("axes") or [] if isinstance(a, Mapping)]
    if not axes:
        return ""
    rows = []
    for a in axes:
        before, after = a.get("before") or {}, a.get("after") or {}
        shown = [m for m in a.get("measures") or [] if isinstance(m, Mapping)]
        measures = "<br>".join(_measure(m) for m in shown)
        moved = any(m.get("change") in ("improved", "regressed") for m in shown)
        # The reason says why nothing moved (or why it could not be judged); when measures
        # moved, it repeats them.
        reason = (f"<br><small>{escape(str(a['reason']))}</small>"
                  if a.get("reason") and not moved else "")
        rows.append([escape(str(a.get("name"))), _state(before), _state(after),
                     status(str(a.get("change"))) + reason, measures or fmt.MISSING])
    noise = (diff.get("noise") or {}).get("basis")
    note = f'<p class="note">Run-to-run noise: {escape(str(noise))}</p>' if noise else ""
    return ('<section id="axis-changes"><h2>What changed on each axis</h2>'
            + table(["axis", "before", "after", "change", "key measures"], rows)
            + note + "</section>")


def _state(state: Mapping[str, Any]) -> str:
    """`bottleneck` in its colour, the cause and the score below."""
    cause = f"{escape(str(state['cause']))} · " if state.get("cause") else ""
    return (f"{status(str(state.get('status')))}<br><small>{cause}score "
            f"{num(state.get('score'), fmt.pct)}</small>")


def _measure(m: Mapping[str, Any]) -> str:
    """`ttft_s.p99: 2.1 s → 0.8 s, improved (noise ± 0.05 s)`."""
    unit = m.get("unit")
    noise = m.get("noise")
    shown = (f"{escape(str(m.get('name')))}: {escape(amount(m.get('before'), unit))} → "
             f"{escape(amount(m.get('after'), unit))}, {status(str(m.get('change')))}")
    if noise is not None:
        shown += f" (noise ± {escape(amount(noise, unit))})"
    return shown


def _change_ledger(diff: Mapping[str, Any]) -> str:
    ledger = diff.get("ledger")
    if not isinstance(ledger, Mapping):
        return ""
    parts = ['<section id="change-ledger"><h2>Ledger of the change: work saved and work '
             "added</h2>"]
    for key, title in (("saved", "Saved"), ("added", "Added")):
        items = [i for i in ledger.get(key) or [] if isinstance(i, Mapping)]
        rows = [[escape(str(i.get("name"))), escape(amount(i.get("value"), i.get("unit"))),
                 escape(str(i.get("basis") or ""))] for i in items]
        parts.append(f"<h3>{title}</h3>")
        parts.append(table(["work", "amount", "how it was computed"], rows, numeric={1})
                     if rows else "<p>nothing measured</p>")
    unmeasured = "".join(f"<li>{escape(str(u))}</li>" for u in ledger.get("unmeasured") or [])
    if unmeasured:
        parts.append(f'<h3>Not priced</h3><ul class="notes">{unmeasured}</ul>')
    parts.append("</section>")
    return "".join(parts)


def evidence(value: Any) -> str:
    """A condition's evidence as one line: numbers to a few digits, mappings as `key value`."""
    if value is None:
        return fmt.MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return fmt.count(value)
    if isinstance(value, float):
        return fmt.as_given(value, 4)
    if isinstance(value, Mapping):
        items = list(value.items())[:EVIDENCE_ITEMS]
        return "; ".join(f"{k} {_flat(v)}" for k, v in items)
    if isinstance(value, list | tuple):
        return ", ".join(_flat(v) for v in value[:EVIDENCE_ITEMS])
    return str(value)


def _flat(value: Any) -> str:
    """An evidence value one level down: a mapping of numbers as `(p50 1,133, p99 4,096)`,
    deeper containers by their size."""
    if isinstance(value, Mapping) and all(not isinstance(v, Mapping | list | tuple)
                                          for v in value.values()):
        return "(" + ", ".join(f"{k} {evidence(v)}" for k, v in
                               list(value.items())[:EVIDENCE_ITEMS]) + ")"
    if isinstance(value, Mapping | list | tuple):
        return f"[{len(value)} items]"
    return evidence(value)
