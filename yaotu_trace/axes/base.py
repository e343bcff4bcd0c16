"""Types shared by the four axis analyzers: status, cause, evidence, rule hits and the axis
result.

An analyzer is a pure function of an `AxisInput` (the request table, the optional step log and
engine metrics, the engine settings) and the thresholds; it returns an `AxisResult` holding
only builtins-convertible values, so the report never carries a DataFrame or NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from yaotu_trace.catalog.gpus import DEFAULT_LINK_GBPS
from yaotu_trace.catalog.units import MAX_COUNT, check_block_size, check_kv_bytes_per_token
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from yaotu_trace.data.engine_metrics import EngineMetrics
    from yaotu_trace.data.steplog import StepLog
    from yaotu_trace.prefix.rules import ReplayRules


class AxisName(StrEnum):
    """The four axes, in report order."""

    QUEUEING = "queueing"
    KV_MEMORY = "kv_memory"
    PREFIX_REUSE = "prefix_reuse"
    PD_INTERFERENCE = "pd_interference"


class Status(StrEnum):
    """An axis verdict. `insufficient_data` names the columns that would decide it."""

    OK = "ok"
    WARNING = "warning"
    BOTTLENECK = "bottleneck"
    INSUFFICIENT_DATA = "insufficient_data"


class Severity(StrEnum):
    """A finding's weight; `bottleneck` and `warning` set the axis status of the same name."""

    INFO = "info"
    WARNING = "warning"
    BOTTLENECK = "bottleneck"


SEVERITY_RANK: Mapping[Severity, int] = {
    Severity.INFO: 0,
    Severity.WARNING: 1,
    Severity.BOTTLENECK: 2,
}


class Cause(StrEnum):
    """What makes an axis bad, as the rules that find it name it (`Rule.cause`).

    Each axis' causes are listed together, in the order the decision flow looks at them: when
    the rules that fired on an axis name several, the axis' cause is the first of them here.
    """

    # queueing — KV admission first; idle seats next to a queue come before a burst (the
    # burst is the hot instance's share); queueing too large to be ok that no rule explains is
    # `unidentified` (what to measure next says how); most of latency queued that no rule explains
    # is `admission_blocked` (the reason is not in the data). Failed requests, when nothing else
    # is wrong with the queue, are `request_failures`.
    KV_ADMISSION = "kv_admission"
    DISPATCH_OVERHEAD = "dispatch_overhead"
    LOAD_IMBALANCE = "load_imbalance"
    ARRIVAL_BURST = "arrival_burst"
    BATCH_SHAPE = "batch_shape"
    ADMISSION_BLOCKED = "admission_blocked"
    UNIDENTIFIED = "unidentified"
    REQUEST_FAILURES = "request_failures"
    # kv_memory
    KV_CAPACITY = "kv_capacity"
    SPIKY_DEMAND = "spiky_demand"
    PREEMPTION = "preemption"
    # prefix_reuse: where the reuse is lost, else that it is
    CACHE_KEYS = "cache_keys"
    ROUTING = "routing"
    CACHE_CAPACITY = "capacity"
    PREFIX_RECOMPUTE = "prefix_recompute"
    # pd_interference: a disaggregated deployment's placement, else interference
    KV_TRANSFER = "kv_transfer"
    PD_RATIO = "pd_ratio"
    TRANSFER_FAILURES = "transfer_failures"
    PREFILL_INTERFERENCE = "prefill_interference"


def first_cause(causes: Iterable[Cause | None]) -> Cause | None:
    """The first of `causes` in `Cause` order (None when none is given)."""
    order = list(Cause)
    return min((c for c in causes if c is not None), key=order.index, default=None)


