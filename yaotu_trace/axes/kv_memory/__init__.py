"""KV-memory axis: is work lost to preemption, and is the KV pool what limits it (§5, B1–B4).

Metrics (units in the names):

- preempted_requests = #{num_preemptions > 0}; preemptions_total = Σ num_preemptions (request
  table), else Σ num_preempted (else num_readmitted) of the step log, else the increase of
  vllm:num_preemptions_total / sglang:num_retracted_requests_total (metrics).
  preempted_request_share = preempted / requests.
- recomputed_tokens: the step log's Σ recomputed_tokens where it counts them (what readmitted
  requests computed beyond their prefix-cache hits: vLLM's, `trace simulate`'s), or SGLang's
  retracted input + output token counters, when exported. Else an estimate: a recompute
  re-prefills p + g tokens (prompt plus tokens generated so far, cost-model §5); g is not
  logged, so it takes g = output_len / 2: Σ num_preemptions · (prompt_len + output_len / 2)
  (tokens), bounded above by g = output_len and below by g = 0 (by 0 where the trace hits
  the prefix cache: it overstates wherever a readmission finds its own freed blocks still
  cached). Metrics-only counts use the mean per-request estimate.
- recompute_token_fraction = recomputed_tokens / Σ (prompt_len + output_len) (ratio); the
  axis score ("work lost").
- kv_usage = kv_blocks_used / kv_blocks_total (else its kv_usage) per step (step log), else
  vllm:kv_cache_usage_perc / sglang:token_usage (metrics, the fullest engine per sample): mean,
  P95, max (ratio); kv_usage_at_preemption = mean usage over steps with num_preempted > 0 (or
  metric samples at which the preemption counter rose); kv_usage_over_time = (bucket start, mean
  usage) over up to 20 equal time buckets of the step log or export (s, ratio); full_share =
  share of steps with usage ≥ kv_preempt_usage.
- kv_capacity_tokens per instance: --kv-capacity, else max kv_blocks_total × block size (step
  log), else sglang:max_total_num_tokens (metrics).
- demand_tokens(t) per instance = Σ over requests holding KV at t of ceil((prompt_len + g(t)) /
  B) · B, a request holding KV from scheduled_s (else first_token_s, else arrival_s) to
  finish_s, g(t) growing linearly from 0 at first_token_s to output_len at finish_s. Prefix
  sharing is not subtracted, so this is an upper bound. peak_demand_tokens = max over t and
  instances; extra_kv_tokens = peak − capacity; extra_kv_bytes = that · kv_bytes_per_token.
- n_safe_p95 = kv_capacity_tokens / P95(prompt_len + output_len): concurrency that never
  preempts (requests).
- block_waste_fraction = Σ (ceil(len/B)·B − len) / Σ ceil(len/B)·B over final lengths len =
  prompt_len + output_len at block size B (ratio): PagedAttention's internal fragmentation.
- shared_block_fraction = 1 − distinct prefix-chained full prompt blocks / all full prompt
  blocks (ratio): blocks a prefix cache can share; needs prompt content.
"""

from __future__ import annotations

from yaotu_trace.axes.kv_memory.analyze import analyze_kv_memory
from yaotu_trace.axes.kv_memory.metrics import (
    KvMetrics,
    demand_tokens,
    shared_fraction,
    shared_prefix_tokens,
    usage_timeline,
)

__all__ = ["KvMetrics", "analyze_kv_memory", "demand_tokens", "shared_fraction",
           "shared_prefix_tokens", "usage_timeline"]
