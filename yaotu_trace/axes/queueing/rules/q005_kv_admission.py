"""Q005 (cost-model A5): admission blocked by KV memory."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, persistent_queue
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds


def _check(f: QueueingFacts, t: Thresholds, fired: frozenset[str]) -> Sequence[Evidence] | None:
    mt = f.metrics
    if not (persistent_queue(f, t) and mt.kv_usage_p75 is not None
            and mt.kv_usage_p75 >= t.kv_admission_usage
            and (mt.running_fill_p75 is None or mt.seq_cap_inferred
                 or mt.running_fill_p75 < t.batch_underfilled)):
        return None
    ev = [check("kv_usage_p75", mt.kv_usage_p75, ">=", "kv_admission_usage",
                t.kv_admission_usage)]
    if mt.running_fill_p75 is not None and not mt.seq_cap_inferred:
        ev.append(check("running_fill_p75", mt.running_fill_p75, "<", "batch_underfilled",
                        t.batch_underfilled))
    if mt.waiting_share is not None:
        ev.append(fact("waiting_share", mt.waiting_share, "ratio"))
    return ev


RULE: Rule[QueueingFacts] = Rule(
    id="Q005", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, source="A5",
    title="Admission blocked by KV memory",
    trigger=(
        "a standing queue, kv_usage_p75 ≥ kv_admission_usage and running_fill_p75 < "
        "batch_underfilled (when max_num_seqs is known)"
    ),
    evidence="kv_usage_p75, running_fill_p75, waiting_share",
    fix="see the kv_memory axis: capacity budget, block organisation and concurrency",
    reads=("kv_admission_usage", "batch_underfilled", "waiting_share", "queue_share_warn"),
    check=_check,
)
