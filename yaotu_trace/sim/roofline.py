"""The roofline: batch and KV-pool defaults of a GPU, a model's step cost, and the fitted step
cost of a real step log (cost-model §1.1, §2.1–2.4).

Catalog entries in, `StepCost` and numbers out; NumPy only (the step log of `--calibrate` is
read through `ingest` on first use).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.catalog.gpus import GpuSpec, find_moe
from yaotu_trace.catalog.models import ModelSpec
from yaotu_trace.errors import ConfigError
from yaotu_trace.sim.config import SchedulerKind, StepCost
from yaotu_trace.sim.run import CalibrationFit, fit_step_cost

if TYPE_CHECKING:
    from yaotu_trace.data.steplog import StepLog

DEFAULT_ACTIVATION_GIB = 2.0  # per GPU: peak activations + CUDA graphs [proposed default]


def batch_defaults(gpu: GpuSpec, tp: int, scheduler: SchedulerKind) -> tuple[int, int]:
    """(max_batched_tokens, max_num_seqs) defaults by GPU memory (engines.md §1.7, §2.5)."""
    gib = gpu.memory_bytes * tp / 2**30
    if scheduler is SchedulerKind.SGLANG:
        per_gpu = gpu.memory_bytes / 1e9
        chunk = 2048 if per_gpu < 20 else 4096 if per_gpu < 60 else 8192 if per_gpu < 160 else 16384
        return chunk, 1024
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and not gpu.name.startswith("A100"):
        return 8192, 1024
    return 2048, 256


def kv_blocks_from_memory(model: ModelSpec, gpu: GpuSpec, *, tp: int, block_size: int,
                          utilization: float, kv_bytes_per_token: int) -> int:
    """`num_gpu_blocks` of one instance: (memory·util − weights − activations) / block bytes.

    With tensor parallelism each rank holds `ceil(n_kv/TP)/n_kv` of the KV (replicated heads
    when TP > n_kv; the MLA latent cache is replicated on every rank), cost-model §1.1.
    """
    total_params, _ = model.params("sizing the KV pool from GPU memory (or give --kv-blocks)")
    weights = 2.0 * total_params
    budget = gpu.memory_bytes * utilization * tp - weights - DEFAULT_ACTIVATION_GIB * 2**30 * tp
    if model.attention == "mla":
        replication = float(tp)
    else:
        replication = tp * math.ceil(model.kv_heads / tp) / model.kv_heads
    per_block = kv_bytes_per_token * replication * block_size
    blocks = int(budget // per_block) if budget > 0 else 0
    if blocks < 2:
        raise ConfigError(
            f"{model.name} ({weights / 1e9:.0f} GB of bf16 weights) leaves no KV memory on "
            f"{tp}× {gpu.name} at utilization {utilization}; add --tp, a larger GPU, or "
            "--kv-blocks"
        )
    return blocks


def step_cost_for(model: ModelSpec, gpu: GpuSpec, *, tp: int, mfu: float, mbu: float,
                  overhead_ms: float, kv_bytes_per_token: int, host_gap_ms: float = 0.0
                  ) -> StepCost:
    """The roofline step cost of `model` on `tp` × `gpu` (cost-model §2.1–2.2)."""
    if not (0 < mfu <= 1 and 0 < mbu <= 1):
        raise ConfigError(f"--mfu {mfu} and --mbu {mbu} must be in (0, 1]")
    total_params, active_params = model.params("the roofline step cost")
    moe = find_moe(model.name)
    if moe is not None:
        lm_head = moe.lm_head_params
        expert_bytes = 2.0 * moe.routed_expert_params
    else:
        lm_head = (total_params - active_params) // 2
        expert_bytes = 0.0
    if model.attention == "mla":
        lora = model.kv_lora_rank or 0
        rope = model.qk_rope_head_dim or 0
        attn = model.layers * (2 * model.query_heads * (lora + rope) + 2 * model.query_heads * lora)
    else:
        assert model.head_dim is not None  # the catalog requires it of MHA/GQA models
        head_dim = model.head_dim
        attn = 4 * model.layers * model.query_heads * head_dim
    return StepCost(
        linear_params=float(active_params + lm_head),
        attention_flops_per_token_pair=float(attn),
        dense_weight_bytes=2.0 * total_params - expert_bytes,
        expert_weight_bytes=expert_bytes,
        experts=moe.experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        kv_bytes_per_token=float(kv_bytes_per_token),
        flops_per_s=gpu.bf16_flops * mfu * tp,
        bytes_per_s=gpu.hbm_bytes_per_s * mbu * tp,
        overhead_s=overhead_ms / 1e3,
        host_gap_s=host_gap_ms / 1e3,
    )


def calibrate_from(log: StepLog, block_size: int) -> CalibrationFit:
    """Fit `a + b·prefill_tokens + c·Σcontext` on a real step log (Σcontext: KV in use).

    The log is taken whole, even a Parquet log in start order that other commands stream: the
    least-squares fit takes every step at once.
    """
    steps = log.frame()
    if "prefill_tokens" not in steps.columns:
        raise ConfigError(f"{log.path}: --calibrate needs a 'prefill_tokens' column in the step "
                          "log")
    duration = (steps["end_s"] - steps["start_s"]).to_numpy(dtype=np.float64)
    prefill = steps["prefill_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    if "kv_blocks_used" in steps.columns and steps["kv_blocks_used"].notna().any():
        context = steps["kv_blocks_used"].to_numpy(dtype=np.float64, na_value=np.nan) * block_size
        source = f"kv_blocks_used × {block_size}"
    elif "decode_tokens" in steps.columns:
        context = steps["decode_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
        source = "decode_tokens (no kv_blocks_used in the log)"
    else:
        context = np.zeros_like(prefill)
        source = "none (the log has neither kv_blocks_used nor decode_tokens)"
    return fit_step_cost(prefill, context, duration, context_source=source)
