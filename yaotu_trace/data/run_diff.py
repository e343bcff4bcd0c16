"""The values of a run diff: conditions, per-axis changes, the ledger of the change, the match.

Every value here is frozen and holds builtins only (tuples, floats, strings), so the report
renders it as is and the JSON contract (docs/json.md, "trace diff") is these fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

ConditionStatus = Literal["same", "differs", "unknown"]
Change = Literal["improved", "regressed", "unchanged", "unknown"]
MatchBasis = Literal["request_id", "content and arrival", "lengths and arrival", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """One condition a fair comparison holds fixed, with the evidence of each side.

    `before` and `after` are what was seen on each side (a number, a label, a small mapping);
    `detail` says how it was judged, in one sentence; `statistics` holds the test statistics
    that compare the two sides (a KS distance and its p-value), keyed by what they test.
    """

    name: str
    status: ConditionStatus
    before: object
    after: object
    detail: str
    statistics: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisState:
    """One side of an axis: the diagnosis' status, cause and score (its share of work lost)."""

    status: str
    cause: str | None
    score: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasureChange:
    """A key measure of an axis on each side and its change against run-to-run noise.

    `noise` is the half-width (in the measure's unit) a change must exceed to count; None when
    it could not be estimated. `basis` says how the measure and its noise were computed.
    """

    name: str
    before: float | None
    after: float | None
    unit: str
    change: Change
    noise: float | None
    basis: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisChange:
    """One axis, before and after, and whether the change improved or regressed it."""

    name: str
    before: AxisState
    after: AxisState
    change: Change
    measures: tuple[MeasureChange, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerItem:
    """One amount of work saved or added by the change (before minus after), with its basis."""

    name: str
    value: float
    unit: str
    basis: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeLedger:
    """Work the change saves and work it adds; `unmeasured` names the quantities neither run
    lets us price, and why."""

    saved: tuple[LedgerItem, ...]
    added: tuple[LedgerItem, ...]
    unmeasured: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MatchedRequests:
    """The requests both runs served, as row pairs into each side's request table.

    `before_rows[k]` and `after_rows[k]` are the positions (0-based, in arrival order) of the
    k-th matched request; pairs are in the before run's arrival order. `order_correlation` is
    the rank correlation of the matched arrivals (1: the same order), `span_ratio` the after
    run's arrival span over the before run's (1: the same spacing overall), `gap_agreement` the
    share of inter-arrival gaps within 10 % (or 1 ms) of each other.
    """

    before_rows: tuple[int, ...]
    after_rows: tuple[int, ...]
    basis: MatchBasis
    before_requests: int
    after_requests: int
    before_share: float
    after_share: float
    order_correlation: float | None
    span_ratio: float | None
    gap_agreement: float | None

    @property
    def count(self) -> int:
        """How many requests matched."""
        return len(self.before_rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class MatchSummary:
    """The match as the report shows it: everything of `MatchedRequests` but the row pairs."""

    basis: MatchBasis
    matched: int
    before_requests: int
    after_requests: int
    before_share: float
    after_share: float
    order_correlation: float | None
    span_ratio: float | None
    gap_agreement: float | None
    judged_on: str

    @classmethod
    def of(cls, matched: MatchedRequests, judged_on: str) -> MatchSummary:
        """The summary of a match; `judged_on` says whether the axes read the matched
        requests or every request."""
        return cls(basis=matched.basis, matched=matched.count,
                   before_requests=matched.before_requests,
                   after_requests=matched.after_requests, before_share=matched.before_share,
                   after_share=matched.after_share, order_correlation=matched.order_correlation,
                   span_ratio=matched.span_ratio, gap_agreement=matched.gap_agreement,
                   judged_on=judged_on)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDiff:
    """Two runs compared: whether the comparison is fair, what changed per axis, the ledger.

    `comparable` is True only when no condition `differs`; `fairness` says what would make the
    comparison fair (empty when it is); `judged_on` is "matched requests" or "all requests".
    """

    comparable: bool
    conditions: tuple[Condition, ...]
    axes: tuple[AxisChange, ...]
    ledger: ChangeLedger
    matched: MatchedRequests
    fairness: tuple[str, ...]
    judged_on: str = "matched requests"
    noise_basis: str = ""
