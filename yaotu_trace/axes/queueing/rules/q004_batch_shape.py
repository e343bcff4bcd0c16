"""Q004 (cost-model A4): batch shape limited by policy — the batch stays small while work waits,
or the seat cap binds while KV memory and the token budget have room."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Cause, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import (
    QueueingFacts,
    persistent_queue,
    saturated,
    saturation_evidence,
)
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.thresholds import Thresholds


def _kv_has_room(f: QueueingFacts, t: Thresholds) -> bool:
    """KV memory is not what holds the batch back: low usage where requests wait, and (with
    the admission signal) the queue's head seldom short of blocks."""
    mt = f.metrics
    return ((mt.kv_usage_queued is None or mt.kv_usage_queued < t.kv_low_usage)
            and (mt.kv_blocked_queued is None or mt.kv_blocked_queued < t.kv_blocked_share))


def _seats_bind(f: QueueingFacts, t: Thresholds) -> bool:
    """Every seat taken where requests wait, while KV memory and the token budget have room:
    max_num_seqs is what admission waits for."""
    mt = f.metrics
    return (mt.running_fill_queued is not None and mt.running_fill_queued >= t.batch_at_limit
            and mt.kv_usage_queued is not None and _kv_has_room(f, t)
            and (mt.step_fill_queued is None or mt.step_fill_queued < t.batch_at_limit))


def _check(
    f: QueueingFacts, t: Thresholds, found: frozenset[Cause]
) -> Sequence[Evidence] | None:
    mt = f.metrics
    tokens, running, kv = mt.tokens_per_step_queued, mt.running_fill_queued, mt.kv_usage_queued
    if not (persistent_queue(f, t) and saturated(f, t)):
        return None
    if _seats_bind(f, t):
        assert running is not None and kv is not None
        ev = [check("running_fill_queued", running, ">=", "batch_at_limit", t.batch_at_limit),
              check("kv_usage_queued", kv, "<", "kv_low_usage", t.kv_low_usage)]
        if mt.kv_blocked_queued is not None:
            ev.append(check("kv_blocked_queued", mt.kv_blocked_queued, "<", "kv_blocked_share",
                            t.kv_blocked_share))
        if mt.step_fill_queued is not None:
            ev.append(check("step_fill_queued", mt.step_fill_queued, "<", "batch_at_limit",
                            t.batch_at_limit))
        ev += [fact("seq_cap", mt.seq_cap, "requests"),
               fact("tokens_per_step_queued", tokens, "tokens"), *saturation_evidence(f, t)]
        return ev
    if not (tokens is not None and tokens < t.underfill_tokens
            and running is not None and running < t.batch_underfilled
            and (kv is None or kv < t.kv_low_usage)):
        return None
    ev = [
        check("tokens_per_step_queued", tokens, "<", "underfill_tokens", t.underfill_tokens,
              "tokens"),
        check("running_fill_queued", running, "<", "batch_underfilled", t.batch_underfilled),
        *saturation_evidence(f, t),
    ]
    if kv is not None:
        ev.append(check("kv_usage_queued", kv, "<", "kv_low_usage", t.kv_low_usage))
    return ev


def _note(f: QueueingFacts, t: Thresholds) -> str | None:
    """Where the seat cap binds and was not given, that it is taken as the peak of running."""
    mt = f.metrics
    if not (mt.seq_cap_inferred and _seats_bind(f, t)):
        return None
    return (f"the seat cap is taken as the most requests seen running ({mt.seq_cap:,.0f}): "
            "running stays there while requests wait; pass --max-num-seqs to state it")


RULE: Rule[QueueingFacts] = Rule(
    id="Q004", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A4",
    title="Batch shape limited by policy",
    trigger=(
        "in the windows where requests wait, with the GPU busy ≥ gpu_busy_saturated and "
        "idle-while-waiting < idle_waiting_saturated: either every seat is taken (running ≥ "
        "batch_at_limit × the seat cap) while KV memory has room (usage < kv_low_usage and, "
        "with the admission signal, the head short of blocks in < kv_blocked_share of the "
        "steps) and the token budget too (step fill < batch_at_limit), or the batch stays "
        "small (mean tokens per step < underfill_tokens, running < batch_underfilled × the "
        "seat cap, KV usage < kv_low_usage)"
    ),
    evidence="running_fill_queued, kv_usage_queued, kv_blocked_queued, step_fill_queued, "
    "seq_cap, tokens_per_step_queued, busy_queued",
    fix=(
        "raise max_num_seqs where the seats bind and KV has room (else max_num_batched_tokens); "
        "shortest-prompt-first admission against head-of-line blocking"
    ),
    cause=Cause.BATCH_SHAPE, remedies=(Remedy.BATCH_BUDGET,), note=_note,
    reads=("underfill_tokens", "batch_underfilled", "batch_at_limit", "kv_low_usage",
           "kv_blocked_share", "gpu_busy_saturated", "idle_waiting_saturated",
           "waiting_share", "queue_share_warn"),
    check=_check,
)
