"""The change gate of `trace check AFTER --before BEFORE`: the diff as check results.

Each condition of the comparison and each axis change becomes one result in the same check
section as the thresholds, the baseline and the diagnosis gate, so the table, JSON, JUnit and
Markdown show them without a renderer of their own. A condition that differs fails under
`not-comparable`, an axis that regressed under `regressed`; ungated, either only warns. An
unknown condition warns (the comparison is not proven fair there); an axis whose change cannot
be judged is skipped, as the diagnosis gate skips an axis without data.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from yaotu_trace.data.run_diff import AxisChange, Condition, MeasureChange
from yaotu_trace.gate.check import CheckKind, CheckResult, CheckStatus
from yaotu_trace.gate.fail_on import DiffGate

# Measures named in an axis change's message (those that moved, in the diff's order); the
# JSON of the diff has them all.
MEASURES_SHOWN = 3


def change_results(conditions: Sequence[Condition], axes: Sequence[AxisChange],
                   fairness: Sequence[str], gates: Collection[DiffGate]) -> list[CheckResult]:
    """One result per condition, then one per axis, in the diff's order (`RunDiff`'s fields,
    or the sections of `trace diff`'s report)."""
    return ([_condition(c, DiffGate.NOT_COMPARABLE in gates, _advice(fairness, c.name))
             for c in conditions]
            + [_axis(a, DiffGate.REGRESSED in gates) for a in axes])


def _advice(fairness: Sequence[str], name: str) -> str:
    """What would make the comparison fair on this condition (`fairness` names each step by
    the condition it fixes: `success_rate: fix the failures first ...`)."""
    prefix = f"{name}: "
    return "; ".join(step.removeprefix(prefix) for step in fairness
                     if step.startswith(prefix))


def _condition(condition: Condition, gated: bool, advice: str) -> CheckResult:
    message = f"{condition.status}: {condition.detail}"
    evidence = _evidence(condition.before, condition.after)
    if evidence:
        message += f" ({evidence})"
    match condition.status:
        case "same":
            status = CheckStatus.PASSED
        case "differs":
            status = CheckStatus.FAILED if gated else CheckStatus.WARNED
            if advice:
                message += f"; to compare fairly: {advice}"
        case _:
            status = CheckStatus.WARNED
    path = f"conditions.{condition.name}.status"
    return CheckResult(name=f"condition: {condition.name}", kind=CheckKind.CONDITION,
                       status=status, path=path, resolved_path=path, value=condition.status,
                       op="==", threshold="same", message=message)


def _axis(axis: AxisChange, gated: bool) -> CheckResult:
    before, after = axis.before, axis.after
    message = f"{axis.change}: {before.status} → {after.status}"
    if after.cause:
        message += f" ({after.cause})"
    moved = [m for m in axis.measures if m.change in ("improved", "regressed")]
    if moved:
        message += "; " + ", ".join(_measure(m) for m in moved[:MEASURES_SHOWN])
    elif axis.reason:  # why nothing moved, or why it could not be judged
        message += f"; {axis.reason}"
    match axis.change:
        case "regressed":
            status = CheckStatus.FAILED if gated else CheckStatus.WARNED
        case "unknown":
            status = CheckStatus.SKIPPED
        case _:
            status = CheckStatus.PASSED
    path = f"axes.{axis.name}.change"
    return CheckResult(name=f"change: {axis.name}", kind=CheckKind.CHANGE, status=status,
                       path=path, resolved_path=path, value=axis.change, op="!=",
                       threshold="regressed", message=message)


def _measure(m: MeasureChange) -> str:
    """`ttft_s.p99 2.1 → 0.8 s (improved, noise ±0.05)`."""
    unit = f" {m.unit}" if m.unit and m.unit not in ("ratio", "count") else ""
    noise = "" if m.noise is None else f", noise ±{_num(m.noise)}"
    return f"{m.name} {_num(m.before)} → {_num(m.after)}{unit} ({m.change}{noise})"


def _evidence(before: object, after: object) -> str:
    """`before 1, after 0.9` for scalar evidence; a mapping is left to the detail and JSON."""
    scalar = (bool, int, float, str, type(None))
    if before is None and after is None:
        return ""
    if isinstance(before, scalar) and isinstance(after, scalar):
        return f"before {_num(before)}, after {_num(after)}"
    return ""


def _num(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
