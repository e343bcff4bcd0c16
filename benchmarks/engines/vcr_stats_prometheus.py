"""vLLM's own Prometheus logger fed a vllm-vcr step-stats sidecar: the `/metrics` text vLLM
would have served after that run.

Each line's `scheduler` becomes vLLM 0.33's `SchedulerStats` (with its `PrefixCacheStats` and
`KVCacheEvictionEvent`s) and goes through `PrometheusStatLogger.record`, as the engine's front
end records every stats message, with `--kv-cache-metrics` on (its residency histograms); then
`prometheus_client` writes the registry (no `_created` series and none of this process's own:
their wall-clock times and memory would change the bytes). `tests/ingest/test_vcr_steps.py`
holds the sidecar read as `--metrics` to this text. Runs in the environment with vLLM
(benchmarks/engines/README.md):

    /tmp/venv-vllm/bin/python benchmarks/engines/vcr_stats_prometheus.py SIDECAR OUT.prom
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive_vllm_scheduler import MODEL_CONFIG


def main(argv: list[str] | None = None) -> int:
    """Read the sidecar, record each line with vLLM's logger, write the registry's text."""
    import prometheus_client
    from vllm.config import DeviceConfig, ModelConfig, ObservabilityConfig, VllmConfig
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import KVCacheEvictionEvent, PrefixCacheStats, SchedulerStats

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: vcr_stats_prometheus.py SIDECAR OUT.prom")
    prometheus_client.disable_created_metrics()
    for collector in (prometheus_client.PROCESS_COLLECTOR, prometheus_client.PLATFORM_COLLECTOR,
                      prometheus_client.GC_COLLECTOR):  # this process's, not the engine's
        prometheus_client.REGISTRY.unregister(collector)
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(MODEL_CONFIG))
        config = VllmConfig(
            model_config=ModelConfig(model=model_dir, served_model_name="m",
                                     skip_tokenizer_init=True, dtype="float32"),
            observability_config=ObservabilityConfig(kv_cache_metrics=True),
            device_config=DeviceConfig("cpu"))
        logger = PrometheusStatLogger(config)
    prefix_fields = ("reset", "requests", "queries", "hits", "preempted_requests",
                     "preempted_queries", "preempted_hits")
    for text in Path(args[0]).read_text().splitlines():
        if not text.strip():
            continue
        s = json.loads(text)["scheduler"]
        stats = SchedulerStats(
            num_running_reqs=s["num_running_reqs"], num_waiting_reqs=s["num_waiting_reqs"],
            num_skipped_waiting_reqs=s.get("num_skipped_waiting_reqs", 0),
            step_counter=s["step_counter"], current_wave=s["current_wave"],
            kv_cache_usage=s["kv_cache_usage"],
            prefix_cache_stats=PrefixCacheStats(
                **{k: s["prefix_cache_stats"][k] for k in prefix_fields}),
            kv_cache_eviction_events=[
                KVCacheEvictionEvent(lifetime_seconds=e["lifetime_seconds"],
                                     idle_seconds=e["idle_seconds"],
                                     reuse_gaps_seconds=tuple(e["reuse_gaps_seconds"]))
                for e in s["kv_cache_eviction_events"]])
        logger.record(scheduler_stats=stats, iteration_stats=None)
    Path(args[1]).write_bytes(prometheus_client.generate_latest(prometheus_client.REGISTRY))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