class Source(StrEnum):
    """The three inputs an axis may draw on."""

    REQUESTS = "requests"
    STEPS = "steps"
    METRICS = "metrics"


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One number behind a verdict and, when it was compared, the threshold it met or missed."""

    name: str
    value: float | int | str | None
    unit: str = ""
    threshold: float | None = None
    threshold_name: str | None = None
    comparison: str | None = None  # ">=", ">", "<", "<=" — how value was tested
    passed: bool | None = None


def check(
    name: str, value: float | int | None, op: str, threshold_name: str, threshold: float,
    unit: str = "ratio",
) -> Evidence:
    """Compare a measured value with a named threshold and record the outcome as evidence."""
    passed: bool | None
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        passed = None
    else:
        passed = {
            ">=": value >= threshold,
            ">": value > threshold,
            "<": value < threshold,
            "<=": value <= threshold,
        }[op]
    return Evidence(name=name, value=value, unit=unit, threshold=threshold,
                    threshold_name=threshold_name, comparison=op, passed=passed)


def fact(name: str, value: float | int | str | None, unit: str = "") -> Evidence:
    """A measured number shown as evidence without a threshold."""
    return Evidence(name=name, value=value, unit=unit)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleHit:
    """A rule that fired on an axis, with the numbers (and thresholds) that made it fire."""

    rule_id: str
    evidence: tuple[Evidence, ...]
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    """Engine limits and cost inputs given on the command line (None when unknown).

    `kv_capacity_tokens` is the KV pool of one instance; `kv_bytes_per_token` and
    `active_params` come from `--model` (catalog) or `--kv-bytes-per-token`.
    `block_size_given` says the block size was set explicitly (the prefix replay then uses it
    instead of its preset's). `gpu` and `gpu_flops_per_s` (dense bf16 peak × MFU, from `--gpu`)
    turn the ledger's FLOPs into GPU-seconds; `gpus_per_replica` (`--tp`) is what one instance
    computes a prefill on, for the time a tier's loads are held against. `replay_jobs` and
    `replay_dask` say where the prefix replay runs its independent caches (`--jobs`,
    `--dask`); the numbers do not depend on it.
    """

    block_size_tokens: int = 16
    block_size_given: bool = False
    kv_capacity_tokens: float | None = None
    # `--kv-capacity` was given (`unlimited` too): a capture's stated pool then stays unused.
    kv_capacity_given: bool = False
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    kv_bytes_per_token: int | None = None
    active_params: int | None = None
    model: str | None = None
    link_gbps: float = DEFAULT_LINK_GBPS
    replay_preset: str | None = None
    gpu: str | None = None
    gpu_flops_per_s: float | None = None
    gpus_per_replica: int = 1
    replay_jobs: int = 1
    replay_dask: str | None = None

    def __post_init__(self) -> None:
        """Refuse values no engine has (a usage error naming the option), so that an absurd
        option is never an overflow deep in an analyzer."""
        check_block_size(self.block_size_tokens)
        counts = (("--max-num-seqs", self.max_num_seqs, True),
                  ("--max-batched-tokens", self.max_batched_tokens, True),
                  ("--jobs", self.replay_jobs, False),
                  ("--tp", self.gpus_per_replica, False))
        for option, value, optional in counts:
            if optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not 1 <= value <= MAX_COUNT:
                raise ConfigError(f"{option} {value!r} must be a whole number from 1 to "
                                  f"{MAX_COUNT:.0e}")
        if self.kv_bytes_per_token is not None:
            check_kv_bytes_per_token(self.kv_bytes_per_token)
        positive = (("--kv-capacity", self.kv_capacity_tokens, "tokens"),
                    ("--link-gbps", self.link_gbps, "Gb/s"),
                    ("--gpu", self.gpu_flops_per_s, "FLOP/s"),
                    ("--model", self.active_params, "parameters"))
        for option, amount, unit in positive:
            if amount is not None and not 0 < amount < math.inf:
                raise ConfigError(f"{option}: {amount!r} {unit} must be a finite number > 0")

    def replay_rules(self, trace: Trace) -> tuple[ReplayRules, str, tuple[str, ...]]:
        """The prefix replay's rules for `trace` (rules, preset name, notes): `--preset` (else
        the one `trace replay` picks for the trace) at `--block-size` when it was given (else
        the preset's); one unlimited cache. Every part of a command that judges one run reads
        the same rules, so one page never shows two replays' numbers for one question."""
        from yaotu_trace.prefix.rules import effective_rules

        overrides: dict[str, Any] = {}
        if self.block_size_given:
            overrides["block_size_tokens"] = int(self.block_size_tokens)
        return effective_rules(trace, self.replay_preset, **overrides)


def with_captured_limits(settings: EngineSettings, trace: Trace) -> EngineSettings:
    """`settings` with the limits the trace's capture states (`Trace.engine_limits`) where no
    option set them: an option always wins over the capture."""
    limits = trace.engine_limits
    if limits is None:
        return settings
    return replace(
        settings,
        max_num_seqs=settings.max_num_seqs or limits.max_num_seqs,
        max_batched_tokens=settings.max_batched_tokens or limits.max_batched_tokens,
        kv_capacity_tokens=(settings.kv_capacity_tokens if settings.kv_capacity_given
                            or settings.kv_capacity_tokens is not None
                            or limits.kv_capacity_tokens is None
                            else float(limits.kv_capacity_tokens)))


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisInput:
    """Everything an analyzer may read. Any of the three sources may be absent.

    The request table is the trace's (`requests`), made on first use: a trace read without
    pandas (`Trace.columns`) keeps its arrays until an analyzer asks for a column they lack.
    The step log may be a Parquet file left on disk: analyzers read it in record batches
    (`StepLog.batches`), never whole.
    """

    trace: Trace
    steps: StepLog | None = None
    metrics: EngineMetrics | None = None
    settings: EngineSettings = field(default_factory=EngineSettings)

    @property
    def requests(self) -> pd.DataFrame:
        """The trace's request table (list columns left on disk are not in it)."""
        return self.trace.requests

    @property
    def num_requests(self) -> int:
        """Requests in the trace, without making its table."""
        return self.trace.num_requests

    def floats(self, column: str) -> np.ndarray | None:
        """A scalar column of the request table as float64 (NaN where missing), or None when
        it holds no value."""
        return self.trace.floats(column)

    def has(self, column: str) -> bool:
        """Whether the request table has `column` with at least one value (a column left on
        disk is not in the table)."""
        return not self.trace.is_lazy(column) and self.trace.has(column)

    def step_has(self, column: str) -> bool:
        """Whether the step log has `column` with at least one value."""
        return self.steps is not None and self.steps.has(column)

    def step_has_kv_usage(self) -> bool:
        """Whether some step of the log has a KV usage (`StepLog.has_kv_usage`)."""
        return self.steps is not None and self.steps.has_kv_usage()

    @classmethod
    def of(
        cls,
        trace: Trace,
        metrics: EngineMetrics | None = None,
        settings: EngineSettings | None = None,
    ) -> AxisInput:
        """The input of every analyzer for one trace (step log attached to the trace); the
        limits its capture states fill the settings no option gave (`EngineLimits`)."""
        return cls(trace=trace, steps=trace.steps, metrics=metrics,
                   settings=with_captured_limits(settings or EngineSettings(), trace))


class AxisMetrics(Protocol):
    """What the diagnosis reads of any axis' measurements without knowing the axis; the rest
    it reads from the axis' own metrics type (`metrics_of`)."""

    def headline(self) -> tuple[Evidence, ...]:
        """The measurements shown as the axis' evidence when no rule fired on it."""
        ...


def measured(*groups: Sequence[Evidence]) -> tuple[Evidence, ...]:
    """The measured values (not None) of the first group that has any: an axis' headline,
    with the measurements telemetry alone gives as a later group."""
    for group in groups:
        kept = tuple(e for e in group if e.value is not None)
        if kept:
            return kept
    return ()


M = TypeVar("M")


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisResult:
    """One axis: status, cause, score for ranking, sources used, metrics, evidence and rules.

    `cause` is the first (`Cause` order) of the causes its fired rules name; `score` is the
    axis' share of latency or work lost (0–1) used to rank bottlenecks; `missing` names the
    columns or series that would decide an `insufficient_data` axis (or sharpen a decided one);
    `next_steps` says what to measure next.
    """

    axis: AxisName
    status: Status
    cause: Cause | None
    score: float | None
    score_basis: str
    sources: tuple[Source, ...]
    metrics: AxisMetrics
    hits: tuple[RuleHit, ...] = ()
    missing: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """Ids of the rules that fired, in firing order."""
        return tuple(h.rule_id for h in self.hits)


def metrics_of(result: AxisResult, kind: type[M]) -> M:
    """The axis' metrics as its own type (`QueueingMetrics` for queueing, ...); another type is
    a bug, raised as a TypeError."""
    metrics = result.metrics
    if not isinstance(metrics, kind):
        raise TypeError(f"{result.axis} holds {type(metrics).__name__}, not {kind.__name__}")
    return metrics


def status_from(hits: Sequence[RuleHit], severity_of: Mapping[str, Severity]) -> Status:
    """The worst severity among fired rules, as a status (`info` only → ok)."""
    worst = max((SEVERITY_RANK[severity_of[h.rule_id]] for h in hits), default=0)
    return {0: Status.OK, 1: Status.WARNING, 2: Status.BOTTLENECK}[worst]


def finite(value: Any) -> float | None:
    """A float, or None for missing, NaN and infinite values."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, or None when either is missing or den is zero."""
    if num is None or den is None or den == 0:
        return None
    return finite(num / den)
