"""`trace sweep` core: a trace and rules in, the capacity-curve report section out.

Builds the block chains with the replay's own preparation (`prepare`, `effective_rules`), picks
the per-instance partition for scope `instance`, runs the one-pass sweep and turns the exact
curve into a builtins-only section: sampled points, the knee and the 50/90/99 % capacities, in
blocks, tokens and (when the KV bytes per token are known) bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.data.prefix_reuse import CapacityPoint
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.kernels.curve import DEFAULT_SHARES, CapacityCurve
from yaotu_trace.prefix.prepare import PreparedTrace, prepare
from yaotu_trace.prefix.rules import ReplayRules, Route, Scope
from yaotu_trace.prefix.window import (
    MeasurementWindow,
    WarmupSpec,
    distinct_blocks_before,
    measured_only,
    measurement_window,
)

if TYPE_CHECKING:
    from yaotu_trace.prefix.kernels.chains import BlockChains

KNEE_DEFINITION = (
    "Kneedle: with capacity scaled to [0, 1] up to the capacity that reaches the unlimited hits "
    "and hits scaled to [0, 1] of the unlimited hits, the capacity where the curve is farthest "
    "above the diagonal; beyond it a block buys less than the average block"
)
METRIC = "hit ratio = Σ hit tokens / Σ prompt tokens (token-weighted), at capacity C per cache"
# Per-instance curves cost one pass each; beyond this many instances only the total is shown.
MAX_INSTANCE_CURVES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveSectionSpec:
    """How a swept curve is written up: the preset and the model it names, the KV bytes per
    token that give capacities in bytes (None: blocks and tokens only), the points sampled
    (the knee and the 50/90/99 % capacities are always among them), and the notes on how the
    rules were chosen."""

    preset: str
    points: int = 12
    model: str | None = None
    kv_bytes_per_token: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCurve:
    """One instance's own curve (scope instance), summarised; capacities in blocks."""

    label: str
    requests: int
    prompt_tokens: int
    unlimited_hit_ratio: float
    knee_blocks: int | None
    blocks_for_50: int | None
    blocks_for_90: int | None
    blocks_for_99: int | None
    full_reuse_blocks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityCurveSection:
    """The `capacity_curve` report section (builtins only)."""

    preset: str
    rules: dict[str, Any]
    model: str | None
    kv_bytes_per_token: int | None
    metric: str
    knee_definition: str
    requests: int  # measured requests (after `--warmup`, if any)
    prompt_tokens: int
    full_blocks: int
    cacheable_blocks: int
    distinct_blocks: int
    caches: int
    unlimited_hit_tokens: int
    unlimited_hit_ratio: float
    full_reuse: CapacityPoint | None
    knee: CapacityPoint | None
    shares: tuple[CapacityPoint, ...]
    points: tuple[CapacityPoint, ...]
    per_instance: tuple[InstanceCurve, ...] = ()
    notes: tuple[str, ...] = ()
    # `--warmup` (`MeasurementWindow.to_dict()`, without a capacity): the curve counts the
    # requests after it; a point marked `filled_before_window: false` had not filled by then.
    window: dict[str, Any] | None = None


def partition_codes(prepared: PreparedTrace, rules: ReplayRules, chains: Any) -> np.ndarray | None:
    """Cache index per request for scope instance, or None for one global cache.

    Routes that do not look at the cache (the trace's column, round-robin, random,
    least-loaded) give the same assignment at every capacity, so one sweep covers them.
    prefix-affinity follows the cache contents, which differ per capacity.
    """
    if rules.scope is not Scope.INSTANCE:
        return None
    # NOTE: the compiled replay starts numba; the numpy sweep of a small trace (`small.py`,
    # one global cache) never gets here.
    from yaotu_trace.prefix.kernels.engine import replay, route_codes

    if rules.route is None and prepared.instance_codes is not None:
        return prepared.instance_codes
    if rules.route is Route.PREFIX_AFFINITY:
        raise ConfigError(
            "--route prefix-affinity depends on each capacity's cache contents, so one sweep "
            "cannot cover it; run `trace replay --capacity C` per capacity instead"
        )
    if rules.route is Route.LEAST_LOADED:
        routed = replay(chains, rules.with_(capacity_blocks=None), None,
                        arrival_s=prepared.arrival_s, finish_s=prepared.finish_s)
        return routed.instance
    return route_codes(rules, prepared.num_requests)


