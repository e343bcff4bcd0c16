"""`--fail-on observed-shortfall`: one check of the engine's own cached tokens against the
exact replay, failing on the stretch of time where they fall short by both margins and naming
it, its numbers and the likely reason."""

from __future__ import annotations

from yaotu_trace.data.observed_hits import Reconciliation
from yaotu_trace.gate.check import CheckKind, CheckResult, CheckStatus
from yaotu_trace.gate.fail_on import ObservedGate

NAME = "observed hits against the replay"
PATH = "observed_vs_replayed.shortfall"


def observed_result(found: Reconciliation, gate: ObservedGate) -> CheckResult:
    """The check of `found`, reconciled at `gate`'s margins."""
    margins = f"{gate.points * 100:g} points and {gate.relative * 100:g} %"
    replay = f"the {found.preset} replay" if found.preset else "the replay"
    short = found.shortfall
    if short is None:
        worst = max(found.windows, key=lambda w: w.gap_points)
        return _result(CheckStatus.PASSED, worst.gap_points, margins,
                       f"the engine's hits agree with {replay}: no stretch of time falls "
                       f"short by {margins}")
    reason = found.reasons[0].text if found.reasons else "no likely reason found"
    share = (f"observed {short.observed_hit_tokens / short.prompt_tokens:.1%}, replayed "
             f"{short.replayed_hit_tokens / short.prompt_tokens:.1%} of "
             f"{short.prompt_tokens:,} prompt tokens over {short.requests} requests")
    return _result(CheckStatus.FAILED, short.gap_points, margins,
                   f"the engine's hits fall short of {replay} from {short.start_s:.1f} s to "
                   f"{short.end_s:.1f} s: {share} (margins {margins}); likely: {reason}")


def _result(status: CheckStatus, gap_points: float, margins: str, message: str) -> CheckResult:
    return CheckResult(name=NAME, kind=CheckKind.OBSERVED, status=status, path=PATH,
                       resolved_path=None, value=round(gap_points, 6), op="<",
                       threshold=f"{margins} below the replay", message=message)
