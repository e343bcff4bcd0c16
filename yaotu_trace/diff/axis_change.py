"""Per axis, before and after: the diagnosis' state on each run and the change of its measures.

The key measures decide, each judged against run-to-run noise: an axis improved when more of
its measures improved than regressed (a tie goes to its headline measure, the share of work
the axis scores, else it is `unknown`: the change trades one cost for another), and it is
`unchanged` when every measure stays within noise, even if its status crossed a threshold.
Only an axis with no measure on both runs is judged by its status (bottleneck → warning → ok);
one undecided on a run as well is `unknown`.
"""

from __future__ import annotations

from yaotu_trace.axes.base import AxisName, AxisResult, Status
from yaotu_trace.data.run_diff import AxisChange, AxisState, Change, MeasureChange

# Worse to better; insufficient_data has no rank.
STATUS_RANK = {Status.BOTTLENECK: 0, Status.WARNING: 1, Status.OK: 2}


def axis_state(result: AxisResult) -> AxisState:
    """The diagnosis' status, cause and score of one axis on one run."""
    return AxisState(status=str(result.status), cause=result.cause, score=result.score)


def axis_change(name: AxisName, before: AxisResult, after: AxisResult,
                measures: tuple[MeasureChange, ...]) -> AxisChange:
    """The axis on both runs and its change (see the module docstring)."""
    change, reason = _judge(before, after, measures)
    return AxisChange(name=str(name), before=axis_state(before), after=axis_state(after),
                      change=change, measures=measures, reason=reason)


def _judge(before: AxisResult, after: AxisResult,
           measures: tuple[MeasureChange, ...]) -> tuple[Change, str]:
    known = [m for m in measures if m.change != "unknown"]
    better = [m for m in known if m.change == "improved"]
    worse = [m for m in known if m.change == "regressed"]
    if len(better) != len(worse):
        moved = better if len(better) > len(worse) else worse
        change: Change = "improved" if moved is better else "regressed"
        return change, "; ".join(f"{m.name} {_arrow(m)}" for m in moved) + " beyond noise"
    if better:
        head = measures[0]
        if head.change in ("improved", "regressed"):
            return head.change, (f"as many measures improved as regressed; the headline "
                                 f"{head.name} {_arrow(head)} decides")
        return "unknown", (f"{len(better)} key measure(s) improved and {len(worse)} regressed: "
                           "the change trades one cost for another")
    rank_b, rank_a = STATUS_RANK.get(before.status), STATUS_RANK.get(after.status)
    flipped = rank_b is not None and rank_a is not None and rank_b != rank_a
    if known:  # a status that flips on a change within noise is a threshold crossed by chance
        return "unchanged", "every key measure within noise" + (
            f" (status {before.status} → {after.status})" if flipped else "")
    if flipped:
        change = "improved" if (rank_a or 0) > (rank_b or 0) else "regressed"
        return change, f"status {before.status} → {after.status}; no key measure on both runs"
    if rank_b is None or rank_a is None:
        return "unknown", "undecided on a run and no key measure on both"
    return "unchanged", f"status {after.status} on both runs; no key measure on both"


def _arrow(m: MeasureChange) -> str:
    return f"{_fmt(m.before)} → {_fmt(m.after)}"


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"
