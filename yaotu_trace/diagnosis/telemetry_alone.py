"""The diagnosis from telemetry alone (`trace diagnose --metrics FILE` without a TRACE).

The rules run as with a trace, on a request table with no row (`data.telemetry_only`); then
the result says what it could not judge. An axis the rules leave `ok` only because the
requests were missing is `insufficient_data`: kv_memory without a preemption count, or with
preemptions it cannot price (their recompute share needs request lengths); queueing with a
standing queue (requests waiting in at least `waiting_share` of the samples) that no rule could
weigh without queue times. Every panel's first `missing` entry names the request trace that
would decide or sharpen it, the verdict ends in "(telemetry only)", and ledger amounts priced
from the requests say so in their basis.
"""

from __future__ import annotations

from dataclasses import replace

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    EngineSettings,
    Status,
    metrics_of,
)
from yaotu_trace.axes.kv_memory.metrics import KvMetrics
from yaotu_trace.axes.queueing.metrics import QueueingMetrics
from yaotu_trace.axes.thresholds import Thresholds, make_thresholds
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.schema import Trace
from yaotu_trace.diagnosis.diagnose import Diagnosis, TraceDiagnosis, run_diagnosis, verdict_of
from yaotu_trace.diagnosis.ledger import LedgerEntry, Quantity


def judge_telemetry(
    trace: Trace,
    *,
    metrics: EngineMetrics | None = None,
    settings: EngineSettings | None = None,
    thresholds: Thresholds | None = None,
) -> TraceDiagnosis:
    """`diagnose.judge_trace` for `telemetry_trace`'s stand-in: no trace clock to fit the
    telemetry to, so it is judged as read."""
    t = thresholds or make_thresholds()
    inp = AxisInput.of(trace, metrics, settings or EngineSettings())
    result = from_telemetry_alone(run_diagnosis(inp, t), t)
    return TraceDiagnosis(trace=trace, metrics=metrics, diagnosis=result)


# What a request trace adds to a diagnosis from telemetry alone, per axis: the first entry of
# each panel's `missing`.
TRACE_WOULD_ADD: dict[AxisName, str] = {
    AxisName.QUEUEING: "a request trace with arrival_s, scheduled_s and first_token_s: each "
    "request's queue time and its share of TTFT and latency (Q001, Q002, Q006)",
    AxisName.KV_MEMORY: "a request trace with prompt_len and output_len (num_preemptions if "
    "logged): the work preemptions recompute (K002, K003); with scheduled_s and finish_s, KV "
    "demand against the pool (K004, K005)",
    AxisName.PREFIX_REUSE: "a request trace with prompt_tokens or prompt_block_ids: the hit "
    "rate the prompts allow, against the observed one (P001-P005)",
    AxisName.PD_INTERFERENCE: "a request trace with token_times_s: decode stalls behind "
    "prefills (D001, D002)",
}


def _undecided_preemptions(axis: AxisResult) -> AxisResult:
    """kv_memory called ok without knowing the preemptions, or with preemptions that could not
    be priced (their recompute share needs request lengths): undecided, not ok."""
    m = metrics_of(axis, KvMetrics)
    preempted = m.preemptions_total
    if axis.status is not Status.OK or preempted == 0:
        return axis
    if preempted is None:
        note = ("no preemption count in the telemetry: KV usage alone cannot show whether "
                "requests were preempted (vLLM's /metrics exports vllm:num_preemptions_total, "
                "which its stats lines leave out; SGLang logs each retraction)")
    elif m.recompute_token_fraction is None and m.preempted_request_share is None:
        note = (f"{preempted} preemption(s) counted, none at a KV usage that makes them a "
                "capacity bottleneck (K001); whether they matter depends on the work they "
                "recompute, which needs the requests' lengths")
    else:
        return axis
    return replace(axis, status=Status.INSUFFICIENT_DATA, notes=(*axis.notes, note))


def _requests_only(missing: str) -> bool:
    """Whether a `missing` entry names request-table columns only (the request trace of
    `TRACE_WOULD_ADD` covers it), not a step log, metrics or an option."""
    return "(request table)" in missing and not any(
        other in missing for other in ("step log", "metrics", "--"))


def _undecided_queue(axis: AxisResult, t: Thresholds) -> AxisResult:
    """queueing called ok while the engine reported requests waiting in at least
    `waiting_share` of its samples: a standing queue that no rule could weigh without the
    requests' queue times — undecided, not ok."""
    m = metrics_of(axis, QueueingMetrics)
    share = m.waiting_share
    if not (axis.status is Status.OK and share is not None and share >= t.waiting_share):
        return axis
    fill = m.running_fill_p75
    cap = "the largest seen" if m.seq_cap_inferred is not False else "the running cap"
    at_cap = "" if fill is None else f", P75 running at {100 * fill:.0f} % of {cap}"
    note = (f"requests waited in {100 * share:.0f} % of the telemetry's samples{at_cap}: a "
            "standing queue, whose cost (its share of TTFT) needs the requests' queue times")
    return replace(axis, status=Status.INSUFFICIENT_DATA, notes=(*axis.notes, note))


def from_telemetry_alone(result: Diagnosis, t: Thresholds) -> Diagnosis:
    """A diagnosis without a request trace, saying so: each panel names what a request trace
    adds (first in `missing`), the verdict says it was judged from telemetry alone, and the
    ledger's amounts that need requests say so in their basis."""
    axes: dict[AxisName, AxisResult] = {}
    for name, axis in result.axes.items():
        if name is AxisName.KV_MEMORY:
            axis = _undecided_preemptions(axis)
        elif name is AxisName.QUEUEING:
            axis = _undecided_queue(axis, t)
        missing = (TRACE_WOULD_ADD[name], *(m for m in axis.missing if not _requests_only(m)))
        axes[name] = replace(axis, missing=missing,
                             notes=(*axis.notes, "judged from telemetry alone (no request "
                                    "trace)"))
    verdict = verdict_of(axes, has_requests=False)
    verdict = replace(
        verdict, summary=f"{verdict.summary} (telemetry only)",
        reason=f"{verdict.reason}; judged from telemetry alone, without a request trace: "
        "per-request queue times, request lengths, prompt content and token times would "
        "decide or sharpen the axes (each panel's `missing` says which)")
    ledger = tuple(_unpriced(entry) for entry in result.ledger)
    return replace(result, axes=axes, verdict=verdict, ledger=ledger)


# Ledger amounts priced from the requests, and what of theirs: unknown from telemetry alone.
PRICED_BY_REQUESTS: dict[str, str] = {
    "recomputed_prefill_tokens": "preemptions × the requests' mean prompt_len + output_len / 2",
    "kv_blocked_queue_seconds": "Σ queue_time_s of the requests while admission waits for KV",
    "extra_kv_tokens": "peak KV demand of the requests (scheduled_s, finish_s) − capacity",
    "extra_kv_blocks": "extra_kv_tokens in blocks",
    "extra_kv_bytes": "extra_kv_blocks × block bytes",
    "max_num_seqs_suggested": "kv_capacity_tokens / P95(prompt_len + output_len)",
}


def _unpriced(entry: LedgerEntry) -> LedgerEntry:
    """A ledger entry whose amounts priced from the requests say a request trace is needed."""
    def mark(q: Quantity) -> Quantity:
        if q.value is not None or q.name not in PRICED_BY_REQUESTS:
            return q
        return replace(q, basis=f"needs a request trace: {PRICED_BY_REQUESTS[q.name]}")

    return replace(entry, saves=tuple(mark(q) for q in entry.saves),
                   adds=tuple(mark(q) for q in entry.adds))
