"""The CPU tier P004 recommends: the smallest of a few sizes that wins back most of the reuse
the GPU pool loses to capacity, replayed under the engine's own tier rules and priced.

Sizes tried: 1, 2, 4, ... times the GPU pool (in tokens); the first that the one-pass LRU curve
says recovers at least `TIER_RECOVERY` of the capacity loss is recommended (the smaller ones
tried are kept with the curve's estimate, `smaller_sizes`, for a host that cannot hold it), or
the first that
holds every block the trace reuses (a tier that stores every computed chunk and evicts LRU
holds about what an LRU pool of its size holds), and that one size is replayed under the
engine's own tier rules (`prefix/tiers`, vLLM's native offload where the preset's engine has
it). Its price (`sim/fetch.py`): the prefill its hits save and the loads they add on the PCIe
path, at the `--gpu`'s bf16 peak × MFU 0.5 (linear FLOPs, as the ledger's GPU-seconds), and
the busiest minute of loads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from yaotu_trace.axes.base import AxisInput
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import YaotuError

TIER_MULTIPLES: tuple[int, ...] = tuple(2**k for k in range(17))  # 1× to 65,536× the pool
TIER_RECOVERY = 0.9  # share of the capacity loss a recommended tier wins back [proposed default]


def tier_candidate(inp: AxisInput, trace: Trace, rules: Any, preset: str,
                   capacity_loss_tokens: float) -> dict[str, Any] | None:
    """The recommended CPU tier and what it buys (None when no tier replay applies)."""
    # NOTE: the tier replay's modules load only when P004 fires on a trace with prompt content.
    from yaotu_trace.prefix.kernels.sweep import sweep
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.tiers import (
        PRESET_POLICIES,
        TierName,
        TierPolicy,
        TierSpec,
        gpu_replay,
        replay_tiers,
    )
    from yaotu_trace.sim.fetch import LINKS, Compute, price_fetches

    if rules.capacity_blocks is None or rules.scope != "global" or capacity_loss_tokens <= 0:
        return None
    policies = PRESET_POLICIES.get(str(preset), ())
    policy = TierPolicy.VLLM if TierPolicy.VLLM in policies else (policies or (None,))[0]
    if policy is None:
        return None
    prepared = prepare(trace)
    chains = prepared.chains(rules)
    gpu = gpu_replay(chains, rules)
    block = int(rules.block_size_tokens)
    gpu_tokens = int(rules.capacity_blocks) * block
    curve = sweep(chains, touch_order=rules.touch_order)
    gpu_hits = int(gpu.hit_tokens.sum())
    multiple = TIER_MULTIPLES[-1]
    kv = inp.settings.kv_bytes_per_token
    smaller: list[dict[str, Any]] = []  # the sizes tried before, as the curve estimates them
    for m in TIER_MULTIPLES:
        at = np.searchsorted(curve.step_capacities_blocks, m * int(rules.capacity_blocks),
                             side="right") - 1
        reached = int(curve.step_hit_tokens[at]) if at >= 0 else 0
        if (reached - gpu_hits >= TIER_RECOVERY * capacity_loss_tokens
                or m * int(rules.capacity_blocks) >= int(curve.step_capacities_blocks[-1])):
            multiple = m
            break
        smaller.append({"size_tokens": m * gpu_tokens,
                        "size_bytes": None if kv is None else m * gpu_tokens * kv,
                        "recovered_share_estimate": max(reached - gpu_hits, 0)
                        / capacity_loss_tokens})
    spec = TierSpec(name=TierName.CPU, capacity_chunks=gpu_tokens * multiple // block,
                    chunk_tokens=block)
    try:
        tiered = replay_tiers(chains, rules, (spec,), policy, gpu=gpu)
    except (YaotuError, ImportError):
        return None
    # What the tier adds over the GPU pool alone: its own hits, and under SGLang's one tree
    # the GPU hits its load-backs moved too.
    gained = int(tiered.hit_tokens.sum()) - gpu_hits
    s = inp.settings
    prompt = int(tiered.prompt_tokens.sum())
    out: dict[str, Any] = {
        "tier": "cpu", "policy": str(policy), "size_tokens": spec.capacity_tokens,
        "size_bytes": None if kv is None else spec.capacity_tokens * kv,
        "gpu_pool_tokens": gpu_tokens, "hit_tokens_gained": gained,
        "hit_gain_share": gained / prompt if prompt else 0.0,
        "recovered_share": gained / capacity_loss_tokens,
        "gpu_seconds_saved": None, "load_s": None, "prefill_saved_s": None,
        "peak_bytes_per_s": None, "ttft_change_share": None, "span_s": None,
        "smaller_sizes": smaller,
    }
    if kv is None or s.active_params is None or s.gpu_flops_per_s is None:
        return out
    arrival = prepared.arrival_s
    pricing = price_fetches(
        request_id=prepared.request_id, arrival_s=arrival, prompt_tokens=tiered.prompt_tokens,
        gpu_hit_tokens=tiered.gpu_hit_tokens, tier_hits=[("cpu", tiered.tier_hit_tokens[0])],
        compute=Compute(linear_params=float(s.active_params), attention_flops_per_token_pair=0.0,
                        flops_per_s=float(s.gpu_flops_per_s) * s.gpus_per_replica,
                        gpus=s.gpus_per_replica),
        kv_bytes_per_token=int(kv), links=LINKS)
    price = pricing.tiers[0]
    out.update(gpu_seconds_saved=pricing.gpu_seconds_saved, load_s=price.load_s,
               prefill_saved_s=price.prefill_saved_s, peak_bytes_per_s=price.peak_bytes_per_s,
               ttft_change_share=pricing.ttft_change_share,
               span_s=float(np.ptp(arrival)) if arrival.size else 0.0,
               slower_requests=pricing.slower_requests)
    return out
