"""The typed values the compiled step loop reads: the engine's rules and shape, and its step cost.

Both are NamedTuples of plain numbers, which numba passes by value and reads by field name, so
the loop names what it uses instead of indexing a positional vector. They are built from a
`SimConfig` here, without NumPy or numba.
"""

from __future__ import annotations

from typing import NamedTuple

from yaotu_trace.sim.config import ROUTE_CODES, SchedulerKind, SimConfig, StepCost


class EngineParams(NamedTuple):
    """Scheduler rules, KV pool and cluster shape of one run (see `SimConfig`)."""

    sglang: bool  # SGLang's rules, else vLLM v1's
    instances: int
    prefill_instances: int  # 0: colocated, no P/D disaggregation
    usable_blocks: int  # per instance: num_gpu_blocks − 1 (vLLM's null block)
    block_size_tokens: int
    max_num_seqs: int
    token_budget: int  # tokens per step
    chunked_prefill: bool
    long_prefill_tokens: int  # 0: no per-request cap
    prefix_caching: bool
    watermark_blocks: int
    route: int  # a `ROUTE_CODES` value
    link_bytes_per_s: float
    link_latency_s: float
    layerwise_overlap: bool
    layers: float
    affinity_threshold: float
    balance_abs_threshold: float
    balance_rel_threshold: float


class StepCostParams(NamedTuple):
    """A `StepCost` as the loop reads it: the roofline terms, or the fitted line when
    `calibrated`."""

    calibrated: bool
    linear_params: float
    attention_flops_per_token_pair: float
    dense_weight_bytes: float
    expert_weight_bytes: float
    experts: float
    experts_per_token: float
    kv_bytes_per_token: float
    flops_per_s: float
    bytes_per_s: float
    overhead_s: float
    a_s: float
    b_s_per_prefill_token: float
    c_s_per_context_token: float
    host_gap_s: float


def engine_params(config: SimConfig, token_budget: int) -> EngineParams:
    """The loop's view of `config`; `token_budget` is the per-step budget `simulate_requests`
    settled."""
    usable = config.kv_blocks - 1
    # NOTE: every field is converted to its declared type, so numba compiles (and caches) one
    # signature whatever numeric types the caller passed.
    return EngineParams(
        sglang=config.scheduler is SchedulerKind.SGLANG,
        instances=int(config.total_instances),
        prefill_instances=int(config.pd[0]) if config.pd is not None else 0,
        usable_blocks=int(usable),
        block_size_tokens=int(config.block_size_tokens),
        max_num_seqs=int(config.max_num_seqs),
        token_budget=int(token_budget),
        chunked_prefill=bool(config.chunked_prefill),
        long_prefill_tokens=int(config.long_prefill_token_threshold),
        prefix_caching=bool(config.prefix_caching),
        watermark_blocks=int(config.watermark * usable),
        route=ROUTE_CODES[config.route],
        link_bytes_per_s=float(config.link_bytes_per_s),
        link_latency_s=float(config.link_latency_s),
        layerwise_overlap=bool(config.layerwise_overlap),
        layers=float(config.layers),
        affinity_threshold=float(config.affinity_threshold),
        balance_abs_threshold=float(config.balance_abs_threshold),
        balance_rel_threshold=float(config.balance_rel_threshold),
    )


def step_cost_params(cost: StepCost) -> StepCostParams:
    """The loop's view of `cost`."""
    a, b, c = cost.calibrated if cost.calibrated is not None else (0.0, 0.0, 0.0)
    return StepCostParams(
        calibrated=cost.calibrated is not None,
        linear_params=float(cost.linear_params),
        attention_flops_per_token_pair=float(cost.attention_flops_per_token_pair),
        dense_weight_bytes=float(cost.dense_weight_bytes),
        expert_weight_bytes=float(cost.expert_weight_bytes),
        experts=float(cost.experts),
        experts_per_token=float(cost.experts_per_token),
        kv_bytes_per_token=float(cost.kv_bytes_per_token),
        flops_per_s=float(cost.flops_per_s),
        bytes_per_s=float(cost.bytes_per_s),
        overhead_s=float(cost.overhead_s),
        a_s=float(a),
        b_s_per_prefill_token=float(b),
        c_s_per_context_token=float(c),
        host_gap_s=float(cost.host_gap_s),
    )
