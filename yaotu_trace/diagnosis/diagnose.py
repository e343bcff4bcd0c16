"""`trace diagnose`: run the four axes, turn rule hits into findings, pick the verdict, price
the remedies. Pure: tables in, a `Report` out.

Verdict (documented in docs/axes.md): among axes whose status is `bottleneck`, the principal
bottleneck is the one with the highest score (its share of latency or work lost), with two
decision-flow rules from cost-model §7: a queueing bottleneck caused by KV admission (Q005) is
attributed to kv_memory when that axis is a bottleneck too, and pd_interference is principal
only when no other axis is a bottleneck — capacity, dispatch and cache keys come before the
choice between chunked prefill and P/D disaggregation. `fix_order` lists the non-ok axes in
decision-flow order: kv_memory, queueing, prefix_reuse, pd_interference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from yaotu_trace.axes import AXES, analyzer
from yaotu_trace.axes.base import (
    SEVERITY_RANK,
    AxisInput,
    AxisName,
    AxisResult,
    EngineSettings,
    Evidence,
    RuleHit,
    Severity,
    Status,
)
from yaotu_trace.diagnosis.ledger import LedgerEntry, build_ledger
from yaotu_trace.diagnosis.rules import RULES
from yaotu_trace.diagnosis.thresholds import Thresholds, make_thresholds
from yaotu_trace.ingest.metrics import EngineMetrics
from yaotu_trace.report import Report
from yaotu_trace.schema import Trace

FLOW_ORDER = (AxisName.KV_MEMORY, AxisName.QUEUEING, AxisName.PREFIX_REUSE,
              AxisName.PD_INTERFERENCE)
FLOW_ADVICE = {
    AxisName.KV_MEMORY: "many KV preemptions: capacity budget, block organisation and "
    "concurrency first, not splitting clusters",
    AxisName.QUEUEING: "requests queue: tell arrival bursts, CPU dispatch, scheduling rounds "
    "and batch shape apart before adding hardware",
    AxisName.PREFIX_REUSE: "a common prompt is computed again and again: fix cache keys and "
    "routing",
    AxisName.PD_INTERFERENCE: "long prefills squeeze streaming output: only now compare chunked "
    "prefill against P/D disaggregation",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One fired rule, with the numbers behind it and the thresholds they were compared with."""

    id: str
    severity: Severity
    axis: AxisName
    title: str
    message: str
    evidence: tuple[Evidence, ...]
    fix: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEntry:
    """One axis in the verdict's ranking."""

    axis: AxisName
    status: Status
    score: float | None
    score_basis: str
    cause: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The principal bottleneck (None when no axis is one), why, and the order to fix things."""

    principal_axis: AxisName | None
    principal_cause: str | None
    reason: str
    ranking: tuple[RankEntry, ...]
    fix_order: tuple[AxisName, ...]
    insufficient_data: tuple[AxisName, ...]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def finding_of(axis: AxisName, hit: RuleHit) -> Finding:
    """A finding from a rule hit: the catalog's words plus the hit's evidence."""
    rule = RULES[hit.rule_id]
    parts = []
    for e in hit.evidence:
        if e.value is None:
            continue
        text = f"{e.name} = {_fmt(e.value)}"
        if e.comparison and e.threshold is not None:
            text += f" ({e.comparison} {e.threshold_name} {_fmt(e.threshold)}"
            text += ": not met)" if e.passed is False else ")"
        parts.append(text)
    message = rule.title + (": " + "; ".join(parts) if parts else "")
    if hit.detail:
        message += f" — {hit.detail}"
    return Finding(id=rule.id, severity=rule.severity, axis=axis, title=rule.title,
                   message=message, evidence=hit.evidence, fix=rule.fix)


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Most severe first, then by id (deterministic)."""
    return tuple(sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.id)))


