"""Where LMCache waits for CPU room for ever: the request whose load it never finishes.

A load holds in CPU memory at once the chunks of its hit the CPU backend has (the lookup pinned
them) and every chunk it reads from the disk below; when those are more than the CPU backend
holds, `LocalCPUBackend.allocate` finds nothing to evict and waits, 0.1 s at a time, for ever
("No eviction candidates found in local cpu backend"). `fuzz_tiers_lmcache.py --small-cpu`
found such configurations; this script keeps three, each trace cut after the request LMCache
waits at (what comes later cannot change where), drives LMCache 0.5.6 on the cut trace as
`golden_tiers_lmcache.py` does (its wait raising instead of sleeping), and writes the request
and every earlier request's hit to `tests/fixtures/tiers_lmcache/waits_for_room.json`, the cut
traces beside it (`trace_waits_<seed>.parquet`). `tests/prefix/test_tiers_lmcache_engine.py`
holds the replay to stop at the same request. Run it with LMCache 0.5.6 and pandas importable,
from outside the repository:

    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /path/to/venv-lmcache/bin/python \\
        /work/…/benchmarks/engines/golden_tiers_lmcache_waits.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_tiers_lmcache import BLOCK, serve, waits_raise
from fuzz_tiers_vllm import write_trace
from golden_json import dump_configs
from golden_tiers_lmcache import OUT, PROTOCOL, Engine

# (fuzz seed, chunk tokens, CPU chunks, disk chunks): configurations the fuzz drew where
# LMCache waits.
CASES = ((3100, 32, 1, 89), (3101, 16, 7, 215), (3159, 16, 13, 498))
# (fuzz seed, CPU chunks, remote chunks) of `fuzz_tiers_lmcache.py --remote` (16-token chunks):
# a load from the remote store outgrows the CPU backend, and LMCache loads less than its
# lookup found (it does not wait), so each trace is cut after that request.
REMOTE_CASES = ((3502, 12, 256), (3503, 8, 64))


def waits_at(name: str, chunk: int, cpu: int, disk: int, prompts: list[list[int]]
             ) -> tuple[list[tuple[int, int]], int]:
    """LMCache's (hit, disk chunks) per request before the one it waits at, and that one."""
    with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as folder:
        engine = Engine(name, chunk, cpu, disk, Path(folder))
        found, waits = serve(engine, prompts)
        engine.close(name)
    if waits is None:
        raise SystemExit(f"LMCache served every request of {name}: not a case for this file")
    return found, waits


def _remote_case(seed: int, cpu: int, remote: int, pd) -> dict:  # type: ignore[no-untyped-def]
    """One remote case: LMCache run on the whole trace, the trace cut after the first load
    that outgrows the CPU backend, the hits before it."""
    import gc

    import numpy as np
    from fuzz_tiers_lmcache import _outgrows

    gc.disable()  # collected once the case is done
    chunk = 16
    with tempfile.TemporaryDirectory() as folder:
        _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
        table = pd.read_parquet(Path(folder) / "trace.parquet")
    with tempfile.TemporaryDirectory(prefix="lmcache-remote-") as folder:
        engine = Engine(f"remote-{seed}-{cpu}", chunk, cpu, None, Path(folder), remote)
        found, waits = serve(engine, prompts)  # LMCache's remote loop does not stop on destroy
    gc.enable()
    gc.collect()
    assert waits is None, (seed, waits)
    run = {"chunk_tokens": chunk, "cpu_chunks": cpu, "hit_tokens": [h for h, _ in found],
           "disk_hit_chunks": [d for _, d in found]}
    row = _outgrows(run, np.zeros(len(prompts), dtype=np.int64),
                    np.array([len(p) for p in prompts]))
    assert row is not None, seed
    path = OUT / f"trace_outgrows_{seed}.parquet"
    table.iloc[:row + 1].to_parquet(path, index=False, compression="zstd")
    print(f"seed {seed}: cpu {cpu}, remote {remote} chunks: a load outgrows the CPU at "
          f"request {row}", file=sys.stderr, flush=True)
    return {"trace": f"tests/fixtures/tiers_lmcache/{path.name}", "chunk_tokens": chunk,
            "cpu_chunks": cpu, "disk_chunks": None, "remote_chunks": remote, "outgrows_at": row,
            "hit_tokens": run["hit_tokens"][:row],
            "disk_hit_chunks": run["disk_hit_chunks"][:row]}


def main() -> int:
    """Find each case's wait, cut its trace there, check LMCache waits there again, write."""
    import lmcache
    import pandas as pd

    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    waits_raise()
    configs = []
    for seed, chunk, cpu, disk in CASES:
        with tempfile.TemporaryDirectory() as folder:
            _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
            table = pd.read_parquet(Path(folder) / "trace.parquet")
        found, row = waits_at(f"waits-{seed}", chunk, cpu, disk, prompts)
        cut = table.iloc[:row + 1]
        path = OUT / f"trace_waits_{seed}.parquet"
        cut.to_parquet(path, index=False, compression="zstd")
        again, row_again = waits_at(f"waits-{seed}-cut", chunk, cpu, disk,
                                    [list(map(int, p)) for p in cut["prompt_tokens"]])
        assert (again, row_again) == (found, row), seed
        print(f"seed {seed}: chunk {chunk}, cpu {cpu}, disk {disk} chunks: LMCache waits at "
              f"request {row}", file=sys.stderr, flush=True)
        configs.append({"trace": f"tests/fixtures/tiers_lmcache/{path.name}", "chunk_tokens": chunk,
                        "cpu_chunks": cpu, "disk_chunks": disk, "waits_at": row,
                        "hit_tokens": [h for h, _ in found],
                        "disk_hit_chunks": [d for _, d in found]})
    for seed, cpu, remote in REMOTE_CASES:
        configs.append(_remote_case(seed, cpu, remote, pd))
    dump_configs({"producer": f"lmcache {lmcache.__version__}",
                  "protocol": PROTOCOL + "; each request served until LMCache's CPU backend "
                  "finds nothing to evict for a retrieve and would wait (its wait made to raise): "
                  "waits_at is that request in file order, hit_tokens and disk_hit_chunks those "
                  "of the requests before it; where remote_chunks is set, a RemoteBackend on "
                  "LMCache's mock store (mock://1/) instead of the disk, the garbage collector "
                  "held off (LMCache's allocator deadlocks on a memory object freed inside an "
                  "allocation): outgrows_at is the first request whose load holds more chunks in "
                  "CPU memory than the CPU backend has (LMCache does not wait there but loads "
                  "less), hit_tokens and disk_hit_chunks (the remote's) those of the requests "
                  "before it",
                  "configs": configs}, OUT / "waits_for_room.json")
    sys.stdout.flush()
    os._exit(0)  # LMCache's threads keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
