"""The engine series `--metrics` reads: canonical quantity → the names engines export it under.

One table per kind (gauges, counters, histograms), first match wins: vLLM V1, older vLLM,
SGLang (engines.md §1.9, §2.7). Counters are listed with and without the `_total` that
prometheus_client adds on export. Some quantities are split by a label (`LABELLED`): vLLM's
prompt tokens by source, SGLang's cached tokens by cache source.

Names as written: Prometheus 3 and the engines' own `/metrics` keep the colon (`vllm:…`);
Prometheus 2.x, scraping the current prometheus_client, stores `vllm_…` and `sglang_…`
(`prometheus_names` maps them back). A series whose name is in none of the tables, nor a part
of one (`_count`, `_sum`, `_bucket`, `_created`), is not used, and the reader says so
(`unused_names`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

# vLLM exports its KV pool as labels of an info gauge (`vllm:cache_config_info{block_size="16",
# num_gpu_blocks="N",...} 1`); the reader turns it into this series, in tokens.
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
POOL_FROM_CACHE_CONFIG: Final = "vllm:cache_config_info (KV pool tokens)"
# Its CPU offload tier likewise (`vllm:kv_offload_config_info{cpu_kv_cache_size_tokens="N"}`).
OFFLOAD_CONFIG_INFO: Final = "vllm:kv_offload_config_info"
CPU_TIER_FROM_OFFLOAD_CONFIG: Final = "vllm:kv_offload_config_info (CPU tier tokens)"
# The simulated run an export is of (`trace simulate --metrics-out`; `data/run_id.py`): one
# sample, its id a label.
RUN_INFO: Final = "yaotu:run_info"

GAUGES: Final[Mapping[str, tuple[str, ...]]] = {
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "cache_hit_rate": ("sglang:cache_hit_rate", "log:prefix_cache_hit_rate"),
    "external_hit_rate": ("log:external_prefix_cache_hit_rate",),
    "retracted_now": ("sglang:num_retracted_reqs",),
    "max_total_tokens": ("sglang:max_total_num_tokens", "log:gpu_kv_cache_size_tokens",
                         POOL_FROM_CACHE_CONFIG),
    "cpu_tier_tokens": (CPU_TIER_FROM_OFFLOAD_CONFIG,),
    "page_size": ("sglang:page_size",),
    # The engine's cap on running requests (SGLang's start-up max_running_requests).
    "max_running": ("log:max_running_requests",),
    # Waiting requests by why they wait: `capacity` (no KV or batch room) or `deferred`
    # (waiting on something else: remote KV, a grammar); the log's "Deferred: N reqs".
    "num_waiting_by_reason": ("vllm:num_requests_waiting_by_reason",),
    "num_swapped": ("vllm:num_requests_swapped",),
    "swap_usage": ("vllm:cpu_cache_usage_perc",),
}
COUNTERS: Final[Mapping[str, tuple[str, ...]]] = {
    "preemptions": (
        "vllm:num_preemptions_total",
        "vllm:num_preemptions",
        "sglang:num_retracted_requests_total",
    ),
    "prefix_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries",
    ),
    "prefix_hits": (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits",
    ),
    "external_prefix_queries": ("vllm:external_prefix_cache_queries_total",
                                "vllm:external_prefix_cache_queries"),
    "external_prefix_hits": ("vllm:external_prefix_cache_hits_total",
                             "vllm:external_prefix_cache_hits"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens",
                      "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens",
                          "sglang:generation_tokens_total"),
    "cached_tokens": ("vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_cached",
                      "sglang:cached_tokens_total"),
    "prompt_tokens_by_source": ("vllm:prompt_tokens_by_source_total",
                                "vllm:prompt_tokens_by_source"),
    # vLLM 0.33's cache hits by the tier that supplied them (`CacheHitSource`).
    "prompt_tokens_cached_by_source": ("vllm:prompt_tokens_cached_by_source_total",
                                       "vllm:prompt_tokens_cached_by_source"),
    # LMCache's per-request lookup line, summed over requests (its last line per request):
    # the prompt, the engine's own hit, LMCache's hit from token 0, and what it loads.
    "lmcache_prompt_tokens": ("log:lmcache_prompt_tokens_total",),
    "lmcache_engine_hit_tokens": ("log:lmcache_engine_computed_tokens_total",),
    "lmcache_hit_tokens": ("log:lmcache_hit_tokens_total",),
    "lmcache_load_tokens": ("log:lmcache_load_tokens_total",),
    "realtime_tokens": ("sglang:realtime_tokens_total",),
    "evicted_tokens": ("sglang:evicted_tokens_total",),
    "aborted_requests": ("sglang:num_aborted_requests_total",),
    "retracted_input_tokens": ("sglang:num_retracted_input_tokens_total",),
    "retracted_output_tokens": ("sglang:num_retracted_output_tokens_total",),
    "kv_transfers": ("log:kv_transfers_total",),
    "kv_transfer_ms": ("log:kv_transfer_ms_total",),
    "kv_transfer_mb": ("log:kv_transfer_mb_total",),
}
# vLLM 0.33.0 `vllm/v1/metrics/buckets.py` KV_CACHE_RESIDENCY_BUCKETS (seconds).
VLLM_RESIDENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300,
    600, 1200, 1800)
HISTOGRAMS: Final[Mapping[str, tuple[str, ...]]] = {
    "iteration_tokens": ("vllm:iteration_tokens_total",),
    "queue_time_s": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_s": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "prefill_time_s": ("vllm:request_prefill_time_seconds",),
    "decode_time_s": ("vllm:request_decode_time_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "prefill_kv_computed_tokens": ("vllm:request_prefill_kv_computed_tokens",),
    # Preemptions of each finished request: its mean is preemptions per request.
    "request_preemptions": ("vllm:request_num_preemptions",),
    # SGLang's disaggregated prefill server, in milliseconds and MB per transfer.
    "kv_transfer_latency_ms": ("sglang:kv_transfer_latency_ms",),
    "kv_transfer_size_mb": ("sglang:kv_transfer_total_mb",),
    # vLLM's block residency (`--kv-cache-metrics`, sampled): allocation to eviction, last
    # use to eviction, and the gaps between a block's last uses (`trace replay --residency`).
    "kv_block_lifetime_s": ("vllm:kv_block_lifetime_seconds",),
    "kv_block_idle_before_evict_s": ("vllm:kv_block_idle_before_evict_seconds",),
    "kv_block_reuse_gap_s": ("vllm:kv_block_reuse_gap_seconds",),
}
# The label that splits a quantity, and the values it takes (engines.md §1.9, §2.7).
LABELLED: Final[Mapping[str, str]] = {
    "num_waiting_by_reason": "reason",  # capacity | deferred
    "prompt_tokens_by_source": "source",  # local_compute | local_cache_hit | external_kv_transfer
    # device | host | p2p | disk | external_unspecified (vllm/v1/metrics/cache_hit_source.py)
    "prompt_tokens_cached_by_source": "source",
    "cached_tokens": "cache_source",  # SGLang: device | host | storage (| total)
    "realtime_tokens": "mode",  # SGLang: prefill_compute | prefill_cache | decode
}

_PARTS: Final = ("_count", "_sum", "_bucket", "_created")
# Engine prefixes whose colon Prometheus 2.x turns into an underscore.
_PREFIX_2X: Final = re.compile(r"^(vllm|sglang|lmcache)_(?=[a-z])")


def _known() -> frozenset[str]:
    names = {CACHE_CONFIG_INFO, POOL_FROM_CACHE_CONFIG, OFFLOAD_CONFIG_INFO,
             CPU_TIER_FROM_OFFLOAD_CONFIG, RUN_INFO}
    for table in (GAUGES, COUNTERS, HISTOGRAMS):
        for candidates in table.values():
            names.update(candidates)
    # A counter's parts: `x_total` is exported with `x_created`; histograms with their parts.
    parts = {base + p for n in names for base in (n, n.removesuffix("_total")) for p in _PARTS}
    return frozenset(names | parts)


KNOWN: Final = _known()


def colon_name(name: str) -> str:
    """The engine's own (colon) name of a series Prometheus 2.x stored with an underscore."""
    return _PREFIX_2X.sub(r"\1:", name, count=1)


def prometheus_names(names: Iterable[str]) -> dict[str, str]:
    """The renames `vllm_x` → `vllm:x` for names given in Prometheus 2.x form (only those
    whose colon form is not also present, so a file with both keeps each as it is)."""
    present = set(names)
    out = {}
    for name in present:
        colon = colon_name(name)
        if colon != name and colon not in present:
            out[name] = colon
    return out


def unused_names(names: Iterable[str]) -> list[str]:
    """The names no quantity reads (`log:` names are the reader's own): the engines' own
    first, then the rest (process_, python_), each in name order."""
    unused = (n for n in names if n not in KNOWN and not n.startswith("log:"))
    return sorted(unused, key=lambda n: (_PREFIX_2X.match(colon_name(n).replace(":", "_", 1))
                                         is None, n))
