"""What leaving the current routing costs in prefix hits: the prefix replay with one cache per
instance, as the trace routed (its `instance` column) against least-loaded and prefix-affinity
routing (replay-spec §4), under the rules the prefix_reuse axis replays with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from yaotu_trace.axes.base import AxisInput
from yaotu_trace.errors import YaotuError


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteHits:
    """Prefix hit tokens per routing, and prefix-affinity's instance per request (table order;
    None when the replay could not say)."""

    current: int
    least_loaded: int
    prefix_affinity: int
    affinity_instance: np.ndarray | None
    basis: str


def _rules(inp: AxisInput, instances: int) -> tuple[Any, str | None, tuple[str, ...]]:
    """The prefix_reuse axis' replay rules with one cache per instance."""
    trace, s = inp.trace, inp.settings
    assert trace is not None
    rules, preset, notes = s.replay_rules(trace)
    changes: dict[str, Any] = {"scope": "instance", "instances": instances}
    if s.kv_capacity_tokens is not None:
        changes["capacity_blocks"] = max(1, int(s.kv_capacity_tokens // rules.block_size_tokens))
    return rules.with_(**changes), preset, notes


def route_hits(inp: AxisInput) -> RouteHits | None:
    """Hit tokens as routed, least-loaded and prefix-affinity; None without prompt content,
    an instance column or a replay the trace supports."""
    # NOTE: the replay's modules (its kernels, multiprocessing) load only for a load imbalance
    # in a trace with prompt content and an instance column, the one case that prices routes.
    from yaotu_trace.prefix.trace import replay_trace_with_requests

    trace = inp.trace
    if trace is None or trace.content_column is None or not trace.has("instance"):
        return None
    instances = int(trace.requests["instance"].nunique())
    if instances < 2:
        return None
    try:
        rules, preset, notes = _rules(inp, instances)
        hits = {}
        table = None
        for route in (None, "least-loaded", "prefix-affinity"):
            summary, table = replay_trace_with_requests(
                trace, rules.with_(route=route), preset=preset, notes=notes, waterfall=False)
            hits[route] = int(summary.saved_prefill_tokens)
    except YaotuError:
        return None
    return RouteHits(current=hits[None], least_loaded=hits["least-loaded"],
                     prefix_affinity=hits["prefix-affinity"],
                     affinity_instance=_table_order(trace.requests, table),
                     basis=f"prefix replay, one cache per instance ({instances}), "
                     f"{rules.block_size_tokens}-token blocks, capacity "
                     f"{rules.capacity_blocks or 'unlimited'}")


def _table_order(requests: Any, table: Any) -> np.ndarray | None:
    """The replay's per-request instance in the request table's order, by request_id."""
    cols = None if table is None else table.to_columns()
    if cols is None or "instance" not in cols or "request_id" not in requests.columns:
        return None
    order = {str(rid): k for k, rid in enumerate(cols["request_id"])}
    idx = np.array([order.get(str(rid), -1) for rid in requests["request_id"]])
    if (idx < 0).any():
        return None
    return np.asarray(cols["instance"])[idx]
