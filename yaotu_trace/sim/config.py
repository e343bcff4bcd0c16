"""Simulator configuration: scheduler, KV pool, cluster and step-cost parameters as frozen values.

Everything here is plain numbers and enums (no catalog lookups, no I/O): the caller resolves a
model and a GPU into a `StepCost` and a pool size, and the engine only sees numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from yaotu_trace.errors import ConfigError


class SchedulerKind(StrEnum):
    """Which engine's scheduling rules the simulator follows."""

    VLLM = "vllm"  # unified token budget, running first, preempt running[-1] (engines.md §1.7–1.8)
    SGLANG = "sglang"  # prefill batches replace decode steps, retract fewest-output first (§2.5)


class EngineVersion(StrEnum):
    """An engine release the simulator follows (`--engine`): its scheduler family and the
    defaults that release ships with."""

    VLLM_0_33 = "vllm-0.33"  # async scheduling on; without chunking the budget is max_model_len
    SGLANG_0_5 = "sglang-0.5"  # synchronous (the overlap scheduler is not modelled)

    @property
    def scheduler(self) -> SchedulerKind:
        """The scheduling rules of this release."""
        return SchedulerKind.SGLANG if self is EngineVersion.SGLANG_0_5 else SchedulerKind.VLLM

    @property
    def label(self) -> str:
        """How a report names it."""
        return {"vllm-0.33": "vLLM 0.33", "sglang-0.5": "SGLang 0.5"}[self.value]


# The release each scheduler family stands for when `--engine` is not given.
DEFAULT_ENGINES: dict[SchedulerKind, EngineVersion] = {
    SchedulerKind.VLLM: EngineVersion.VLLM_0_33,
    SchedulerKind.SGLANG: EngineVersion.SGLANG_0_5,
}


class RoutePolicy(StrEnum):
    """How a cluster assigns a request to an instance at its arrival."""

    ROUND_ROBIN = "round-robin"
    LEAST_LOADED = "least-loaded"  # fewest in-flight requests
    PREFIX_AFFINITY = "prefix-affinity"  # sgl-router cache_aware (engines.md §3)
    KV_AWARE = "kv-aware"  # Dynamo's cost: prefill blocks after overlap + decode blocks (§6)
    TRACE = "trace"  # as the trace's `instance` column says
    WEIGHTED = "weighted"  # fixed shares (`route_weights`), interleaved deterministically
    RANDOM = "random"  # uniform draw per request, blind to load and prefixes (fixed seed)


# Routes decided before the run: each request's instance is fixed in advance (`assigned_instances`).
FIXED_ROUTES = frozenset({RoutePolicy.TRACE, RoutePolicy.WEIGHTED, RoutePolicy.RANDOM})

