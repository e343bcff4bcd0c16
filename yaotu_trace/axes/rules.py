"""The rule catalog of `trace diagnose`: the four axes' rules in report order, by id.

A rule's id, words, thresholds and check live together in its own file under
`axes/<axis>/rules/` (see `yaotu_trace.axes.rule`); this module gathers them for the findings
and for `docs/rules.md`, which is generated from it (a test checks they agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from yaotu_trace.axes.base import Severity
from yaotu_trace.axes.kv_memory.rules import RULES as KV_MEMORY_RULES
from yaotu_trace.axes.pd_interference.rules import RULES as PD_INTERFERENCE_RULES
from yaotu_trace.axes.prefix_reuse.rules import RULES as PREFIX_REUSE_RULES
from yaotu_trace.axes.queueing.rules import RULES as QUEUEING_RULES
from yaotu_trace.axes.rule import Rule, severities
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
        "with. `source` is the rule of cost-model.md §7 it implements.",
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
        ]
    lines += ["", "## Thresholds", "", "| name | default | unit | rationale |",
              "|---|---:|---|---|"]
    for t in THRESHOLDS.values():
        lines.append(f"| {t.name} | {t.default:g} | {t.unit} | {t.rationale} |")
    return "\n".join(lines) + "\n"
