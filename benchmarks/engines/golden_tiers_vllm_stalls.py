"""Which requests vLLM's tiered offload never starts, and the hits of those it does, by CPU size.

Under vLLM 0.33's `TieringOffloadingSpec` a request whose chunks are found below the CPU tier
is deferred while they are promoted into the CPU one at a time, each promotion free to evict
another chunk of the same run (`TieringOffloadingManager._initiate_promotion`); when every
lookup ends on a chunk just evicted, the request never starts. Under ARC this does not follow
the CPU tier's size alone: which chunks the promotions evict depends on the lists' history, so
a CPU tier that holds the whole run can still stall it while a smaller one does not.

This drives `golden_tiers_vllm.VllmOffload` (vLLM's scheduler, `OffloadingConnector`, its fs
tier in a fresh folder; the same protocol as `vllm_offload_<trace>_arc_fs.json`) over one small
trace at one GPU pool and several CPU sizes, and writes per size either every request's GPU,
CPU and disk hit tokens or the request that never finished within `STEPS` steps. The trace is
`traces.generate` of `SHAPE`, its first `REQUESTS` rows: request 8 is the one that stalls.

    PYTHONPATH=. /tmp/venv-vllm/bin/python benchmarks/engines/golden_tiers_vllm_stalls.py

writes `tests/fixtures/tiers_vllm/arc_first9.parquet` (when absent) and
`tests/fixtures/tiers_vllm/vllm_stalls_arc_first9.json`. Deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_tiers_vllm as driver
from golden_json import write_fixture
from traces import TraceShape, generate, load_prompts

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tiers_vllm"
SHAPE = TraceShape("f4", seed=33, requests=160, tenants=2, block_size_tokens=4,
                   max_prompt_tokens=120, vocabulary=20)
REQUESTS = 9
BLOCK_TOKENS = 4
GPU_BLOCKS = 30
CPU_CHUNKS = (19, 20, 21, 25, 30, 31, 32, 40)
STEPS = 20_000  # a converging lookup took at most 5 steps a request where they were counted


def write_trace(path: Path) -> None:
    """The first `REQUESTS` rows of the generated trace, as canonical Parquet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    generate(SHAPE).head(REQUESTS).to_parquet(path, index=False)


def run(path: Path, cpu_chunks: int) -> dict[str, object]:
    """One CPU size: the per-request hits, or the request vLLM never finished."""
    tenants, prompts = load_prompts(path)
    config = driver.Config(BLOCK_TOKENS, GPU_BLOCKS, cpu_chunks, 1, "arc", 0, "fs")
    engine = driver.VllmOffload(config, driver._model_dir(), 4096)
    out: dict[str, object] = {"block_size_tokens": BLOCK_TOKENS, "num_gpu_blocks": GPU_BLOCKS,
                              "cpu_chunks": cpu_chunks, "blocks_per_chunk": 1,
                              "eviction_policy": "arc", "secondary": "fs"}
    driver.STEPS_BASE, driver.STEPS_PER_TOKEN = STEPS, 0
    try:
        gpu, cpu, _ = engine.run(tenants, prompts)
    except driver.NeverFinished as stalled:
        out["never_finished"] = stalled.row
        return out
    out.update(gpu_hit_tokens=gpu, cpu_hit_tokens=cpu, disk_hit_tokens=engine.disk)
    return out


def main() -> int:
    import torch
    import vllm

    path = OUT / "arc_first9.parquet"
    if not path.exists():
        write_trace(path)
    configs = []
    for chunks in CPU_CHUNKS:
        result = run(path, chunks)
        print(f"CPU {chunks} chunks: never finished request "
              f"{result.get('never_finished', '-')}", flush=True)
        configs.append(result)
    write_fixture(OUT / "vllm_stalls_arc_first9.json", engine="vllm",
                  engine_version=vllm.__version__, torch_version=torch.__version__,
                  trace=path.name,
                  protocol=driver.PROTOCOL.format(policy="arc", threshold=0)
                  + driver.SECONDARY_PROTOCOL.format(secondary="fs")
                  + f"; a request not finished within {STEPS:,} steps recorded as never_finished",
                  configs=configs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