def sweep_trace(trace: Trace, rules: ReplayRules, spec: CurveSectionSpec, *,
                warmup: WarmupSpec | str | None = None
                ) -> tuple[CapacityCurveSection, CapacityCurve]:
    """Sweep every LRU capacity of `trace` under `rules`; returns (section, exact curve),
    the section written up as `spec` says.

    With `warmup` every request still touches the cache but only the requests after it are
    looked up into the curve (`window.py`), and each point says whether its cache had filled.
    """
    # NOTE: the compiled sweep starts numba; `small.py` imports this module for its section
    # and sweeps a small trace in numpy.
    from yaotu_trace.prefix.kernels.sweep import sweep

    prepared = sweep_input(trace, rules)
    chains = prepared.chains(rules)
    codes = partition_codes(prepared, rules, chains)
    n_caches = 0 if codes is None else int(np.unique(codes).size)
    window = None if warmup is None else measurement_window(warmup, prepared.arrival_s)
    swept = chains if window is None else measured_only(chains, window.warmup_requests)
    curve = sweep(swept, touch_order=rules.touch_order, instance_codes=codes,
                  kv_bytes_per_token=spec.kv_bytes_per_token,
                  per_instance=0 < n_caches <= MAX_INSTANCE_CURVES)
    section = curve_section(prepared, rules, chains, codes, curve, spec, window)
    return section, curve


def sweep_input(trace: Trace, rules: ReplayRules) -> PreparedTrace:
    """The prepared trace a sweep under `rules` runs on, after the checks a sweep needs."""
    if rules.eviction != "lru":
        raise ConfigError(
            f"the capacity sweep is exact for LRU only (stack distances); got --eviction "
            f"{rules.eviction}; run `trace replay --capacity C` per capacity instead"
        )
    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    rules.check_source_block_size(source)
    return prepare(trace, with_outputs=rules.cache_outputs, stream=True)


def curve_section(
    prepared: PreparedTrace,
    rules: ReplayRules,
    chains: BlockChains,
    codes: np.ndarray | None,
    curve: CapacityCurve,
    spec: CurveSectionSpec,
    window: MeasurementWindow | None = None,
) -> CapacityCurveSection:
    """The report section of `curve`, swept from `chains` (with `codes`, one cache per
    instance), with the notes on how it was taken (and, with a measurement window, whether
    each cache filled before it)."""
    n_caches = 0 if codes is None else int(np.unique(codes).size)
    all_notes = list(spec.notes)
    if window is not None:
        distinct, caches = distinct_blocks_before(
            chains.offsets, chains.ids, window.warmup_requests, codes, chains.output_offsets,
            chains.output_ids)
        window = window.with_fill(None, distinct, caches)
        all_notes.append(window.describe())
        all_notes.append(
            f"a capacity above {distinct} blocks" + (" per cache" if caches > 1 else "")
            + " never filled before the window (marked; kvcache-simulator omits such budgets)")
    per_instance: tuple[InstanceCurve, ...] = ()
    if codes is not None:
        all_notes.append(f"scope instance: {curve.partitions} caches, each of the capacity shown; "
                         "hits are summed over instances")
        from_column = rules.route is None and prepared.instance_codes is not None
        labels = prepared.instance_labels if from_column else ()
        per_instance = _instance_rows(curve, codes, labels)
        if n_caches > MAX_INSTANCE_CURVES:
            all_notes.append(f"per-instance curves omitted: {n_caches} instances "
                             f"(shown up to {MAX_INSTANCE_CURVES})")
    if not rules.cache_outputs:
        all_notes.append("output blocks are not cached (--cache-outputs is off)")
    elif chains.output_ids is None:
        all_notes.append("--cache-outputs has no effect: the trace has no output token ids")
    if curve.unlimited_hit_tokens == 0:
        all_notes.append("no block is ever reused under these rules: the curve is flat at 0")
    if curve.kv_bytes_per_token is None:
        all_notes.append("capacities in bytes need --model or --kv-bytes-per-token")
    return build_section(curve, rules, replace(spec, notes=tuple(all_notes)), chains,
                         per_instance=per_instance, window=window)


def _instance_rows(curve: CapacityCurve, codes: np.ndarray,
                   labels: tuple[str, ...]) -> tuple[InstanceCurve, ...]:
    """Summaries of the per-instance curves, labelled by the trace's instance names if any."""
    requests = np.bincount(np.asarray(codes, dtype=np.int64))
    rows = []
    for code, inst in zip(curve.instance_codes, curve.instance_curves, strict=True):
        caps = inst.share_capacities_blocks
        rows.append(InstanceCurve(
            label=labels[code] if code < len(labels) else f"instance-{code}",
            requests=int(requests[code]),
            prompt_tokens=inst.prompt_tokens_total,
            unlimited_hit_ratio=inst.unlimited_hit_ratio,
            knee_blocks=inst.knee_capacity_blocks,
            blocks_for_50=caps.get(0.5),
            blocks_for_90=caps.get(0.9),
            blocks_for_99=caps.get(0.99),
            full_reuse_blocks=inst.full_reuse_capacity_blocks,
        ))
    return tuple(rows)