ROUTE_CODES: dict[RoutePolicy, int] = {
    RoutePolicy.ROUND_ROBIN: 0,
    RoutePolicy.LEAST_LOADED: 1,
    RoutePolicy.PREFIX_AFFINITY: 2,
    RoutePolicy.KV_AWARE: 3,
    # NOTE: fixed routes never reach the loop's router (`Inputs.assigned` is set for every
    # request); the code only fills the field.
    RoutePolicy.TRACE: 0,
    RoutePolicy.WEIGHTED: 0,
    RoutePolicy.RANDOM: 0,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """Step time of one engine iteration, in seconds, as numbers the compiled loop can use.

    Roofline (cost-model §2.1–2.2): `max(FLOPs / flops_per_s, bytes / bytes_per_s) + overhead`
    with FLOPs = `2·linear_params·T + attention_flops_per_token_pair·(Σ c(p + c/2) + Σ ctx)` and
    bytes = `dense_weight_bytes + expert_weight_bytes·touched(T) + kv_bytes_per_token·(Σ ctx +
    Σ p + T)`. `flops_per_s` and `bytes_per_s` already include MFU/MBU and tensor parallelism.
    When `calibrated` is set, the step time is `a + b·prefill_tokens + c·Σcontext` instead.
    `host_gap_s` is host work that does not overlap the GPU (scheduling, input preparation,
    detokenization without async output): it idles the GPU between two steps of an instance, so
    it appears in the step log as a gap `start_{k+1} − end_k` while requests wait, unlike
    `overhead_s`, which is counted inside the step. `per_token_s` adds a cost per scheduled token
    (prefill and decode alike) to the fitted line: the shared step time of the comparison with
    the real scheduler (`benchmarks/engines/vllm_steps.py`).
    """

    linear_params: float
    attention_flops_per_token_pair: float
    dense_weight_bytes: float
    expert_weight_bytes: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    kv_bytes_per_token: float
    flops_per_s: float
    bytes_per_s: float
    overhead_s: float = 0.003
    host_gap_s: float = 0.0
    calibrated: tuple[float, float, float] | None = None
    per_token_s: float = 0.0

    def __post_init__(self) -> None:
        if self.flops_per_s <= 0 or self.bytes_per_s <= 0:
            raise ConfigError("GPU compute and bandwidth must be positive")
        if self.overhead_s < 0:
            raise ConfigError(f"step overhead {self.overhead_s} s must be >= 0")
        if not self.host_gap_s >= 0:
            raise ConfigError(f"host gap {self.host_gap_s} s must be >= 0")

    @classmethod
    def fixed(cls, a_s: float, b_s_per_token: float = 0.0, c_s_per_context: float = 0.0,
              *, kv_bytes_per_token: float = 0.0, host_gap_s: float = 0.0,
              per_token_s: float = 0.0) -> StepCost:
        """A linear step time `a + b·prefill_tokens + c·Σcontext + d·tokens` (tests,
        calibration, the comparison with the real scheduler)."""
        return cls(linear_params=0.0, attention_flops_per_token_pair=0.0, dense_weight_bytes=0.0,
                   kv_bytes_per_token=kv_bytes_per_token, flops_per_s=1.0, bytes_per_s=1.0,
                   overhead_s=0.0, host_gap_s=host_gap_s,
                   calibrated=(a_s, b_s_per_token, c_s_per_context), per_token_s=per_token_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """One scenario: engine rules, KV pool, cluster shape and step cost.

    `kv_blocks` is `num_gpu_blocks` per instance (block 0 is vLLM's null block, so
    `kv_blocks − 1` are usable). `long_prefill_token_threshold` 0 means no per-request cap.
    `pd` is `(prefill instances, decode instances)` or None for colocated instances;
    `link_bytes_per_s` and `link_latency_s` price the KV transfer (α + bytes / bandwidth),
    optionally overlapped layer by layer with the prefill (`layerwise_overlap`, `layers`).
    `async_scheduling` is vLLM's async scheduler (two batches in flight, the next one decided
    while the GPU runs the current one); off here, on in the `vllm-0.33` engine preset
    (`sim.scenario`). SGLang's rules run synchronously.
    """

    scheduler: SchedulerKind = SchedulerKind.VLLM
    kv_blocks: int
    block_size_tokens: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    prefix_caching: bool = True
    watermark: float = 0.0
    instances: int = 1
    route: RoutePolicy = RoutePolicy.ROUND_ROBIN
    pd: tuple[int, int] | None = None
    link_bytes_per_s: float = 25e9
    link_latency_s: float = 0.0006
    layerwise_overlap: bool = True
    layers: int = 32
    affinity_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    tensor_parallel: int = 1
    route_weights: tuple[float, ...] | None = None
    async_scheduling: bool = False
    step_cost: StepCost

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheduler", SchedulerKind(self.scheduler))
        object.__setattr__(self, "route", RoutePolicy(self.route))
        checks = (
            ("kv_blocks", self.kv_blocks, 2),
            ("block_size_tokens", self.block_size_tokens, 1),
            ("max_num_seqs", self.max_num_seqs, 1),
            ("max_batched_tokens", self.max_batched_tokens, 1),
            ("instances", self.instances, 1),
            ("long_prefill_token_threshold", self.long_prefill_token_threshold, 0),
            ("tensor_parallel", self.tensor_parallel, 1),
        )
        for name, value, low in checks:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name.replace('_', '-')} {value!r} must be a whole number "
                                  f">= {low}")
        if self.async_scheduling and self.scheduler is SchedulerKind.SGLANG:
            raise ConfigError("--async-scheduling is vLLM's; the SGLang rules run synchronously "
                              "(its overlap scheduler is not modelled): drop it or use "
                              "--engine vllm-0.33")
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError(f"watermark {self.watermark} must be in [0, 1)")
        if self.pd is not None:
            p, d = self.pd
            if p < 1 or d < 1:
                raise ConfigError(f"--pd {p}:{d} needs at least one prefill and one decode "
                                  "instance")
            if self.link_bytes_per_s <= 0:
                raise ConfigError("the KV link bandwidth must be positive")
        self._check_fixed_route()

    def _check_fixed_route(self) -> None:
        """A fixed route's shape: colocated instances, and one positive weight per instance."""
        if self.route in FIXED_ROUTES and self.pd is not None:
            raise ConfigError(f"--route {self.route} assigns requests to colocated instances; "
                              "drop --pd or pick another --route")
        weights = self.route_weights
        if weights is not None and not all(math.isfinite(w) and w > 0 for w in weights):
            raise ConfigError(f"--route-weights {','.join(f'{w:g}' for w in weights)}: every "
                              "share must be a positive number")
        if self.route is RoutePolicy.WEIGHTED:
            if weights is None:
                raise ConfigError("--route weighted needs --route-weights, e.g. 0.85,0.15 (one "
                                  "share per instance)")
            if len(weights) != self.instances:
                raise ConfigError(f"--route-weights gives {len(weights)} shares for "
                                  f"{self.instances} instance(s); give one per instance")
        elif weights is not None:
            raise ConfigError("--route-weights applies to --route weighted only; add it or "
                              "drop the weights")

    @property
    def total_instances(self) -> int:
        """Instances simulated: P + D under disaggregation, else `instances`."""
        return sum(self.pd) if self.pd is not None else self.instances

    @property
    def gpus(self) -> int:
        """GPUs provisioned: instances × tensor parallelism."""
        return self.total_instances * self.tensor_parallel

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready effective configuration."""
        out = asdict(self)
        out["scheduler"] = str(self.scheduler)
        out["route"] = str(self.route)
        out["pd"] = None if self.pd is None else f"{self.pd[0]}:{self.pd[1]}"
        out["route_weights"] = (None if self.route_weights is None
                                else list(self.route_weights))
        return out
