"""LMCache's hits with a local disk behind a vLLM pool that hits: what the other fixtures lack.

`golden_tiers_lmcache.py` holds the disk and remote configurations behind a GPU pool that hits
nothing; behind one that hits, the adapter loads only past vLLM's hit (masking the whole
chunks it covers), so what the disk is read for, and what the reads evict from the CPU
backend, follow the GPU. This script drives LMCache 0.5.6 as that script does, each request
loaded past the hit vLLM's pool gives it, for three configurations `fuzz_tiers_lmcache.py
--gpu` drew (two where the replay differed by one request before every chunk a load reads
from below took CPU memory before any was written), and writes each request's lookup hit and
disk chunks, with the pool's hits, to `tests/fixtures/tiers_lmcache/behind_gpu.json` and the
traces beside it (`trace_gpu_<seed>.parquet`). The pool's hits come from the project's exact
replay of vLLM's pool (held to vLLM in `tests/prefix/test_exact_vllm.py`), written first with
the project's Python, as LMCache's environment has no replay:

    F=benchmarks/engines/fuzz_tiers_lmcache.py
    .venv/bin/python $F --first-seed 3301 --seeds 1 --gpu /tmp/g1.json
    .venv/bin/python $F --first-seed 3436 --seeds 8 --gpu /tmp/g2.json
    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /path/to/venv-lmcache/bin/python \\
        /work/…/benchmarks/engines/golden_tiers_lmcache_gpu.py /tmp/g1.json /tmp/g2.json

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_tiers_lmcache import BLOCK, serve, waits_raise
from fuzz_tiers_vllm import write_trace
from golden_json import dump_configs
from golden_tiers_lmcache import OUT, PROTOCOL, Engine

# (fuzz seed, chunk tokens, CPU chunks, disk chunks)
CASES = ((3301, 16, 24, 117), (3436, 32, 7, 48), (3443, 16, 18, 449))


def main(argv: list[str] | None = None) -> int:
    """Drive each case behind its vLLM pool and write the fixture."""
    import lmcache
    import pandas as pd

    plans: dict[str, dict] = {}
    for path in (argv if argv is not None else sys.argv[1:]):
        plans.update(json.loads(Path(path).read_text()))
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    waits_raise()
    configs = []
    for seed, chunk, cpu, disk in CASES:
        plan = plans[str(seed)]
        path = OUT / f"trace_gpu_{seed}.parquet"
        with tempfile.TemporaryDirectory() as folder:
            _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
            pd.read_parquet(Path(folder) / "trace.parquet").to_parquet(
                path, index=False, compression="zstd")
        with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as folder:
            engine = Engine(f"gpu-{seed}", chunk, cpu, disk, Path(folder))
            found, waits = serve(engine, prompts, plan["gpu_hit_tokens"])
            engine.close(f"gpu-{seed}")
        assert waits is None, (seed, waits)
        print(f"seed {seed}: chunk {chunk}, cpu {cpu}, disk {disk} chunks behind "
              f"{plan['gpu_blocks']} GPU blocks: {sum(h for h, _ in found):,} hit tokens",
              file=sys.stderr, flush=True)
        configs.append({"trace": f"tests/fixtures/tiers_lmcache/{path.name}",
                        "chunk_tokens": chunk, "cpu_chunks": cpu, "disk_chunks": disk,
                        "gpu_blocks": plan["gpu_blocks"],
                        "gpu_hit_tokens": plan["gpu_hit_tokens"],
                        "hit_tokens": [h for h, _ in found],
                        "disk_hit_chunks": [d for _, d in found]})
    dump_configs({"producer": f"lmcache {lmcache.__version__}",
                  "protocol": PROTOCOL.replace(
                      "behind a GPU pool that hits nothing",
                      "behind a vLLM pool of gpu_blocks blocks whose per-request hits are "
                      "gpu_hit_tokens (the retrieve masks the whole chunks they cover, as the "
                      "adapter's start_load_kv does)"),
                  "configs": configs}, OUT / "behind_gpu.json")
    sys.stdout.flush()
    os._exit(0)  # LMCache's threads keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