def build_section(
    curve: CapacityCurve,
    rules: ReplayRules,
    spec: CurveSectionSpec,
    chains: BlockChains,
    *,
    per_instance: tuple[InstanceCurve, ...] = (),
    window: MeasurementWindow | None = None,
) -> CapacityCurveSection:
    """Sample the exact curve of `chains` into report points (always including knee and share
    points); the counts are the measured requests'.

    `window` (with its fill count) marks each point filled before the window or not.
    """
    points = spec.points
    requests = chains.num_requests - (0 if window is None else window.warmup_requests)
    fill = None if window is None else window.distinct_blocks_before_window
    labels = _capacity_labels(curve)
    sampled = tuple(
        p for c in curve.sample_capacities(points).tolist()
        if (p := _point(curve, c, ", ".join(labels.get(int(c), [])), fill)) is not None
    )
    shares = tuple(
        p for s in DEFAULT_SHARES
        if (p := _point(curve, curve.share_capacities_blocks.get(s), f"{s:.0%}", fill))
        is not None
    )
    rule_dict = rules.to_dict()
    rule_dict.pop("capacity_blocks", None)
    return CapacityCurveSection(
        preset=spec.preset,
        rules=rule_dict,
        model=spec.model,
        kv_bytes_per_token=curve.kv_bytes_per_token,
        metric=METRIC,
        knee_definition=KNEE_DEFINITION,
        requests=requests,
        prompt_tokens=curve.prompt_tokens_total,
        full_blocks=curve.full_blocks_total,
        cacheable_blocks=swept_blocks(chains, window),
        distinct_blocks=chains.num_distinct,
        caches=curve.partitions,
        unlimited_hit_tokens=curve.unlimited_hit_tokens,
        unlimited_hit_ratio=curve.unlimited_hit_ratio,
        full_reuse=_point(curve, curve.full_reuse_capacity_blocks, "full reuse", fill)
        if curve.unlimited_hit_tokens else None,
        knee=_point(curve, curve.knee_capacity_blocks, "knee", fill),
        shares=shares,
        points=sampled,
        per_instance=per_instance,
        notes=spec.notes,
        window=None if window is None else _window_dict(window),
    )


def _point(curve: CapacityCurve, capacity: int | None, label: str,
           fill: int | None) -> CapacityPoint | None:
    """The curve at `capacity` blocks (None: no point); `fill` is the distinct blocks seen
    before the measurement window (None without one): a capacity up to it had filled."""
    if capacity is None:
        return None
    cap = int(capacity)
    hit = int(curve.hit_tokens_at(cap))
    size_bytes = curve.to_bytes(cap)
    return CapacityPoint(
        label=label,
        capacity_blocks=cap,
        capacity_tokens=int(curve.to_tokens(cap)),
        capacity_bytes=None if size_bytes is None else int(size_bytes),
        hit_tokens=hit,
        hit_ratio=hit / curve.prompt_tokens_total if curve.prompt_tokens_total else 0.0,
        share_of_unlimited=hit / curve.unlimited_hit_tokens if curve.unlimited_hit_tokens
        else 0.0,
        block_hit_ratio_over_full_blocks=float(curve.block_hit_ratio_over_full_blocks_at(cap)),
        filled_before_window=None if fill is None else cap <= fill,
    )


def _capacity_labels(curve: CapacityCurve) -> dict[int, list[str]]:
    """The names a sampled capacity carries in the table: knee, share of unlimited, full
    reuse (several when they coincide)."""
    labels: dict[int, list[str]] = {}
    if curve.knee_capacity_blocks is not None:
        labels.setdefault(curve.knee_capacity_blocks, []).append("knee")
    for share in DEFAULT_SHARES:
        cap = curve.share_capacities_blocks.get(share)
        if cap is not None:
            labels.setdefault(cap, []).append(f"{share:.0%} of unlimited")
    if curve.unlimited_hit_tokens:
        labels.setdefault(curve.full_reuse_capacity_blocks, []).append("full reuse")
    return labels


def _window_dict(window: MeasurementWindow) -> dict[str, Any]:
    """The window of a curve: the fill count holds for every capacity up to it."""
    out = window.to_dict()
    for key in ("capacity_blocks", "filled_before_window"):
        out.pop(key)
    return out


def swept_blocks(chains: Any, window: MeasurementWindow | None) -> int:
    """Cacheable blocks of the measured requests (all of them without a window)."""
    start = 0 if window is None else window.warmup_requests
    return int(chains.num_blocks[start:].sum())
