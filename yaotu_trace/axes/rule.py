"""A diagnosis rule as one object: its id, axis and words, the thresholds it reads, its check.

Each rule is one file, `axes/<axis>/rules/<id>_<name>.py`, holding a `RULE`; the axis' rules
package lists those files in id order, and `axes/rules.py` gathers the four axes into the
catalog that `docs/rules.md` is generated from. Ids are a letter per axis plus a number and
never change meaning: Q = queueing, K = KV memory, P = prefix reuse, D = prefill/decode
interference.

A check reads the axis' facts (its metrics, plus what the axis knows about its inputs) and the
thresholds the rule declares in `reads`, and only those: it is handed `Thresholds.only(reads)`,
so an undeclared threshold is an AttributeError, not a hidden dependency. It returns the
evidence when the rule fires, else None. `fired` holds the ids that fired before it on the same
axis, for rules defined against others (Q006: large queueing that no cause explains). A rule
with no check is decided elsewhere (D003/D004: the ledger's network check).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from yaotu_trace.axes.base import AxisName, Evidence, RuleHit, Severity
from yaotu_trace.axes.thresholds import THRESHOLDS, Thresholds

F = TypeVar("F")

Check = Callable[[F, Thresholds, frozenset[str]], Sequence[Evidence] | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule(Generic[F]):
    """One diagnosis rule; `source` points at the cost-model rule it implements."""

    id: str
    axis: AxisName
    severity: Severity
    title: str
    trigger: str
    evidence: str
    fix: str
    source: str = ""
    reads: tuple[str, ...] = ()
    check: Check[F] | None = None

    @property
    def defaults(self) -> dict[str, float]:
        """The thresholds this rule reads, with their default values."""
        return {name: THRESHOLDS[name].default for name in self.reads}


def evaluate(rules: Sequence[Rule[F]], facts: F, t: Thresholds) -> list[RuleHit]:
    """The hits of `rules` on one axis' facts, in the rules' (id) order."""
    hits: list[RuleHit] = []
    for rule in rules:
        if rule.check is None:
            continue
        evidence = rule.check(facts, t.only(rule.reads), frozenset(h.rule_id for h in hits))
        if evidence is not None:
            hits.append(RuleHit(rule_id=rule.id, evidence=tuple(evidence)))
    return hits


def load_rules(package: str, modules: Sequence[str]) -> tuple[Rule[Any], ...]:
    """The `RULE` of each module of `package`, in the order given (a registry's one line per
    rule)."""
    return tuple(importlib.import_module(f"{package}.{name}").RULE for name in modules)


def severities(rules: Sequence[Rule[Any]]) -> Mapping[str, Severity]:
    """Rule id → severity, for `status_from`."""
    return {r.id: r.severity for r in rules}
