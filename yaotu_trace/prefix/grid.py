"""`trace replay --grid`: many rule sets (block sizes × tenant isolation × capacities) at once.

The rule sets share work instead of each reading the trace:

- one read of the prompts per block size builds the chains with the model/adapter namespaces;
  tenant isolation adds the tenant to each block's identity from those chains
  (`partition.with_namespaces`), which gives the same ids as hashing it in;
- with LRU eviction and caches that do not steer routing, every capacity of one (block size,
  isolation) comes from one pass of LRU stack distances (`sweep.py`), exact by the stack
  property; other policies replay each capacity;
- the passes are independent and run together on the runner (`--jobs`, `--dask`).

Every row equals the single `trace replay` under its rules (no waterfall).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.sweep import sweep
from yaotu_trace.prefix.partition import (
    Partitions,
    ReplayJob,
    Runner,
    cache_partitions,
    replay_many,
    with_namespaces,
)
from yaotu_trace.prefix.prepare import PreparedTrace, prepare
from yaotu_trace.prefix.rules import Accounting, Eviction, ReplayRules, Route, Scope


@dataclass(frozen=True, slots=True, kw_only=True)
class GridCapacity:
    """One capacity of the grid: its label as given, and blocks per block size (None: unlimited)."""

    label: str
    blocks_by_block_size: dict[int, int | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class GridRow:
    """Hits of one rule set of the grid."""

    block_size_tokens: int
    tenant_isolation: bool
    capacity: str
    capacity_blocks: int | None
    hit_ratio: float  # token-weighted
    saved_prefill_tokens: int
    remaining_prefill_tokens: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"block_size_tokens": self.block_size_tokens,
                "tenant_isolation": self.tenant_isolation, "capacity": self.capacity,
                "capacity_blocks": self.capacity_blocks, "hit_ratio": self.hit_ratio,
                "saved_prefill_tokens": self.saved_prefill_tokens,
                "remaining_prefill_tokens": self.remaining_prefill_tokens}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayGrid:
    """Every combination's hit ratio and saved tokens, in grid order."""

    requests: int
    prompt_tokens: int
    base_rules: ReplayRules
    rows: tuple[GridRow, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins."""
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "hit_ratio_definition": "token-weighted: sum of hit tokens / sum of prompt tokens",
                "base_rules": self.base_rules.to_dict(),
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}


def _sweep_task(chains: BlockChains, touch_order: str, codes: np.ndarray | None,
                capacities: tuple[int | None, ...]) -> np.ndarray:
    """Hit tokens at each capacity (None: unlimited) from one stack-distance pass."""
    curve = sweep(chains, touch_order=touch_order, instance_codes=codes)
    finite = [c for c in capacities if c is not None]
    at = dict(zip(finite, curve.hit_tokens_at(np.asarray(finite, dtype=np.int64)).tolist(),
                  strict=True)) if finite else {}
    return np.asarray([curve.unlimited_hit_tokens if c is None else at[c] for c in capacities],
                      dtype=np.int64)


def _sweepable(rules: ReplayRules, parts: Partitions) -> bool:
    """Whether one stack-distance pass gives every capacity exactly (the clean LRU model over
    static caches; an engine-exact pool is not a stack algorithm, so it replays each capacity)."""
    return (rules.eviction is Eviction.LRU and rules.accounting is Accounting.CLEAN
            and rules.route is not Route.PREFIX_AFFINITY
            and (rules.scope is Scope.GLOBAL or parts.codes is not None))


def replay_grid(trace: Trace, base: ReplayRules, *, block_sizes: Sequence[int],
                isolations: Sequence[bool], capacities: Sequence[GridCapacity],
                runner: Runner) -> ReplayGrid:
    """Replay every (block size, isolation, capacity) of the grid under `base`'s other rules."""
    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    for b in block_sizes:
        base.with_(block_size_tokens=b).check_source_block_size(source)
    prepared = prepare(trace, with_outputs=base.cache_outputs, stream=True)
    notes: list[str] = []
    if any(isolations) and prepared.tenant_codes is None:
        notes.append("tenant isolation is on in some rows but the trace has no tenant column: "
                     "those rows equal the rows without it")
    # (kind, payload, rows it answers): a sweep answers many capacities, a replay one.
    sweeps: list[tuple[Any, ...]] = []
    sweep_rows: list[list[int]] = []
    jobs: list[ReplayJob] = []
    job_rows: list[int] = []
    keys: list[tuple[int, bool, GridCapacity]] = []
    for b in block_sizes:
        model_rules = base.with_(block_size_tokens=b, tenant_isolation=False,
                                 capacity_per_tenant=False)
        shared = prepared.chains(model_rules)
        for iso in isolations:
            rules_bi = base.with_(block_size_tokens=b, tenant_isolation=iso,
                                  capacity_per_tenant=base.capacity_per_tenant and iso)
            chains = shared
            if iso and prepared.tenant_codes is not None:
                chains = with_namespaces(shared, prepared.tenant_codes)
            parts = _partitions(prepared, rules_bi, chains)
            caps = []
            for cap in capacities:
                keys.append((b, iso, cap))
                caps.append((len(keys) - 1, cap.blocks_by_block_size[b]))
            if _sweepable(rules_bi, parts):
                sweeps.append((chains, str(rules_bi.touch_order), parts.codes,
                               tuple(c for _, c in caps)))
                sweep_rows.append([k for k, _ in caps])
                continue
            for k, blocks in caps:
                r = rules_bi.with_(capacity_blocks=blocks)
                jobs.append(ReplayJob(chains=chains, rules=r,
                                      instance_codes=prepared.instance_codes,
                                      arrival_s=prepared.arrival_s, finish_s=prepared.finish_s,
                                      partitions=_partitions(prepared, r, chains)))
                job_rows.append(k)
    hits: dict[int, int] = {}
    for rows, result in zip(sweep_rows, runner.map(_sweep_task, sweeps), strict=True):
        hits.update(zip(rows, (int(h) for h in result), strict=True))
    for k, result in zip(job_rows, replay_many(jobs, runner), strict=True):
        hits[k] = int(result.hit_tokens.sum())
    prompt_total = int(prepared.prompt_tokens.sum())
    grid_rows = tuple(
        GridRow(block_size_tokens=b, tenant_isolation=iso, capacity=cap.label,
                capacity_blocks=cap.blocks_by_block_size[b],
                hit_ratio=hits[k] / prompt_total if prompt_total else 0.0,
                saved_prefill_tokens=hits[k], remaining_prefill_tokens=prompt_total - hits[k])
        for k, (b, iso, cap) in enumerate(keys)
    )
    if base.scope is Scope.INSTANCE or base.capacity_per_tenant:
        notes.append("capacity is per cache (per instance, per tenant where set)")
    return ReplayGrid(requests=prepared.num_requests, prompt_tokens=prompt_total,
                      base_rules=base, rows=grid_rows, notes=tuple(notes))


def _partitions(prepared: PreparedTrace, rules: ReplayRules, chains: BlockChains) -> Partitions:
    return cache_partitions(rules, prepared.num_requests, instance_codes=prepared.instance_codes,
                            tenant_codes=prepared.tenant_codes, arrival_s=prepared.arrival_s,
                            finish_s=prepared.finish_s, chains=chains)


def parse_axis(text: str) -> tuple[str, list[str]]:
    """`--grid NAME=V1,V2,...` → (name, values); names: block-size, tenant-isolation, capacity."""
    name, sep, values = text.partition("=")
    name = name.strip().replace("_", "-")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or name not in GRID_AXES or not items:
        raise ConfigError(f"--grid {text!r}: write NAME=V1,V2,... with NAME one of "
                          f"{', '.join(GRID_AXES)} (e.g. --grid block-size=16,64,256)")
    return name, items


GRID_AXES = ("block-size", "tenant-isolation", "capacity")


def parse_switch(value: str) -> bool:
    """on/off (or true/false, yes/no) for the tenant-isolation axis."""
    low = value.lower()
    if low in ("on", "true", "yes", "1"):
        return True
    if low in ("off", "false", "no", "0"):
        return False
    raise ConfigError(f"--grid tenant-isolation value {value!r}: use on or off")
