"""Random traces and configurations through LMCache's own engine, for the `lmcache` tier policy.

The fixtures of `golden_tiers_lmcache.py` pin five traces at chosen sizes; this draws new ones
(the traces of `fuzz_tiers_vllm.write_trace`, blocks of 16 tokens so that LMCache's chunks are
whole blocks) and drives `golden_tiers_lmcache.Engine` as that script does, one request at a
time with the calls vLLM's adapter makes behind a GPU pool that hits nothing. Three
configurations a seed: chunks of 16 to 64 tokens, a CPU backend of 1 to a third of the trace's
chunks, and in about one in four a local disk below it (the CPU backend then holds the longest
prompt, as the golden script explains; one I/O thread, each write landed before the next
request). `--small-cpu` puts a disk below a CPU backend of one chunk to the longest prompt's:
a load that holds more chunks in CPU memory than that (its hit's chunks in the CPU backend,
pinned by the lookup, and those read from the disk) leaves LMCache waiting for room for ever,
and the driver records where (its only sleep, in `LocalCPUBackend.allocate`'s wait, raises
instead); the replay must stop at the same request (`lmcache.WaitsForCpuRoom`). It writes,
per configuration, each request's hit tokens and the chunks of it the disk held to one JSON
file; `--compare` holds the `lmcache` policy's replay to it (as
`tests/prefix/test_tiers_lmcache_engine.py` holds it to the fixtures), run with the project's
Python, which makes the same traces again from their seeds:

    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /tmp/venv-lmcache/bin/python \\
        /path/to/repo/benchmarks/engines/fuzz_tiers_lmcache.py --seeds 60 --out /tmp/lm.json \\
        [--small-cpu]
    .venv/bin/python benchmarks/engines/fuzz_tiers_lmcache.py --compare /tmp/lm.json

The comparison prints a line per configuration and exits 1 when any request differs.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BLOCK = 16
CONFIGS_PER_SEED = 3


def configs(seed: int, prompts: list[list[int]], small_cpu: bool = False) -> list[dict]:
    """Seed's configurations for its trace (`small_cpu`: a disk below a CPU backend of one
    chunk to the longest prompt's)."""
    draw = random.Random(seed)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        chunk = draw.choice([16, 16, 32, 64])
        largest = max(1, max(len(p) // chunk for p in prompts))
        total = sum(len(p) // chunk for p in prompts)
        if small_cpu:
            cpu = draw.randint(1, largest)
            disk = draw.randint(max(2, largest), max(3, total // 2))
        elif draw.random() < 0.25:
            cpu = draw.randint(largest, largest + max(1, total // 6))
            disk = draw.randint(1, max(2, total // 2))
        else:
            cpu, disk = draw.randint(1, max(2, total // 3)), None
        out.append({"chunk_tokens": chunk, "cpu_chunks": cpu, "disk_chunks": disk})
    return out


class WaitsForRoom(Exception):
    """LMCache's CPU backend found nothing to evict and would wait (`waits_raise`)."""


def waits_raise() -> None:
    """Make the wait in `LocalCPUBackend.allocate` (a retrieve that finds nothing to evict
    sleeps 0.1 s and tries again, for ever) raise `WaitsForRoom` instead: its only sleep."""
    import time

    import lmcache.v1.storage_backend.local_cpu_backend as cpu_backend

    class _Clock:
        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

        def sleep(self, _seconds: float) -> None:
            raise WaitsForRoom

    cpu_backend.time = _Clock()  # type: ignore[assignment]


def serve(engine, prompts: list[list[int]]) -> tuple[list[tuple[int, int]], int | None]:
    """LMCache's (hit tokens, disk chunks of it) per request, up to the request where it
    waits for CPU room for ever (then that request, else None)."""
    found = []
    for i, prompt in enumerate(prompts):
        try:
            found.append(engine.request(f"r{i}", prompt))
        except WaitsForRoom:
            return found, i
    return found, None


def drive(first_seed: int, seeds: int, out: Path, small_cpu: bool = False) -> None:
    """LMCache's hits for every seed's configurations, written to `out`."""
    from fuzz_tiers_vllm import write_trace
    from golden_tiers_lmcache import Engine

    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    waits_raise()
    runs = []
    for seed in range(first_seed, first_seed + seeds):
        with tempfile.TemporaryDirectory(prefix="fuzz-lmcache-") as folder:
            _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
        for k, config in enumerate(configs(seed, prompts, small_cpu)):
            name = f"fuzz-{seed}-{k}"
            with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as disk_folder:
                engine = Engine(name, config["chunk_tokens"], config["cpu_chunks"],
                                config["disk_chunks"], Path(disk_folder))
                found, waits = serve(engine, prompts)
                engine.close(name)
            runs.append({"seed": seed, **config, "waits_at": waits,
                         "hit_tokens": [h for h, _ in found],
                         "disk_hit_chunks": [d for _, d in found]})
            print(f"{seed} chunk {config['chunk_tokens']} cpu {config['cpu_chunks']} disk "
                  f"{config['disk_chunks']}: {sum(h for h, _ in found):,} hit tokens"
                  + (f", waits for room at request {waits}" if waits is not None else ""),
                  file=sys.stderr, flush=True)
    out.write_text(json.dumps(runs))


def compare(recorded: Path) -> int:
    """The `lmcache` policy's replay against every recorded configuration; 1 if any differs."""
    import numpy as np
    from fuzz_tiers_vllm import write_trace

    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import rules_for
    from yaotu_trace.prefix.tiers import TierName, TierSpec
    from yaotu_trace.prefix.tiers.lmcache import WaitsForCpuRoom, replay_lmcache_tiers

    runs = json.loads(recorded.read_text())
    differing = requests = waiting = 0
    folder = Path(tempfile.mkdtemp(prefix="fuzz-lmcache-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for run in runs:
        path = folder / f"trace_{run['seed']}.parquet"
        if not path.exists():
            write_trace(run["seed"], path, block=BLOCK)
        # LMCache keys chunks by their tokens alone (no tenant salt): one namespace.
        rules = rules_for("vllm", block_size_tokens=BLOCK, tenant_isolation=False)
        chains = prepare(read_trace(path)).chains(rules)
        n = chains.num_requests
        chunk = run["chunk_tokens"]
        tiers = (TierSpec(name=TierName.CPU, capacity_chunks=run["cpu_chunks"],
                          chunk_tokens=chunk),)
        if run["disk_chunks"] is not None:
            tiers += (TierSpec(name=TierName.DISK, capacity_chunks=run["disk_chunks"],
                               chunk_tokens=chunk),)
        no_gpu = np.zeros(n, dtype=np.int64)
        waits = None
        try:
            replay_lmcache_tiers(chains, no_gpu, np.zeros(n, dtype=bool), tiers)
        except WaitsForCpuRoom as stopped:
            waits = stopped.request
        # the requests LMCache served (those before the one it waits at), replayed alone
        upto = len(run["hit_tokens"])
        hits, _, _ = replay_lmcache_tiers(chains, no_gpu, np.arange(n) >= upto, tiers)
        gold = np.asarray(run["hit_tokens"])
        whole = gold == chains.prompt_tokens[:upto]  # a whole hit's last token is recomputed
        bad = np.flatnonzero(sum(hits)[:upto] != gold - whole)
        if run["disk_chunks"] is not None:
            served = np.asarray(run["disk_hit_chunks"], dtype=np.int64) * chunk
            bad = np.union1d(bad, np.flatnonzero(hits[1][:upto] != served
                                                 - (whole & (served > 0))))
        alike = waits == run.get("waits_at")
        requests += upto
        differing += bad.size + (0 if alike else 1)
        waiting += waits is not None
        print(f"{run['seed']} chunk {chunk:>3} cpu {run['cpu_chunks']:>5} disk "
              f"{run['disk_chunks'] or '-':>5}: LMCache {int(gold.sum()):>8,} replay "
              f"{int(sum(hits).sum() + whole.sum()):>8,}  differ {bad.size}"
              + (f" rows {bad[:5].tolist()}" if bad.size else "")
              + ("" if run.get("waits_at") is None and waits is None else
                 f"; waits for room at request {run.get('waits_at')}, the replay stops at "
                 f"{waits}{'' if alike else '  DIFFER'}"))
    print(f"{len(runs)} configurations ({waiting} where LMCache waits for CPU room for ever, "
          f"the replay stopping alike), {requests:,} requests served: {differing} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("lmcache_fuzz.json"))
    parser.add_argument("--small-cpu", action="store_true",
                        help="a disk below a CPU backend of one chunk to the longest prompt's, "
                        "where LMCache can wait for CPU room for ever")
    parser.add_argument("--compare", type=Path, default=None,
                        help="compare a recorded file with the replay (the project's Python)")
    args = parser.parse_args(argv)
    if args.compare is not None:
        return compare(args.compare)
    drive(args.first_seed, args.seeds, args.out, args.small_cpu)
    sys.stdout.flush()
    os._exit(0)  # LMCache's threads keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
