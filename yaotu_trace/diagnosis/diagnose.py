"""The diagnosis: run the four axes, turn rule hits into findings, pick the verdict, price
the remedies. Pure: tables in, a `Diagnosis` out (the command makes it a report).

Verdict (documented in docs/axes.md): among axes whose status is `bottleneck`, the principal
bottleneck is the one with the largest estimated cost (its score: share of latency or work
lost), and the verdict follows the cause when one axis' symptom comes from another (cost-model
§7): queueing fed by KV admission or preemption churn is kv_memory; decode stalls that line up
with re-prefills after preemption are kv_memory, with host dispatch gaps queueing, on the
instance that queues next to an idle one (load imbalance) queueing, and with a shared prefix
prefilled again and again prefix_reuse. pd_interference is principal only when no
other axis is a bottleneck — capacity, dispatch and cache keys come before the choice between
chunked prefill and P/D disaggregation. `fix_order` lists the non-ok axes in decision-flow
order: kv_memory, queueing, prefix_reuse, pd_interference. `summary` is the verdict in one line.

Without a request trace (`data.telemetry_only`), the same rules judge the telemetry; an axis
whose verdict needs requests is `insufficient_data`, and every panel, the verdict and the
ledger say what a request trace would add (`diagnosis.telemetry_alone`).
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
    Source,
    Status,
)
from yaotu_trace.axes.rules import RULES
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.schema import Trace
from yaotu_trace.diagnosis.ledger import LedgerEntry, build_ledger

AXIS_ORDER = tuple(AXES)
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

# The verdict line's words for each axis' score.
COST_LABEL = {
    AxisName.QUEUEING: "of latency spent queued",
    AxisName.KV_MEMORY: "of all tokens recomputed",
    AxisName.PREFIX_REUSE: "of prefill recomputed",
    AxisName.PD_INTERFERENCE: "of decode time lost to prefill stalls",
}
# The words of a score measured on another basis than the axis' first one.
BASIS_LABEL = {
    "share of TTFT spent queueing": "of TTFT spent queued",
    "share of wall time the GPU idled while requests waited": "of wall time the GPU idled "
    "while requests waited",
}
# The placement causes of a disaggregated run: their score is another share than the axis'
# (the verdict's words), their advice another than the flow's, and they are no decode stalls
# that another axis could cause.
CAUSE_COST_LABEL = {
    "kv_transfer": "of TTFT spent moving KV",
    "pd_ratio": "of TTFT queued for the short pool",
    "transfer_failures": "of handed-off requests failed or fell back",
}
CAUSE_ADVICE = {
    "kv_transfer": "the KV link sets TTFT: weigh a faster link against co-located chunked "
    "prefill (ledger)",
    "pd_ratio": "one pool queues while the other idles: move instances between the pools",
    "transfer_failures": "transfers fail or fall back: fix the transfer path before tuning",
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
    """The principal bottleneck (None when no axis is one), why, and the order to fix things.

    `summary` is the verdict in one line, the first line of the table output.
    """

    principal_axis: AxisName | None
    principal_cause: str | None
    summary: str
    reason: str
    ranking: tuple[RankEntry, ...]
    fix_order: tuple[AxisName, ...]
    insufficient_data: tuple[AxisName, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisReport:
    """One axis as the JSON contract shows it (docs/json.md): name, status, cause, evidence,
    the findings that fired on it, and the measurements behind them."""

    name: AxisName
    status: Status
    cause: str | None
    score: float | None
    score_basis: str
    sources: tuple[Source, ...]
    evidence: tuple[Evidence, ...]
    findings: tuple[Finding, ...]
    missing: tuple[str, ...]
    next_steps: tuple[str, ...]
    notes: tuple[str, ...]
    metrics: Any


# Measurements shown as an axis' evidence when no rule fired on it: (metric, unit).
HEADLINE: dict[AxisName, tuple[tuple[str, str], ...]] = {
    AxisName.QUEUEING: (("queue_share_of_latency", "ratio"), ("queue_share_of_ttft", "ratio"),
                        ("peak_rho", "ratio"), ("idle_while_waiting_fraction", "ratio")),
    AxisName.KV_MEMORY: (("preemptions_total", "preemptions"),
                         ("recompute_token_fraction", "ratio"), ("kv_usage_p95", "ratio")),
    AxisName.PREFIX_REUSE: (("achievable_hit_rate", "ratio"), ("observed_hit_rate", "ratio"),
                            ("recomputed_share_of_prefill", "ratio")),
    AxisName.PD_INTERFERENCE: (("interference_share", "ratio"), ("stalls", "gaps"),
                               ("prefill_coincidence", "ratio")),
}


# Shown when none of HEADLINE is measured, as with telemetry alone.
TELEMETRY_HEADLINE: dict[AxisName, tuple[tuple[str, str], ...]] = {
    AxisName.QUEUEING: (("waiting_share", "ratio"), ("waiting_mean", "requests"),
                        ("running_fill_p75", "ratio"), ("kv_usage_p75", "ratio")),
    AxisName.KV_MEMORY: (("kv_usage_max", "ratio"), ("kv_capacity_tokens", "tokens")),
    AxisName.PREFIX_REUSE: (),
    AxisName.PD_INTERFERENCE: (("metrics_itl_mean_s", "s"),),
}


def axis_report(result: AxisResult, findings: tuple[Finding, ...]) -> AxisReport:
    """The axis with its own findings and its evidence: the numbers of the rules that fired
    (first occurrence of each name), else its headline measurements (of an undecided axis
    too: what was measured, such as an observed hit rate without prompt content)."""
    own = tuple(f for f in findings if f.axis is result.axis)
    seen: dict[str, Evidence] = {}
    for hit in result.hits:
        for e in hit.evidence:
            if e.value is not None:
                seen.setdefault(e.name, e)
    for headline in (HEADLINE, TELEMETRY_HEADLINE):
        for key, unit in headline[result.axis] if not seen else ():
            value = getattr(result.metrics, key, None)
            if value is not None:
                seen[key] = Evidence(name=key, value=value, unit=unit)
    return AxisReport(
        name=result.axis, status=result.status, cause=result.cause, score=result.score,
        score_basis=result.score_basis, sources=result.sources, evidence=tuple(seen.values()),
        findings=own, missing=result.missing, next_steps=result.next_steps, notes=result.notes,
        metrics=result.metrics,
    )


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


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _symptom_of(
    axes: dict[AxisName, AxisResult], symptom: AxisName
) -> tuple[AxisName, str] | None:
    """The axis whose problem causes `symptom`'s, with the reason, or None (cost-model §7 flow).

    Queueing behind preemption churn is kv_memory; decode stalls while a shared prefix is
    prefilled again and again are prefix_reuse, and stalls behind preemption recompute or host
    dispatch gaps belong to those axes.
    """
    def bad(axis: AxisName) -> bool:
        return axes[axis].status in (Status.BOTTLENECK, Status.WARNING)

    kv_ids = set(axes[AxisName.KV_MEMORY].rule_ids)
    churn = bool(kv_ids & {"K002", "K003"})
    if symptom is AxisName.QUEUEING:
        q = axes[AxisName.QUEUEING]
        if q.cause == "kv_admission" and bad(AxisName.KV_MEMORY):
            return AxisName.KV_MEMORY, "queueing waits for KV memory (Q005)"
        if churn and axes[AxisName.KV_MEMORY].status is Status.BOTTLENECK:
            return AxisName.KV_MEMORY, "the queue is fed by preemption churn (requests "\
                "re-queued and recomputed)"
        return None
    if symptom is AxisName.PD_INTERFERENCE:
        if axes[AxisName.PD_INTERFERENCE].cause in CAUSE_ADVICE:
            return None
        if churn and bad(AxisName.KV_MEMORY):
            return AxisName.KV_MEMORY, "the stalls coincide with re-prefills after preemption"
        if axes[AxisName.QUEUEING].cause == "dispatch_overhead":
            return AxisName.QUEUEING, "the gaps are host dispatch time (Q003)"
        if _stalls_on_queued_instance(axes):
            return AxisName.QUEUEING, "the stalls fall mostly on the instance that queues while "\
                "another has free seats (Q010): balance the routing first"
        if set(axes[AxisName.PREFIX_REUSE].rule_ids) & {"P001", "P002"}:
            return AxisName.PREFIX_REUSE, "the stalls are prefills of a shared prefix computed "\
                "again and again"
    return None


def _basis(entry: RankEntry) -> str:
    """' (basis: score)' of a ranked axis, or nothing when its score is unknown."""
    return "" if entry.score is None else f" ({entry.score_basis}: {_fmt(entry.score)})"


def _stalls_on_queued_instance(axes: dict[AxisName, AxisResult]) -> bool:
    """Whether queueing is a load imbalance (Q010) and the instance that queues holds the
    largest share of the decode stalls: idle seats next to a queue come before interference."""
    q = axes[AxisName.QUEUEING]
    lb = getattr(q.metrics, "load_balance", None)
    shares = getattr(axes[AxisName.PD_INTERFERENCE].metrics, "stall_share_by_instance", None)
    if q.cause != "load_imbalance" or lb is None or not shares:
        return False
    return max(shares, key=lambda k: (shares[k], k)) == lb.queued_instance


def verdict_of(axes: dict[AxisName, AxisResult], *, has_requests: bool = True) -> Verdict:
    """Rank the axes and pick the principal bottleneck (see the module docstring);
    `has_requests=False` (telemetry alone) leaves out what the trace lacks: there is none."""
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
        undecided = [a for a in AXIS_ORDER if a in insufficient]
        if warnings:
            reason = (f"no axis is a bottleneck; the largest concern is {warnings[0].axis}"
                      f"{_basis(warnings[0])}")
            line = f"verdict: no principal bottleneck; largest concern {warnings[0].axis}"
        elif len(insufficient) == len(axes):
            reason = "no axis could be decided: every axis lacks the data it needs"
            line = "verdict: undecided — no axis has the data it needs"
        else:
            reason = "no axis is a bottleneck or a warning on the data given"
            line = "verdict: no principal bottleneck"
        if undecided:
            reason += f"; undecided: {', '.join(undecided)}"
        timing = [a for a in undecided if a is not AxisName.PREFIX_REUSE and has_requests]
        if timing:
            reason += (f" — {', '.join(timing)} need engine timing this trace lacks (each "
                       "panel's `missing` names the columns; `trace simulate` can model an "
                       "engine to supply them)")
        if AxisName.PREFIX_REUSE in undecided and has_requests:
            reason += "; prefix_reuse needs prompt content (token or block ids)"
        if undecided and line != "verdict: undecided — no axis has the data it needs":
            decided = [f"{a} {axes[a].status}" for a in AXIS_ORDER if a not in insufficient]
            line += f"; {', '.join(decided)}; undecided: {', '.join(undecided)}"
        return Verdict(principal_axis=None, principal_cause=None, summary=line, reason=reason,
                       ranking=ranking, fix_order=fix_order, insufficient_data=insufficient)
    names = {r.axis for r in bottlenecks}
    # pd_interference comes last in the flow: only when nothing else is a bottleneck.
    candidates = [r for r in bottlenecks
                  if not (r.axis is AxisName.PD_INTERFERENCE and len(names) > 1)]
    principal = candidates[0]
    why = (f"{principal.axis} is the bottleneck with the largest estimated cost"
           f"{_basis(principal)}" if principal.score is not None else
           f"{principal.axis} is the bottleneck; its cost is not measured")
    symptom = None
    cause = _symptom_of(axes, principal.axis)
    if cause is not None:
        root, because = cause
        symptom = principal.axis
        r = next(x for x in ranking if x.axis is root)
        why = f"{symptom} is a symptom: {because}, so the root is {root}"
        principal = replace(r, status=Status.BOTTLENECK)
    # Other non-ok axes whose problem this one causes.
    caused = [a for a in FLOW_ORDER
              if a is not principal.axis and axes[a].status in (Status.BOTTLENECK, Status.WARNING)
              and (a is symptom or ((c := _symptom_of(axes, a)) is not None
                                    and c[0] is principal.axis))]
    for a in caused:
        if a is not symptom:
            why += f"; {a} is its symptom: {_symptom_of(axes, a)[1]}"  # type: ignore[index]
    if (AxisName.PD_INTERFERENCE in names and principal.axis is not AxisName.PD_INTERFERENCE
            and AxisName.PD_INTERFERENCE not in caused):
        why += "; pd_interference is also a bottleneck but comes after the others in the flow"
    why += f" — {CAUSE_ADVICE.get(principal.cause or '', FLOW_ADVICE[principal.axis])}"
    line = (f"verdict: {principal.axis}" + (f" ({principal.cause})" if principal.cause else "")
            + ("" if principal.score is None
               else f": {_pct(principal.score)} "
               + CAUSE_COST_LABEL.get(principal.cause or "", BASIS_LABEL.get(
                   principal.score_basis, COST_LABEL[principal.axis]))))
    if caused:
        line += f"; causes {', '.join(caused)}"
    return Verdict(principal_axis=principal.axis, principal_cause=principal.cause, summary=line,
                   reason=why, ranking=ranking, fix_order=fix_order,
                   insufficient_data=insufficient)


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """The four axes, the findings, the verdict and the remedy ledger of one trace."""

    axes: dict[AxisName, AxisResult]
    findings: tuple[Finding, ...]
    verdict: Verdict
    ledger: tuple[LedgerEntry, ...]


def run_diagnosis(inp: AxisInput, thresholds: Thresholds | None = None, *,
                  overlap: AxisInput | None = None,
                  overlap_axes: frozenset[str] = frozenset()) -> Diagnosis:
    """Run every axis analyzer, then the ledger, findings and verdict.

    `overlap` is the input judged on the telemetry's time range only (`telemetry`): the axes
    in `overlap_axes` and the ledger read it instead of `inp`.
    """
    t = thresholds or make_thresholds()

    def input_of(name: AxisName) -> AxisInput:
        return overlap if overlap is not None and name in overlap_axes else inp

    # NOTE: degenerate traces (zero-length spans, denormal durations) may overflow a ratio;
    # such values become inf/NaN, which the report turns into null, instead of warnings.
    with np.errstate(all="ignore"):
        axes: dict[AxisName, AxisResult] = {name: analyzer(name)(input_of(name), t)
                                            for name in AXES}
        ledger, extra = build_ledger(axes, inp if overlap is None else overlap, t)
    if extra:
        pd_axis = axes[AxisName.PD_INTERFERENCE]
        axes[AxisName.PD_INTERFERENCE] = replace(pd_axis, hits=pd_axis.hits + tuple(extra))
    findings = [finding_of(name, hit) for name, result in axes.items() for hit in result.hits]
    return Diagnosis(axes=axes, findings=sort_findings(findings), verdict=verdict_of(axes),
                     ledger=ledger)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceDiagnosis:
    """A diagnosis and what it judged: the trace and metrics after the telemetry was fitted to
    the trace's clock (`data.telemetry_fit.fit_telemetry`)."""

    trace: Trace
    metrics: EngineMetrics | None
    diagnosis: Diagnosis


def judge_trace(
    trace: Trace,
    *,
    metrics: EngineMetrics | None = None,
    settings: EngineSettings | None = None,
    thresholds: Thresholds | None = None,
) -> TraceDiagnosis:
    """The four axes, ledger, findings and verdict of a trace, with its step log and metrics
    judged on their overlap with the trace where they cover only part of it."""
    from yaotu_trace.data.telemetry_fit import fit_telemetry

    t = thresholds or make_thresholds()
    s = settings or EngineSettings()
    fitted = fit_telemetry(trace, metrics)
    trace, metrics = fitted.trace, fitted.metrics
    overlap = None if fitted.overlap is None else AxisInput.of(fitted.overlap, metrics, s)
    result = run_diagnosis(AxisInput.of(trace, metrics, s), t, overlap=overlap,
                           overlap_axes=fitted.overlap_axes)
    for name in fitted.overlap_axes:  # each panel says it was judged on the overlap only
        axis = result.axes[AxisName(name)]
        result.axes[axis.axis] = replace(axis, notes=axis.notes + fitted.overlap_notes)
    return TraceDiagnosis(trace=trace, metrics=metrics, diagnosis=result)