def verdict_of(axes: dict[AxisName, AxisResult]) -> Verdict:
    """Rank the axes and pick the principal bottleneck (see the module docstring)."""
    ranking = tuple(sorted(
        (RankEntry(axis=a.axis, status=a.status, score=a.score, score_basis=a.score_basis,
                   cause=a.cause) for a in axes.values()),
        key=lambda r: ({Status.BOTTLENECK: 0, Status.WARNING: 1, Status.OK: 2,
                        Status.INSUFFICIENT_DATA: 3}[r.status], -(r.score or 0.0),
                       FLOW_ORDER.index(r.axis)),
    ))
    bottlenecks = [r for r in ranking if r.status is Status.BOTTLENECK]
    insufficient = tuple(r.axis for r in ranking if r.status is Status.INSUFFICIENT_DATA)
    fix_order = tuple(a for a in FLOW_ORDER
                      if axes[a].status in (Status.BOTTLENECK, Status.WARNING))
    if not bottlenecks:
        warnings = [r for r in ranking if r.status is Status.WARNING]
        if warnings:
            reason = (f"no axis is a bottleneck; the largest concern is {warnings[0].axis} "
                      f"({warnings[0].score_basis}: {_fmt(warnings[0].score)})")
        elif len(insufficient) == len(axes):
            reason = "no axis could be decided: every axis lacks the data it needs"
        else:
            reason = "no axis is a bottleneck or a warning on the data given"
        if insufficient:
            reason += f"; undecided: {', '.join(insufficient)}"
        return Verdict(principal_axis=None, principal_cause=None, reason=reason,
                       ranking=ranking, fix_order=fix_order, insufficient_data=insufficient)
    names = {r.axis for r in bottlenecks}
    candidates = [r for r in bottlenecks
                  if not (r.axis is AxisName.PD_INTERFERENCE and len(names) > 1)]
    principal = candidates[0]
    why = (f"{principal.axis} is a bottleneck with the highest score "
           f"({principal.score_basis}: {_fmt(principal.score)})")
    if (principal.axis is AxisName.QUEUEING and principal.cause == "kv_admission"
            and AxisName.KV_MEMORY in names):
        principal = next(r for r in bottlenecks if r.axis is AxisName.KV_MEMORY)
        why = "queueing waits for KV memory (Q005), so the root is kv_memory"
    if AxisName.PD_INTERFERENCE in names and principal.axis is not AxisName.PD_INTERFERENCE:
        why += "; pd_interference is also a bottleneck but comes after the others in the flow"
    why += f" — {FLOW_ADVICE[principal.axis]}"
    return Verdict(principal_axis=principal.axis, principal_cause=principal.cause, reason=why,
                   ranking=ranking, fix_order=fix_order, insufficient_data=insufficient)


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """The four axes, the findings, the verdict and the remedy ledger of one trace."""

    axes: dict[AxisName, AxisResult]
    findings: tuple[Finding, ...]
    verdict: Verdict
    ledger: tuple[LedgerEntry, ...]


def run_diagnosis(inp: AxisInput, thresholds: Thresholds | None = None) -> Diagnosis:
    """Run every axis analyzer, then the ledger, findings and verdict."""
    t = thresholds or make_thresholds()
    # NOTE: degenerate traces (zero-length spans, denormal durations) may overflow a ratio;
    # such values become inf/NaN, which the report turns into null, instead of warnings.
    with np.errstate(all="ignore"):
        axes: dict[AxisName, AxisResult] = {name: analyzer(name)(inp, t) for name in AXES}
        ledger, extra = build_ledger(axes, inp, t)
    if extra:
        pd_axis = axes[AxisName.PD_INTERFERENCE]
        axes[AxisName.PD_INTERFERENCE] = replace(pd_axis, hits=pd_axis.hits + tuple(extra))
    findings = [finding_of(name, hit) for name, result in axes.items() for hit in result.hits]
    return Diagnosis(axes=axes, findings=sort_findings(findings), verdict=verdict_of(axes),
                     ledger=ledger)


def diagnose(
    trace: Trace,
    *,
    metrics: EngineMetrics | None = None,
    settings: EngineSettings | None = None,
    thresholds: Thresholds | None = None,
) -> Report:
    """`trace diagnose`: the report with sections axes, verdict, ledger and findings."""
    from yaotu_trace.pipeline import input_summary

    t = thresholds or make_thresholds()
    s = settings or EngineSettings()
    result = run_diagnosis(AxisInput.of(trace, metrics, s), t)
    summary = input_summary(trace)
    config: dict[str, Any] = {
        "settings": s,
        "thresholds": dict(t.values),
        "thresholds_overridden": t.overridden(),
        "metrics": None if metrics is None else {
            "path": metrics.path, "series": sorted(metrics.names),
        },
    }
    return Report(
        command="diagnose",
        input=summary,
        config=config,
        sections={
            "axes": {str(name): axis for name, axis in result.axes.items()},
            "verdict": result.verdict,
            "ledger": list(result.ledger),
            "findings": list(result.findings),
        },
    )
