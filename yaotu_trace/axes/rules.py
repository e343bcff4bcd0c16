"""The rule catalog of `trace diagnose`: the four axes' rules in report order, by id.

A rule's id, words, declarations, thresholds and check live together in its own file under
`axes/<axis>/rules/` (see `yaotu_trace.axes.rule`); this module gathers them for the findings,
for the questions the verdict and the ledger ask of the rules that fired (which causes, which
remedies), and for `docs/rules.md`, which is generated from it (a test checks they agree).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from yaotu_trace.axes.base import AxisResult, Cause, RuleHit, Severity
from yaotu_trace.axes.kv_memory.rules import RULES as KV_MEMORY_RULES
from yaotu_trace.axes.pd_interference.rules import RULES as PD_INTERFERENCE_RULES
from yaotu_trace.axes.prefix_reuse.rules import RULES as PREFIX_REUSE_RULES
from yaotu_trace.axes.queueing.rules import RULES as QUEUEING_RULES
from yaotu_trace.axes.rule import Remedy, Rule, severities
from yaotu_trace.axes.thresholds import THRESHOLDS

RULES: Final[Mapping[str, Rule[Any]]] = {
    r.id: r
    for r in (*QUEUEING_RULES, *KV_MEMORY_RULES, *PREFIX_REUSE_RULES, *PD_INTERFERENCE_RULES)
}

SEVERITY_OF: Final[Mapping[str, Severity]] = severities(tuple(RULES.values()))


def rules_markdown() -> str:
    """`docs/rules.md`, generated from the catalog (a test keeps the file equal to this)."""
    lines = [
        "# Diagnosis rules",
        "",
        "Generated from the rule files `yaotu_trace/axes/<axis>/rules/` (a test keeps it in sync).",
        "Ids are stable: Q = queueing, K = KV memory, P = prefix reuse, D = prefill/decode",
        "interference. Severity `bottleneck` or `warning` sets the axis status of that name;",
        "`info` findings leave the axis `ok`. Threshold names refer to",
        "`yaotu_trace/axes/thresholds.py` and can be overridden with",
        "`--threshold name=value`; every finding's evidence shows the value it was compared",
        "with. `source` is the rule of cost-model.md §7 it implements. `cause` is what the",
        "rule names as its axis' cause (the axis takes the first, in the order of",
        "`yaotu_trace.axes.base.Cause`, of those its fired rules name; the verdict attributes",
        "symptoms by them); `remedies` are the ledger entries it makes candidates.",
        "",
        "| id | severity | axis | title | source |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.id} | {r.severity} | {r.axis} | {r.title} | {r.source or '–'} |"
              for r in RULES.values()]
    for r in RULES.values():
        lines += [
            "",
            f"## {r.id}: {r.title}",
            "",
            f"- severity: {r.severity}",
            f"- axis: {r.axis}",
            f"- trigger: {r.trigger}",
            f"- evidence: {r.evidence}",
            f"- suggested fix: {r.fix}",
            f"- cause: {r.cause or '–'}",
            f"- remedies: {', '.join(r.remedies) or '–'}",
        ]
    lines += ["", "## Thresholds", "", "| name | default | unit | rationale |",
              "|---|---:|---|---|"]
    for t in THRESHOLDS.values():
        lines.append(f"| {t.name} | {t.default:g} | {t.unit} | {t.rationale} |")
    return "\n".join(lines) + "\n"


def rule_of(hit: RuleHit) -> Rule[Any]:
    """The rule a hit is of."""
    return RULES[hit.rule_id]


def fired_rules(result: AxisResult) -> tuple[Rule[Any], ...]:
    """The rules that fired on an axis, in firing order."""
    return tuple(rule_of(h) for h in result.hits)


def causes_found(result: AxisResult) -> frozenset[Cause]:
    """The causes the rules that fired on an axis name (its `cause` is the first of them)."""
    return frozenset(r.cause for r in fired_rules(result) if r.cause is not None)


def rules_naming(cause: Cause) -> str:
    """The ids of the rules that name `cause`, for words that cite them ("Q005")."""
    return ", ".join(r.id for r in RULES.values() if r.cause == cause)


def undeclared(rules: Iterable[Rule[Any]]) -> list[str]:
    """What a set of rules leaves undeclared about its effect on the verdict and the ledger
    (empty when nothing is): a bottleneck that names no cause (the verdict would name the
    axis and not why), a cause named on two axes (an axis' cause is the first of its own),
    and any cause or remedy no rule names (unreachable words or an entry never priced)."""
    rules = tuple(rules)
    problems = [f"{r.id}: a bottleneck rule names no cause (declare `cause`)"
                for r in rules if r.severity is Severity.BOTTLENECK and r.cause is None]
    axes_of: dict[Cause, set[str]] = {}
    for r in rules:
        if r.cause is not None:
            axes_of.setdefault(r.cause, set()).add(r.axis)
    problems += [f"cause {c} is named on more than one axis: {', '.join(sorted(a))}"
                 for c, a in axes_of.items() if len(a) > 1]
    problems += [f"no rule names cause {c}" for c in Cause if c not in axes_of]
    named = {m for r in rules for m in r.remedies}
    problems += [f"no rule names remedy {m}: the ledger never prices it"
                 for m in Remedy if m not in named]
    return problems
