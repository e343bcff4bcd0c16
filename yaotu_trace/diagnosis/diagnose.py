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

The verdict is built in three steps that never read each other's words: rank the axes
(`rank`), attribute the principal bottleneck and the symptoms it causes (`attribute`, from the
axes' statuses and the causes their rules declare), then word the summary and the reason.

Without a request trace (`data.telemetry_only`), the same rules judge the telemetry; an axis
whose verdict needs requests is `insufficient_data`, and every panel, the verdict and the
ledger say what a request trace would add (`diagnosis.telemetry_alone`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, auto
from typing import Any

import numpy as np

from yaotu_trace.axes import AXES, analyzer
from yaotu_trace.axes.base import (
    SEVERITY_RANK,
    AxisInput,
    AxisMetrics,
    AxisName,
    AxisResult,
    Cause,
    EngineSettings,
    Evidence,
    RuleHit,
    Severity,
    Source,
    Status,
    metrics_of,
)
from yaotu_trace.axes.kv_memory.rules.shared import recompute_is_material
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.queueing.metrics import QueueingMetrics
from yaotu_trace.axes.rules import causes_found, rule_of, rules_naming
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.telemetry_fit import fit_telemetry
from yaotu_trace.diagnosis.ledger import LedgerEntry, build_ledger

AXIS_ORDER = tuple(AXES)
FLOW_ORDER = (AxisName.KV_MEMORY, AxisName.QUEUEING, AxisName.PREFIX_REUSE,
              AxisName.PD_INTERFERENCE)
# The axis that leads the verdict only when no other is a bottleneck: capacity, dispatch and
# cache keys come before the choice between chunked prefill and P/D disaggregation.
LAST_IN_FLOW = AxisName.PD_INTERFERENCE
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
    "share of steps that left requests waiting": "of steps left requests waiting",
    "share of requests that failed": "of requests failed",
}
# The placement causes of a disaggregated run: they are no decode stalls that another axis
# could cause, their score is another share than the axis' (the verdict's words) and their
# advice another than the flow's.
PLACEMENT = frozenset({Cause.KV_TRANSFER, Cause.PD_RATIO, Cause.TRANSFER_FAILURES})
CAUSE_COST_LABEL = {
    Cause.KV_TRANSFER: "of TTFT spent moving KV",
    Cause.PD_RATIO: "of TTFT queued for the short pool",
    Cause.TRANSFER_FAILURES: "of handed-off requests failed or fell back",
}
CAUSE_ADVICE = {
    Cause.KV_TRANSFER: "the KV link sets TTFT: weigh a faster link against co-located chunked "
    "prefill (ledger)",
    Cause.PD_RATIO: "one pool queues while the other idles: move instances between the pools",
    Cause.TRANSFER_FAILURES: "transfers fail or fall back: fix the transfer path before tuning",
    Cause.ADMISSION_BLOCKED: "requests wait to be admitted and the data does not say for what: "
    "add the step log's admission signal or vLLM's waiting reasons before choosing a remedy",
    # The prefix axis' flow advice names keys and routing; when the loss is elsewhere, say where.
    Cause.CACHE_CAPACITY: "a common prompt is computed again because the cache evicted it: a "
    "tier below the GPU pool or a larger pool (the ledger prices both), not cache keys",
    Cause.CACHE_KEYS: "a common prompt is computed again under other cache keys: review salts, "
    "adapters and template bytes",
    Cause.ROUTING: "a common prompt is computed again on another instance: route by prefix",
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
    cause: Cause | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The principal bottleneck (None when no axis is one), why, and the order to fix things.

    `summary` is the verdict in one line, the first line of the table output; `outcome` the
    second when requests failed: how many succeeded, which the timing figures cover.
    """

    principal_axis: AxisName | None
    principal_cause: Cause | None
    summary: str
    reason: str
    ranking: tuple[RankEntry, ...]
    fix_order: tuple[AxisName, ...]
    insufficient_data: tuple[AxisName, ...]
    outcome: str | None = None


def outcome_line(trace: Trace) -> str | None:
    """'successful requests only (N of M): F failed (x %; by status)' when the trace says some
    request failed, else None: the timing figures cover the successful requests only."""
    if not trace.has("status"):
        return None
    requests = trace.requests
    n = len(requests)
    ok = int(successful_mask(requests).sum())
    if ok == n:
        return None
    status = requests["status"].astype("string").fillna("ok")
    counts = status[status != "ok"].value_counts()
    by = ", ".join(f"{k} {int(v):,}" for k, v in sorted(counts.items(),
                                                          key=lambda kv: (-int(kv[1]), kv[0])))
    return (f"successful requests only ({ok:,} of {n:,}): {n - ok:,} failed "
            f"({100 * (n - ok) / n:.1f} %; {by}); timing figures cover the successful ones")


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisReport:
    """One axis as the JSON contract shows it (docs/json.md): name, status, cause, evidence,
    the findings that fired on it, and the measurements behind them."""

    name: AxisName
    status: Status
    cause: Cause | None
    score: float | None
    score_basis: str
    sources: tuple[Source, ...]
    evidence: tuple[Evidence, ...]
    findings: tuple[Finding, ...]
    missing: tuple[str, ...]
    next_steps: tuple[str, ...]
    notes: tuple[str, ...]
    metrics: AxisMetrics


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
    return AxisReport(
        name=result.axis, status=result.status, cause=result.cause, score=result.score,
        score_basis=result.score_basis, sources=result.sources,
        evidence=tuple(seen.values()) or result.metrics.headline(),
        findings=own, missing=result.missing, next_steps=result.next_steps, notes=result.notes,
        metrics=result.metrics,
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def finding_of(axis: AxisName, hit: RuleHit) -> Finding:
    """A finding from a rule hit: the catalog's words plus the hit's evidence."""
    rule = rule_of(hit)
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


# --- step 1: rank ---------------------------------------------------------------------------

STATUS_ORDER = {Status.BOTTLENECK: 0, Status.WARNING: 1, Status.OK: 2,
                Status.INSUFFICIENT_DATA: 3}


def rank(axes: dict[AxisName, AxisResult]) -> tuple[RankEntry, ...]:
    """The axes by status (bottleneck first), then by score (largest first), then in flow
    order."""
    return tuple(sorted(
        (RankEntry(axis=a.axis, status=a.status, score=a.score, score_basis=a.score_basis,
                   cause=a.cause) for a in axes.values()),
        key=lambda r: (STATUS_ORDER[r.status], -(r.score or 0.0), FLOW_ORDER.index(r.axis)),
    ))


def _bad(result: AxisResult) -> bool:
    return result.status in (Status.BOTTLENECK, Status.WARNING)


# --- step 2: attribute ----------------------------------------------------------------------


class Link(Enum):
    """Why one axis' problem shows up as another's (cost-model §7)."""

    KV_ADMISSION = auto()  # queueing waits for KV memory
    PREEMPTION_QUEUE = auto()  # the queue is fed by requests preempted and re-queued
    RE_PREFILL_STALLS = auto()  # decode stalls are re-prefills after preemption
    DISPATCH_GAPS = auto()  # decode gaps are host dispatch time
    QUEUED_INSTANCE_STALLS = auto()  # the stalls fall on the instance that queues
    SHORT_POOL = auto()  # the queue is a disaggregated deployment's short pool (P:D ratio)
    PREFIX_PREFILLS = auto()  # the stalls are a shared prefix prefilled again and again


def _stalls_on_queued_instance(axes: dict[AxisName, AxisResult]) -> bool:
    """Whether queueing is a load imbalance and the instance that queues holds the largest
    share of the decode stalls: idle seats next to a queue come before interference."""
    q = axes[AxisName.QUEUEING]
    if q.cause != Cause.LOAD_IMBALANCE:
        return False
    lb = metrics_of(q, QueueingMetrics).load_balance
    shares = metrics_of(axes[AxisName.PD_INTERFERENCE],
                        InterferenceMetrics).stall_share_by_instance
    if lb is None or not shares:
        return False
    return max(shares, key=lambda k: (shares[k], k)) == lb.queued_instance


def root_of(axes: dict[AxisName, AxisResult], symptom: AxisName) -> tuple[AxisName, Link] | None:
    """The axis whose problem causes `symptom`'s, and how, or None (cost-model §7 flow): only
    queueing and decode stalls are symptoms of another axis."""
    if symptom is AxisName.QUEUEING:
        return _root_of_queueing(axes)
    if symptom is AxisName.PD_INTERFERENCE:
        return _root_of_stalls(axes)
    return None


def _root_of_queueing(axes: dict[AxisName, AxisResult]) -> tuple[AxisName, Link] | None:
    """Queueing behind KV admission (kv_memory not ok) or preemption churn (on a kv_memory
    bottleneck) is kv_memory's; a disaggregated deployment's queue in the pool that is short
    of instances (P:D ratio a bottleneck) is pd_interference's, unless host dispatch or a load
    imbalance explains it."""
    kv, q, pd = axes[AxisName.KV_MEMORY], axes[AxisName.QUEUEING], axes[AxisName.PD_INTERFERENCE]
    if q.cause == Cause.KV_ADMISSION and _bad(kv):
        return AxisName.KV_MEMORY, Link.KV_ADMISSION
    if Cause.PREEMPTION in causes_found(kv) and kv.status is Status.BOTTLENECK:
        return AxisName.KV_MEMORY, Link.PREEMPTION_QUEUE
    if (pd.cause == Cause.PD_RATIO and pd.status is Status.BOTTLENECK
            and q.cause not in (Cause.DISPATCH_OVERHEAD, Cause.LOAD_IMBALANCE)):
        return AxisName.PD_INTERFERENCE, Link.SHORT_POOL
    return None


def _root_of_stalls(axes: dict[AxisName, AxisResult]) -> tuple[AxisName, Link] | None:
    """Decode stalls behind material preemption recompute, host dispatch gaps or a load
    imbalance belong to those axes, and stalls while a shared prefix is prefilled again and
    again to prefix_reuse; a disaggregated deployment's placement causes are nobody's
    symptom."""
    kv, q = axes[AxisName.KV_MEMORY], axes[AxisName.QUEUEING]
    if axes[AxisName.PD_INTERFERENCE].cause in PLACEMENT:
        return None
    if Cause.PREEMPTION in causes_found(kv) and _bad(kv) and recompute_is_material(kv):
        return AxisName.KV_MEMORY, Link.RE_PREFILL_STALLS
    if q.cause == Cause.DISPATCH_OVERHEAD:
        return AxisName.QUEUEING, Link.DISPATCH_GAPS
    if _stalls_on_queued_instance(axes):
        return AxisName.QUEUEING, Link.QUEUED_INSTANCE_STALLS
    if Cause.PREFIX_RECOMPUTE in causes_found(axes[AxisName.PREFIX_REUSE]):
        return AxisName.PREFIX_REUSE, Link.PREFIX_PREFILLS
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """The principal bottleneck and what it causes.

    `symptom` is the bottleneck ranked first when the principal is its root (with the link),
    `symptom_entry` its ranking entry (its cost, which made it first);
    `caused` every other bad axis whose root the principal is, in flow order (the symptom
    among them); `deferred` says the last axis in the flow is a bottleneck the principal does
    not cause, left for after the others.
    """

    principal: RankEntry
    symptom: tuple[AxisName, Link] | None
    caused: tuple[tuple[AxisName, Link], ...]
    deferred: bool
    symptom_entry: RankEntry | None = None


def attribute(axes: dict[AxisName, AxisResult],
              ranking: tuple[RankEntry, ...]) -> Attribution | None:
    """The principal bottleneck (None when no axis is one): the bottleneck with the largest
    cost that may lead, or the root of its symptom."""
    bottlenecks = [r for r in ranking if r.status is Status.BOTTLENECK]
    if not bottlenecks:
        return None
    names = {r.axis for r in bottlenecks}
    first = next(r for r in bottlenecks if r.axis is not LAST_IN_FLOW or len(names) == 1)
    principal, symptom = first, None
    root = root_of(axes, first.axis)
    if root is not None:
        symptom = (first.axis, root[1])
        principal = replace(next(r for r in ranking if r.axis is root[0]),
                            status=Status.BOTTLENECK)
    caused = tuple((a, found[1]) for a in FLOW_ORDER
                   if a is not principal.axis and _bad(axes[a])
                   and (found := root_of(axes, a)) is not None and found[0] is principal.axis)
    deferred = (LAST_IN_FLOW in names and principal.axis is not LAST_IN_FLOW
                and LAST_IN_FLOW not in {a for a, _ in caused})
    return Attribution(principal=principal, symptom=symptom, caused=caused, deferred=deferred,
                       symptom_entry=None if symptom is None else first)


# --- step 3: word ---------------------------------------------------------------------------

def _link_words(link: Link) -> str:
    """How one axis' problem shows up as another's, citing the rules that name the cause."""
    words = {
        Link.KV_ADMISSION: f"queueing waits for KV memory ({rules_naming(Cause.KV_ADMISSION)})",
        Link.PREEMPTION_QUEUE: "the queue is fed by preemption churn (requests re-queued and "
        "recomputed)",
        Link.RE_PREFILL_STALLS: "the stalls coincide with re-prefills after preemption",
        Link.DISPATCH_GAPS: "the gaps are host dispatch time "
        f"({rules_naming(Cause.DISPATCH_OVERHEAD)})",
        Link.QUEUED_INSTANCE_STALLS: "the stalls fall mostly on the instance that queues while "
        f"another has free seats ({rules_naming(Cause.LOAD_IMBALANCE)}): balance the routing "
        "first",
        Link.PREFIX_PREFILLS: "the stalls are prefills of a shared prefix computed again and "
        "again",
        Link.SHORT_POOL: "the queue is the wait for the pool that is short of instances "
        f"({rules_naming(Cause.PD_RATIO)})",
    }
    return words[link]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _basis(entry: RankEntry) -> str:
    """' (basis: score)' of a ranked axis, or nothing when its score is unknown."""
    return "" if entry.score is None else f" ({entry.score_basis}: {_fmt(entry.score)})"


def _cost_words(entry: RankEntry) -> str:
    """What the principal's score measures, in the verdict line's words."""
    if entry.cause is not None and entry.cause in CAUSE_COST_LABEL:
        return CAUSE_COST_LABEL[entry.cause]
    return BASIS_LABEL.get(entry.score_basis, COST_LABEL[entry.axis])


def _principal_summary(att: Attribution) -> str:
    """The verdict line: the principal, its cause and cost, the axes it causes."""
    p = att.principal
    line = f"verdict: {p.axis}" + (f" ({p.cause})" if p.cause else "")
    if p.score is not None:
        line += f": {_pct(p.score)} {_cost_words(p)}"
    if att.caused:
        line += f"; causes {', '.join(a for a, _ in att.caused)}"
    return line


def _principal_reason(att: Attribution) -> str:
    """Why the principal leads: its cost, or the symptom it is the root of; what else it
    causes; what comes after; what to do."""
    p = att.principal
    if att.symptom is not None:
        symptom, link = att.symptom
        # Its cost ranked it first, and can be far above the root's own (a KV pool whose
        # preempted requests hit their prefix again recomputes little, yet blocks the queue).
        leading = att.symptom_entry
        cost = ("" if leading is None or leading.score is None
                else f" ({_pct(leading.score)} {_cost_words(leading)})")
        why = f"{symptom}{cost} is a symptom: {_link_words(link)}, so the root is {p.axis}"
    elif p.score is not None:
        why = f"{p.axis} is the bottleneck with the largest estimated cost{_basis(p)}"
    else:
        why = f"{p.axis} is the bottleneck; its cost is not measured"
    symptom_axis = None if att.symptom is None else att.symptom[0]
    for a, link in att.caused:
        if a is not symptom_axis:
            why += f"; {a} is its symptom: {_link_words(link)}"
    if att.deferred:
        why += f"; {LAST_IN_FLOW} is also a bottleneck but comes after the others in the flow"
    advice = (CAUSE_ADVICE[p.cause] if p.cause is not None and p.cause in CAUSE_ADVICE
              else FLOW_ADVICE[p.axis])
    return f"{why} — {advice}"


def _calm_summary(axes: dict[AxisName, AxisResult], ranking: tuple[RankEntry, ...]) -> str:
    """The verdict line without a principal bottleneck: the largest concern, else whether any
    axis could be decided, then the decided and undecided axes."""
    concern = next((r for r in ranking if r.status is Status.WARNING), None)
    undecided = _undecided(axes)
    if len(undecided) == len(axes):
        return "verdict: undecided — no axis has the data it needs"
    line = "verdict: no principal bottleneck"
    if concern is not None:
        line += f"; largest concern {concern.axis}"
    if undecided:
        decided = [f"{a} {axes[a].status}" for a in AXIS_ORDER if a not in undecided]
        line += f"; {', '.join(decided)}; undecided: {', '.join(undecided)}"
    return line


def _calm_reason(axes: dict[AxisName, AxisResult], ranking: tuple[RankEntry, ...],
                 has_requests: bool) -> str:
    """Why no axis leads, and what the undecided ones need (a request trace's timing or
    prompt content; telemetry alone says so itself)."""
    concern = next((r for r in ranking if r.status is Status.WARNING), None)
    undecided = _undecided(axes)
    if concern is not None:
        reason = (f"no axis is a bottleneck; the largest concern is {concern.axis}"
                  f"{_basis(concern)}")
    elif len(undecided) == len(axes):
        reason = "no axis could be decided: every axis lacks the data it needs"
    else:
        reason = "no axis is a bottleneck or a warning on the data given"
    if undecided:
        reason += f"; undecided: {', '.join(undecided)}"
    timing = [a for a in undecided if a is not AxisName.PREFIX_REUSE and has_requests]
    if timing:
        reason += (f" — {', '.join(timing)} need engine timing this trace lacks (each "
                   "panel's `missing` names the columns; `trace simulate` can model an "
                   "engine to supply them)")
    if AxisName.PREFIX_REUSE in undecided and has_requests:
        reason += "; prefix_reuse needs prompt content (token or block ids)"
    return reason


def _undecided(axes: dict[AxisName, AxisResult]) -> list[AxisName]:
    """The axes whose data does not decide them, in report order."""
    return [a for a in AXIS_ORDER if axes[a].status is Status.INSUFFICIENT_DATA]


def verdict_of(axes: dict[AxisName, AxisResult], *, has_requests: bool = True) -> Verdict:
    """Rank the axes, attribute the principal bottleneck, word it (see the module docstring);
    `has_requests=False` (telemetry alone) leaves out what the trace lacks: there is none."""
    ranking = rank(axes)
    insufficient = tuple(r.axis for r in ranking if r.status is Status.INSUFFICIENT_DATA)
    fix_order = tuple(a for a in FLOW_ORDER if _bad(axes[a]))
    att = attribute(axes, ranking)
    if att is None:
        return Verdict(principal_axis=None, principal_cause=None,
                       summary=_calm_summary(axes, ranking),
                       reason=_calm_reason(axes, ranking, has_requests),
                       ranking=ranking, fix_order=fix_order, insufficient_data=insufficient)
    return Verdict(principal_axis=att.principal.axis, principal_cause=att.principal.cause,
                   summary=_principal_summary(att), reason=_principal_reason(att),
                   ranking=ranking, fix_order=fix_order, insufficient_data=insufficient)


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
        ledger = build_ledger(axes, inp if overlap is None else overlap, t)
    findings = [finding_of(name, hit) for name, result in axes.items() for hit in result.hits]
    verdict = replace(verdict_of(axes), outcome=outcome_line(inp.trace))
    return Diagnosis(axes=axes, findings=sort_findings(findings), verdict=verdict,
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
