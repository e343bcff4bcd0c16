"""Q006: queueing without an identified cause."""

from __future__ import annotations

from collections.abc import Sequence

from yaotu_trace.axes.base import AxisName, Evidence, Severity, check, fact
from yaotu_trace.axes.queueing.rules.q010_load_imbalance import READS as IMBALANCE_READS
from yaotu_trace.axes.queueing.rules.q010_load_imbalance import imbalance_evidence
from yaotu_trace.axes.queueing.rules.shared import QueueingFacts, persistent_queue
from yaotu_trace.axes.rule import Rule
from yaotu_trace.axes.thresholds import Thresholds

# The rules that name a cause of queueing (Q010, evaluated after this one, is asked directly).
CAUSAL = frozenset({"Q001", "Q002", "Q003", "Q004", "Q005", "Q010"})


def _check(f: QueueingFacts, t: Thresholds, fired: frozenset[str]) -> Sequence[Evidence] | None:
    mt = f.metrics
    share = mt.queue_share_of_ttft
    if not (share is not None and share >= t.queue_share_warn and not CAUSAL & fired
            and (persistent_queue(f, t) or not f.has_steps)
            and imbalance_evidence(f, t) is None):
        return None
    return (
        check("queue_share_of_ttft", share, ">=", "queue_share_warn", t.queue_share_warn),
        fact("peak_rho", mt.peak_rho, "ratio"),
        fact("gpu_busy_fraction", mt.gpu_busy_fraction, "ratio"),
    )


RULE: Rule[QueueingFacts] = Rule(
    id="Q006", axis=AxisName.QUEUEING, severity=Severity.WARNING,
    title="Queueing without an identified cause",
    trigger=(
        "queue_share_of_ttft ≥ queue_share_warn and no rule Q001–Q005 or Q010 fired (with a step "
        "log, "
        "also waiting_share ≥ waiting_share: the engine itself leaves requests waiting)"
    ),
    evidence="queue_share_of_ttft, peak_rho, gpu_busy_fraction",
    fix=(
        "read or add the step log (--steps) and engine metrics (--metrics) to tell burst, "
        "dispatch, batch shape and KV admission apart"
    ),
    reads=tuple(dict.fromkeys(("queue_share_warn", "waiting_share", *IMBALANCE_READS))),
    check=_check,
)
