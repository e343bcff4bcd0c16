"""Golden block-residency events from vLLM's own `KVCacheMetricsCollector`, on CPU, no model.

Drives the same `KVCacheManager` protocol as `golden_vllm.py` (one request at a time in file
order: `get_computed_blocks`, `allocate_slots` for the whole prompt, `free`; tenant as
`cache_salt`) with vLLM's `KVCacheMetricsCollector(sample_rate=1.0)` attached, the collector's
clock set to each request's `arrival_s` (its module's `time.monotonic_ns` replaced by the
trace's time), and records every eviction event it drains: (lifetime, idle, reuse gaps), in
the order vLLM records them. It also observes them into `prometheus_client` histograms named,
documented and bucketed as vLLM's `PrometheusStatLogger` does for `--kv-cache-metrics`
(`vllm/v1/metrics/loggers.py`: lifetime and idle per event, each reuse gap of the event) and
writes their `/metrics` text, which `trace replay --residency --metrics` reads.

Writes `tests/fixtures/residency/vllm_<trace>.json` and `vllm_mixed.metrics.txt`. Installs
nothing: run it with the environment of `golden_vllm.py` (README.md), e.g.

    PYTHONPATH=. /tmp/venv-vllm/bin/python benchmarks/engines/golden_vllm_residency.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from traces import DATA, SHAPES, load_prompts, trace_path

OUT = DATA.parent / "residency"
PROTOCOL = ("golden_vllm.py's protocol with KVCacheMetricsCollector(sample_rate=1.0) passed "
            "to KVCacheManager(metrics_collector=...); the collector's time.monotonic_ns "
            "returns round(arrival_s * 1e9) of the request being served; events drained after "
            "the last request, in vLLM's order")
POOL_MULTIPLES = (2, 4, 8)  # pools of this many times the largest request, in blocks
BLOCK_SIZE = 16


class TraceClock:
    """Stands in for the `time` module inside `vllm.v1.core.kv_cache_metrics`."""

    now_ns = 0

    def monotonic_ns(self) -> int:
        return self.now_ns


def drive(tenants: list[str], prompts: list[list[int]], arrival_s: list[float],
          num_gpu_blocks: int) -> dict[str, object]:
    """Hit tokens, rejected rows and the eviction events of one pool size."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_metrics
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    clock = TraceClock()
    kv_cache_metrics.time = clock  # type: ignore[assignment]
    collector = kv_cache_metrics.KVCacheMetricsCollector(sample_rate=1.0)
    init_none_hash(sha256)
    b = BLOCK_SIZE
    spec = FullAttentionSpec(block_size=b, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(num_blocks=num_gpu_blocks, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    manager = KVCacheManager(config, max_model_len=1 << 16, scheduler_block_size=b,
                             hash_block_size=b, enable_caching=True,
                             metrics_collector=collector)
    hasher = get_request_block_hasher(b, sha256)
    hits: list[int] = []
    rejected: list[int] = []
    for row, (tenant, prompt, t) in enumerate(zip(tenants, prompts, arrival_s, strict=True)):
        clock.now_ns = round(t * 1e9)
        params = SamplingParams(max_tokens=1)
        params.update_from_generation_config({}, eos_token_id=100)
        request = Request(request_id=str(row), prompt_token_ids=prompt, sampling_params=params,
                          pooling_params=None, cache_salt=tenant, block_hasher=hasher)
        blocks, computed, _ = manager.get_computed_blocks(request)
        allocated = manager.allocate_slots(request, len(prompt) - computed, computed, blocks)
        if allocated is None:
            rejected.append(row)
            hits.append(0)
        else:
            hits.append(int(computed))
        manager.free(request)
    events = collector.drain_events()
    return {"block_size_tokens": b, "num_gpu_blocks": num_gpu_blocks, "hit_tokens": hits,
            "rejected": rejected,
            "lifetime_s": [e.lifetime_seconds for e in events],
            "idle_s": [e.idle_seconds for e in events],
            "reuse_gaps_s": [list(e.reuse_gaps_seconds) for e in events]}


def metrics_text(config: dict[str, object]) -> str:
    """The events observed as vLLM's Prometheus logger observes them, as `/metrics` text."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest
    from vllm.v1.metrics.buckets import histogram_buckets

    registry = CollectorRegistry()
    buckets = histogram_buckets("kv_cache_residency")
    labels = ["model_name", "engine"]
    lifetime = Histogram("vllm:kv_block_lifetime_seconds",
                         "Histogram of KV cache block lifetime from allocation to eviction. "
                         "Sampled metrics (controlled by --kv-cache-metrics-sample).",
                         labels, buckets=buckets, registry=registry)
    idle = Histogram("vllm:kv_block_idle_before_evict_seconds",
                     "Histogram of idle time before KV cache block eviction. Sampled metrics "
                     "(controlled by --kv-cache-metrics-sample).",
                     labels, buckets=buckets, registry=registry)
    reuse = Histogram("vllm:kv_block_reuse_gap_seconds",
                      "Histogram of time gaps between consecutive KV cache block accesses. "
                      "Only the most recent accesses are recorded (ring buffer). Sampled "
                      "metrics (controlled by --kv-cache-metrics-sample).",
                      labels, buckets=buckets, registry=registry)
    values = ("golden", "0")
    for life, idle_s, gaps in zip(config["lifetime_s"], config["idle_s"],  # type: ignore[call-overload]
                                  config["reuse_gaps_s"], strict=True):
        lifetime.labels(*values).observe(life)
        idle.labels(*values).observe(idle_s)
        for gap in gaps:
            reuse.labels(*values).observe(gap)
    text = generate_latest(registry).decode()
    # `_created` samples carry the wall clock: dropped, so the file is the same every run.
    return "".join(line + "\n" for line in text.splitlines() if "_created" not in line)


def main(argv: list[str] | None = None) -> int:
    """Drive vLLM on every trace and pool size, write the fixtures, print a summary."""
    import torch
    import vllm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{'trace':<9} {'N':>5} {'events':>7} {'gaps':>6} {'rejected':>8}")
    for shape in SHAPES:
        path = trace_path(shape)
        tenants, prompts = load_prompts(path)
        arrival = pd.read_parquet(path, columns=["arrival_s"])["arrival_s"].tolist()
        largest = max(-(-len(p) // BLOCK_SIZE) for p in prompts)
        configs = []
        for m in POOL_MULTIPLES:
            config = drive(tenants, prompts, arrival, m * largest)
            configs.append(config)
            gaps = sum(len(g) for g in config["reuse_gaps_s"])  # type: ignore[attr-defined]
            print(f"{shape.name:<9} {m * largest:>5} {len(config['lifetime_s']):>7} "  # type: ignore[arg-type]
                  f"{gaps:>6} {len(config['rejected']):>8}")  # type: ignore[arg-type]
        document = {"engine": "vllm", "engine_version": vllm.__version__,
                    "torch_version": torch.__version__, "trace": path.name,
                    "protocol": PROTOCOL, "configs": configs}
        lines = ["{"]
        lines += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in document.items()
                  if k != "configs"]
        lines.append('  "configs": [')
        lines.append(",\n".join(f"    {json.dumps(c, separators=(',', ':'))}"
                                for c in configs))
        lines += ["  ]", "}"]
        (args.out_dir / f"vllm_{shape.name}.json").write_text("\n".join(lines) + "\n")
        if shape.name == "mixed":
            (args.out_dir / "vllm_mixed.metrics.txt").write_text(metrics_text(configs[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
