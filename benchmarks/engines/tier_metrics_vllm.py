"""vLLM's own `/metrics` for a tiered run: prompt tokens cached by source, as the engine exports.

Runs vLLM 0.33's v1 `Scheduler` with the `OffloadingConnector` exactly as
`golden_tiers_vllm.py` does (one request at a time, one output token, every transfer completed
in the step it was issued), and feeds what each step returns to vLLM's own
`PrometheusStatLogger`: the step's `SchedulerStats` (its `prefix_cache_stats` and the
connector's `connector_prefix_cache_stats` with `hits_by_source`, made by the scheduler's
`make_stats`) and an `IterationStats` updated from the step's `EngineCoreOutput`s by its own
`update_from_output` (what the front end's output processor does). The scrape is
prometheus_client's `generate_latest` of the registry vLLM registered its series in: the
`vllm:prompt_tokens_cached_by_source{source=device|host|p2p|disk|external_unspecified}` and
`vllm:prompt_tokens_by_source{source=local_compute|local_cache_hit|external_kv_transfer}`
counters among the rest.

Writes `tests/fixtures/tier_metrics/vllm_offload_mixed.metrics.txt` (the scrape) and
`vllm_offload_mixed.json` (the configuration and the per-request hits vLLM reported, which the
counters must sum to) and `vllm_offload_mixed.step-stats.jsonl.gz` (the same steps'
`SchedulerStats` as vllm-vcr's tap writes its sidecar, `tests/fixtures/captures/vcr/tap.py`,
but for the connector's own telemetry, keyed by tuples JSON cannot hold; `ts_ms` is the step's
number, as this run has no clock; gzipped); with `--secondary fs`, `vllm_offload_mixed_fs.*`
from a smaller CPU tier with vLLM's file-system tier below it (`TieringOffloadingSpec`), where
the counters split the external hits into `host` and `disk`. Run in an environment with vLLM 0.33.0:

    PYTHONPATH=. /tmp/venv-vllm/bin/python benchmarks/engines/tier_metrics_vllm.py
    PYTHONPATH=. /tmp/venv-vllm/bin/python benchmarks/engines/tier_metrics_vllm.py --secondary fs

Deterministic but for the `_created` timestamps prometheus_client writes.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "captures"
                       / "vcr"))
from golden_tiers_vllm import Config, VllmOffload, _model_dir
from tap import scheduler_json
from traces import load_prompts

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tier_metrics"
TRACE = ROOT / "tests" / "fixtures" / "engines" / "trace_mixed.parquet"
CONFIG = Config(block_size_tokens=16, num_gpu_blocks=66, cpu_chunks=176, blocks_per_chunk=1)
# With the fs tier below: a CPU tier of 64 chunks (the longest prompt's 32 fit), the disk serving
# most of the external hits (`tests/fixtures/tiers_vllm/vllm_offload_mixed_fs.json` has it).
CONFIG_FS = Config(block_size_tokens=16, num_gpu_blocks=66, cpu_chunks=64, blocks_per_chunk=1,
                   secondary="fs")


class MeteredOffload(VllmOffload):
    """The golden scheduler with vLLM's Prometheus stat logger fed from every step."""

    def __init__(self, config: Config, model_dir: str, max_len: int) -> None:
        super().__init__(config, model_dir, max_len)
        from vllm.v1.metrics.loggers import PrometheusStatLogger
        from vllm.v1.metrics.stats import LoRARequestStates

        # The model's folder is a temporary one; name the served model so the scrape is stable.
        self.scheduler.vllm_config.model_config.served_model_name = "tiers-mixed"
        self.logger = PrometheusStatLogger(self.scheduler.vllm_config, [0])
        self.lora_states = LoRARequestStates(log_stats=True)
        self.clock = 0.0
        self.sidecar: list[dict[str, object]] = []  # vllm-vcr's step-stats lines of the run

    def step(self) -> None:
        """One step of the golden run, its outputs recorded by vLLM's stat logger."""
        from vllm.v1.metrics.stats import IterationStats, RequestStateStats

        original = self.scheduler.update_from_output

        def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
            outputs = original(*args, **kwargs)
            self.clock += 1.0
            for client in outputs.values():
                if client.scheduler_stats is not None:
                    # The offload connector's own telemetry is keyed by label tuples, which
                    # JSON cannot hold: left out (no reader here takes it).
                    stats = {**asdict(client.scheduler_stats), "kv_connector_stats": None}
                    self.sidecar.append({"ts_ms": self.clock,
                                         "scheduler": scheduler_json(stats)})
                iteration = IterationStats()
                for output in client.outputs:
                    prefilling = output.prefill_stats is not None
                    iteration.update_from_output(
                        output, self.clock, prefilling,
                        RequestStateStats(arrival_time=self.clock), self.lora_states, None)
                self.logger.record(client.scheduler_stats, iteration, None, 0)
            return outputs

        self.scheduler.update_from_output = recorded  # type: ignore[method-assign]
        try:
            super().step()
        finally:
            del self.scheduler.update_from_output


def main(argv: list[str] | None = None) -> int:
    import argparse

    import prometheus_client
    import vllm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secondary", choices=("fs",), default="")
    args = parser.parse_args(argv)
    config = CONFIG_FS if args.secondary else CONFIG
    name = "vllm_offload_mixed" + ("_fs" if args.secondary else "")
    tenants, prompts = load_prompts(TRACE)
    max_len = 1 << max(12, (max(len(p) for p in prompts) + 2).bit_length())
    engine = MeteredOffload(config, _model_dir(), max_len)
    gpu, cpu, refused = engine.run(tenants, prompts)
    scrape = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    # `_created` lines carry the wall clock; drop them so the fixture is the same every run.
    scrape = "".join(line + "\n" for line in scrape.splitlines()
                     if not re.match(r"^\S+_created[{ ]", line))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.metrics.txt").write_text(scrape)
    lines = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in engine.sidecar)
    (OUT / f"{name}.step-stats.jsonl.gz").write_bytes(gzip.compress(lines.encode(), mtime=0))
    document = {"engine": "vllm", "engine_version": vllm.__version__,
                "trace": TRACE.name, "block_size_tokens": config.block_size_tokens,
                "num_gpu_blocks": config.num_gpu_blocks, "cpu_chunks": config.cpu_chunks,
                "blocks_per_chunk": config.blocks_per_chunk,
                **({"secondary": config.secondary} if config.secondary else {}),
                "prompt_tokens": sum(len(p) for p in prompts),
                "gpu_hit_tokens": sum(gpu), "cpu_hit_tokens": sum(cpu),
                **({"disk_hit_tokens": sum(engine.disk)} if config.secondary else {}),
                "refused": refused}
    (OUT / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")
    by_source = [line for line in scrape.splitlines()
                 if line.startswith("vllm:prompt_tokens_cached_by_source_total")]
    print("\n".join(by_source))
    disk = f" disk {sum(engine.disk):,}" if config.secondary else ""
    print(f"per request: gpu {sum(gpu):,} cpu {sum(cpu):,}{disk} refused {len(refused)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
