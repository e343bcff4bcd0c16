"""A diagnosis rule as one object: its id, axis and words, what it means to the verdict and the
ledger, the thresholds it reads, its check.

Each rule is one file, `axes/<axis>/rules/<id>_<name>.py`, holding a `RULE`; the axis' rules
package lists those files in id order, and `axes/rules.py` gathers the four axes into the
catalog that `docs/rules.md` is generated from. Ids are a letter per axis plus a number and
never change meaning: Q = queueing, K = KV memory, P = prefix reuse, D = prefill/decode
interference.

What a rule means beyond its own finding is declared, never inferred from its id: `cause` is
the cause its firing names for its axis (the verdict ranks and attributes axes by cause),
`remedies` the ledger entries it makes candidates, `marks` any other meaning the analyzers ask
about, `next_step` and `note` what the axis says when it fired. The diagnosis and the ledger
query these declarations (`axes/rules.py`), so a rule that should move the verdict or a remedy
is its own file alone; `cause` and `remedies` have no default, so a rule cannot leave them out.

A check reads the axis' facts (its metrics, plus what the axis knows about its inputs) and the
thresholds the rule declares in `reads`, and only those: it is handed `Thresholds.only(reads)`,
so an undeclared threshold is an AttributeError, not a hidden dependency. It returns the
evidence when the rule fires (with a detail for the finding's message, as `Fired`), else None.
Its third argument holds the causes the rules before it on the same axis found, for rules
defined against others (Q006: large queueing that no cause explains).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from yaotu_trace.axes.base import AxisName, Cause, Evidence, RuleHit, Severity, first_cause
from yaotu_trace.axes.thresholds import THRESHOLDS, Thresholds

F = TypeVar("F")


class Remedy(StrEnum):
    """Candidate changes the remedy ledger prices, in ledger order; a rule names the ones it
    makes candidates (`Rule.remedies`)."""

    LARGER_KV_POOL = "larger_kv_pool"
    KV_TIER = "kv_tier"
    CONCURRENCY_CAP = "concurrency_cap"
    OVERLAP_SCHEDULING = "overlap_scheduling"
    BATCH_BUDGET = "batch_budget"
    CAPACITY_ADMISSION = "capacity_admission"
    ROUTE_BY_LOAD = "route_by_load"
    ROUTE_BY_CACHE_AND_LOAD = "route_by_cache_and_load"
    CACHE_AWARE_ROUTING = "cache_aware_routing"
    TENANT_SALT_REVIEW = "tenant_salt_review"
    FIX_CACHE_KEYS = "fix_cache_keys"
    CHUNKED_PREFILL = "chunked_prefill"
    PD_DISAGGREGATION = "pd_disaggregation"
    MOVE_INSTANCES = "move_instances"
    COLOCATE_CHUNKED = "colocate_chunked_prefill"


class Mark(StrEnum):
    """What else a rule means to its axis, asked by meaning rather than by id."""

    # Judges the failed requests: evaluated even when nothing else decides the axis, and what
    # it finds is a failure count the ledger can price.
    FAILURES = "failures"
    # Weighs a remedy against what the axis' other rules found (the P/D network check):
    # evaluated after them, so its hit and its numbers follow theirs.
    WEIGHS_REMEDY = "weighs_remedy"


@dataclass(frozen=True, slots=True)
class Fired:
    """A check's evidence with a detail for the finding's message (what the evidence alone
    does not say, such as an input that is missing)."""

    evidence: tuple[Evidence, ...]
    detail: str = ""


Check = Callable[[F, Thresholds, frozenset[Cause]], Sequence[Evidence] | Fired | None]
Note = Callable[[F, Thresholds], str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule(Generic[F]):
    """One diagnosis rule; `source` points at the cost-model rule it implements.

    `cause`: the cause it names for its axis (None: it names none, as a data-quality or an
    info rule); `remedies`: the ledger entries it makes candidates; `marks`: see `Mark`;
    `next_step`: what to do next when it fired, listed in the axis' next steps; `note`: a note
    the axis adds when it fired, or None (reads the facts and only the declared thresholds).
    """

    id: str
    axis: AxisName
    severity: Severity
    title: str
    trigger: str
    evidence: str
    fix: str
    cause: Cause | None
    remedies: tuple[Remedy, ...]
    marks: frozenset[Mark] = frozenset()
    next_step: str = ""
    note: Note[F] | None = None
    source: str = ""
    reads: tuple[str, ...] = ()
    check: Check[F]

    @property
    def defaults(self) -> dict[str, float]:
        """The thresholds this rule reads, with their default values."""
        return {name: THRESHOLDS[name].default for name in self.reads}


def evaluate(rules: Sequence[Rule[F]], facts: F, t: Thresholds) -> list[RuleHit]:
    """The hits of `rules` on one axis' facts, in the rules' (id) order, those that weigh a
    remedy last."""
    hits: list[RuleHit] = []
    found: set[Cause] = set()
    for rule in sorted(rules, key=lambda r: Mark.WEIGHS_REMEDY in r.marks):
        out = rule.check(facts, t.only(rule.reads), frozenset(found))
        if out is None:
            continue
        fired = out if isinstance(out, Fired) else Fired(tuple(out))
        hits.append(RuleHit(rule_id=rule.id, evidence=fired.evidence, detail=fired.detail))
        if rule.cause is not None:
            found.add(rule.cause)
    return hits


def fired(rules: Sequence[Rule[F]], hits: Sequence[RuleHit]) -> tuple[Rule[F], ...]:
    """The rules of `rules` that `hits` holds, in the rules' order."""
    ids = {h.rule_id for h in hits}
    return tuple(r for r in rules if r.id in ids)


def cause_of(rules: Sequence[Rule[F]], hits: Sequence[RuleHit]) -> Cause | None:
    """An axis' cause: the first, in `Cause` order, of the causes its fired rules name."""
    return first_cause(r.cause for r in fired(rules, hits))


def said_when_fired(rules: Sequence[Rule[F]], hits: Sequence[RuleHit], facts: F,
                    t: Thresholds) -> tuple[list[str], list[str]]:
    """(notes, next steps) the fired rules declare, each once, in the rules' order."""
    done = fired(rules, hits)
    notes = [n for r in done if r.note is not None and (n := r.note(facts, t.only(r.reads)))]
    return list(dict.fromkeys(notes)), list(dict.fromkeys(r.next_step for r in done
                                                          if r.next_step))


def load_rules(package: str, modules: Sequence[str]) -> tuple[Rule[Any], ...]:
    """The `RULE` of each module of `package`, in the order given (a registry's one line per
    rule)."""
    return tuple(importlib.import_module(f"{package}.{name}").RULE for name in modules)


def severities(rules: Sequence[Rule[Any]]) -> Mapping[str, Severity]:
    """Rule id → severity, for `status_from`."""
    return {r.id: r.severity for r in rules}
