"""The replays a reconciliation rests on: the engine's rules as given, and one more replay per
cause a trace lets the tool test, each with one condition changed (the deployment's pool size
when it is known, tenants salted apart or not, a cache per instance). A cause is then named
because its replay agrees with the engine's own counts, not because it could be."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from yaotu_trace.data.observed_hits import PoolSize, Reconciliation
from yaotu_trace.data.schema import Trace
from yaotu_trace.prefix.prepare import PreparedTrace, prepare
from yaotu_trace.prefix.reconcile import (
    SHORTFALL_POINTS,
    SHORTFALL_RELATIVE,
    Alternative,
    reconcile,
)
from yaotu_trace.prefix.rules import ReplayRules, Scope
from yaotu_trace.prefix.trace import replay_trace_with_requests


def reconcile_trace(trace: Trace, rules: ReplayRules, *, preset: str | None = None,
                    pool: PoolSize | None = None, margins: tuple[float, float] = (
                        SHORTFALL_POINTS, SHORTFALL_RELATIVE),
                    hits: np.ndarray | None = None) -> Reconciliation | None:
    """The engine's cached tokens in `trace` against the replay under `rules` (its per-request
    `hits` when run already), the shortfall judged at `margins` (points of the prompt tokens,
    share of the replayed hits), with the causes tested by other replays; None when no
    request reports cached tokens."""
    prepared = prepare(trace, with_outputs=rules.cache_outputs, stream=True)
    if prepared.cached_tokens is None:
        return None
    if hits is None:
        hits = _hits(trace, rules, preset)
    instances = len(prepared.instance_labels) if rules.scope is Scope.GLOBAL else 1
    alternatives = tuple(Alternative(cause=cause, label=label,
                                     hit_tokens=_hits(trace, changed, preset))
                         for cause, label, changed in _changes(prepared, rules, pool))
    points, relative = margins
    found = reconcile(prepared.arrival_s, prepared.request_id, prepared.cached_tokens, hits,
                      prepared.prompt_tokens, capacity_blocks=rules.capacity_blocks,
                      instances=instances, alternatives=alternatives, points=points,
                      relative=relative)
    return None if found is None else replace(found, preset=preset)


def _hits(trace: Trace, rules: ReplayRules, preset: str | None) -> np.ndarray:
    """The per-request hit tokens of one replay (no waterfall)."""
    _, table = replay_trace_with_requests(trace, rules, preset=preset, waterfall=False)
    return table.columns["hit_tokens"]


def _changes(prepared: PreparedTrace, rules: ReplayRules, pool: PoolSize | None
             ) -> list[tuple[str, str, ReplayRules]]:
    """(cause, what the replay is, its rules) for every cause this trace can test."""
    out: list[tuple[str, str, ReplayRules]] = []
    if pool is not None and rules.unlimited:
        out.append(("capacity", f"the replay at {pool.blocks:,} blocks ({pool.source})",
                    rules.with_(capacity_blocks=pool.blocks)))
    tenants = prepared.tenant_labels if prepared.tenant_codes is not None else ()
    if len(tenants) > 1 and not rules.capacity_per_tenant:
        label = ("the replay with tenants sharing blocks" if rules.tenant_isolation
                 else "the replay with tenants salted apart")
        out.append(("tenant-salt", label,
                    rules.with_(tenant_isolation=not rules.tenant_isolation)))
    if len(prepared.instance_labels) > 1 and rules.scope is Scope.GLOBAL:
        out.append(("routing", "the replay with a cache per instance",
                    rules.with_(scope=Scope.INSTANCE)))
    return out

