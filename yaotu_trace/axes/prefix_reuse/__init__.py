"""Prefix-reuse axis: prompt prefixes computed again and again, and where reuse is lost (§6).

Built on the prefix replay (`yaotu_trace.prefix.replay_trace`). Metrics (tokens unless noted):

- prompt_tokens = Σ prompt_len over replayed requests.
- ideal_hit_tokens: the replay's ideal (longest prefix shared with any earlier request, one
  namespace, unlimited cache); ideal_hit_rate = ideal / prompt_tokens (ratio).
- achievable_hit_tokens: hits of the replay under the engine's rules (preset, block size, and
  when given the KV capacity per instance and the trace's instances); achievable_hit_rate =
  achievable / prompt_tokens (ratio) — H_inf of cost-model §6 when no capacity is given.
- observed_hit_tokens: Σ cached_tokens (request table); else (metrics, a rate only) the prompt
  tokens not computed locally of those counted by source (vLLM prompt_tokens_by_source, SGLang
  cached tokens by cache source), else the increase of vllm:prefix_cache_hits over
  vllm:prefix_cache_queries, else cached over prompt tokens (vllm:prompt_tokens_cached /
  sglang:cached_tokens_total over *_prompt_tokens), else the gauge (a vLLM log's last rate per
  engine, SGLang's mean). observed_hit_rate = observed / prompt_tokens (ratio).
- reuse_gap = achievable_hit_rate − observed_hit_rate (ratio points).
- recomputed_reusable_tokens = achievable − observed hit tokens when observed hits are known;
  otherwise the reuse the waterfall loses to cache keys, routing and capacity (the actionable
  steps); recomputed_share_of_prefill = that / prompt_tokens (ratio); the axis score.
- loss waterfall: tokens lost to block granularity, the last-token rule, tenant isolation and
  model/adapter namespaces (key_loss), scope and routing (routing_loss), capacity and eviction
  (capacity_loss); *_share = loss / prompt_tokens (ratio points of hit rate).
- hot prefixes: the shared prefixes whose loss recomputed the most tokens, with the reason.
"""

from __future__ import annotations

from yaotu_trace.axes.prefix_reuse.analyze import analyze_prefix_reuse
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics, observed_hits

__all__ = ["PrefixMetrics", "analyze_prefix_reuse", "observed_hits"]
