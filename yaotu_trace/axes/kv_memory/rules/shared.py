"""What several KV-memory rules read: whether the trace preempts, and the usage at preemption."""

from __future__ import annotations

from yaotu_trace.axes.base import AxisResult
from yaotu_trace.axes.kv_memory.metrics import KvMetrics


def preempting(mt: KvMetrics) -> bool:
    """Whether any preemption was counted."""
    return (mt.preemptions_total or 0) > 0


def usage_at_preemption(mt: KvMetrics) -> tuple[str, float | None]:
    """The KV usage at the moments of preemption, by name; without preemption times, the P95 of
    usage stands in for "usage at those times"."""
    if mt.kv_usage_at_preemption is None:
        return "kv_usage_p95", mt.kv_usage_p95
    return "kv_usage_at_preemption", mt.kv_usage_at_preemption


def recompute_is_material(kv: AxisResult) -> bool:
    """Whether a rule found the KV axis' recompute itself material (its
    `recompute_token_fraction` met the threshold), not only many requests preempted:
    re-prefills too small to matter stall no decode (counted by the engine they often are: a
    readmission hits its own freed blocks)."""
    return any(e.name == "recompute_token_fraction" and e.passed
               for hit in kv.hits for e in hit.evidence)
