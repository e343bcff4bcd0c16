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
instead); the replay must stop at the same request (`lmcache.WaitsForCpuRoom`). `--remote`
puts LMCache's mock remote store below such a CPU backend instead, where a load that outgrows
it does not wait but loads less than the lookup found: the replay must stop at the first such
request (`lmcache.LoadOutgrowsCpu`), which the comparison finds from LMCache's lookups. It writes,
per configuration, each request's hit tokens and the chunks of it the disk held to one JSON
file; `--compare` holds the `lmcache` policy's replay to it (as
`tests/prefix/test_tiers_lmcache_engine.py` holds it to the fixtures), run with the project's
Python, which makes the same traces again from their seeds:

    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /tmp/venv-lmcache/bin/python \\
        /path/to/repo/benchmarks/engines/fuzz_tiers_lmcache.py --seeds 60 --out /tmp/lm.json \\
        [--small-cpu]
    .venv/bin/python benchmarks/engines/fuzz_tiers_lmcache.py --compare /tmp/lm.json

`--gpu FILE` puts a vLLM pool in front: run first with the project's Python, it writes each
seed's pool and its hits (the exact replay of vLLM's pool) to FILE; run with LMCache's, the
driver loads past those hits as vLLM's adapter does (the chunks they cover masked).

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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

BLOCK = 16
CONFIGS_PER_SEED = 3


def configs(seed: int, prompts: list[list[int]], small_cpu: bool = False,
            remote: bool = False) -> list[dict]:
    """Seed's configurations for its trace (`small_cpu`: a disk below a CPU backend of one
    chunk to the longest prompt's; `remote`: LMCache's mock remote store instead, of 64 to
    512 chunks of 16 tokens)."""
    draw = random.Random(seed)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        chunk = draw.choice([16, 16, 32, 64])
        largest = max(1, max(len(p) // chunk for p in prompts))
        total = sum(len(p) // chunk for p in prompts)
        if remote:  # the mock store's chunk is 1 GiB / its chunks: 16 tokens divide it
            largest = max(1, max(len(p) // 16 for p in prompts))
            out.append({"chunk_tokens": 16, "cpu_chunks": draw.randint(1, largest),
                        "disk_chunks": None, "remote_chunks": draw.choice([64, 128, 256, 512])})
            continue
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


def serve(engine, prompts: list[list[int]], gpu_hit_tokens: list[int] | None = None
          ) -> tuple[list[tuple[int, int]], int | None]:
    """LMCache's (hit tokens, disk chunks of it) per request behind a GPU pool that hits
    `gpu_hit_tokens` (None: nothing), up to the request where it waits for CPU room for ever
    (then that request, else None)."""
    found = []
    for i, prompt in enumerate(prompts):
        try:
            found.append(engine.request(f"r{i}", prompt,
                                        0 if gpu_hit_tokens is None else gpu_hit_tokens[i]))
        except WaitsForRoom:
            return found, i
    return found, None


def gpu_rules(seed: int, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    """The vLLM pool in front of LMCache for `--gpu` (the project's Python): one namespace
    (LMCache's keys have no tenant salt), one to three times the longest prompt's blocks and
    one more, so that no prompt is refused."""
    from yaotu_trace.prefix.rules import rules_for

    largest = max(-(-len(p) // BLOCK) for p in prompts)
    blocks = random.Random(seed + 99).randint(largest + 1, 3 * largest + 1)
    return rules_for("vllm", block_size_tokens=BLOCK, capacity_blocks=blocks,
                     tenant_isolation=False)


def plan_gpu(first_seed: int, seeds: int, out: Path) -> None:
    """Each seed's vLLM pool and its hit tokens per request (`--gpu`), for `drive` to put in
    front of LMCache: the project's exact replay of vLLM's pool (held to vLLM itself in
    `tests/prefix/test_exact_vllm.py`), as LMCache's environment has no replay."""
    from fuzz_tiers_vllm import write_trace

    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.tiers import gpu_replay

    plan = {}
    for seed in range(first_seed, first_seed + seeds):
        with tempfile.TemporaryDirectory(prefix="fuzz-lmcache-") as folder:
            path = Path(folder) / "trace.parquet"
            _, _, prompts = write_trace(seed, path, block=BLOCK)
            rules = gpu_rules(seed, prompts)
            hits = gpu_replay(prepare(read_trace(path)).chains(rules), rules).hit_tokens
        plan[str(seed)] = {"gpu_blocks": rules.capacity_blocks,
                           "gpu_hit_tokens": [int(h) for h in hits]}
    out.write_text(json.dumps(plan))


def drive(first_seed: int, seeds: int, out: Path, small_cpu: bool = False,
          gpu_plan: Path | None = None, remote: bool = False) -> None:
    """LMCache's hits for every seed's configurations, written to `out` (behind the vLLM
    pools of `gpu_plan`, else a GPU pool that hits nothing)."""
    from fuzz_tiers_vllm import write_trace
    from golden_tiers_lmcache import Engine

    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    waits_raise()
    if remote:
        # LMCache's allocator frees a memory object from the garbage collector's `__del__`
        # under its own lock, and with large remote chunks deadlocks inside an allocation:
        # collected only at the end here.
        import gc

        gc.disable()
    plan = json.loads(gpu_plan.read_text()) if gpu_plan is not None else {}
    runs = []
    for seed in range(first_seed, first_seed + seeds):
        with tempfile.TemporaryDirectory(prefix="fuzz-lmcache-") as folder:
            _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
        gpu = plan.get(str(seed), {"gpu_blocks": None, "gpu_hit_tokens": [0] * len(prompts)})
        for k, config in enumerate(configs(seed, prompts, small_cpu, remote)):
            name = f"fuzz-{seed}-{k}"
            with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as disk_folder:
                engine = Engine(name, config["chunk_tokens"], config["cpu_chunks"],
                                config["disk_chunks"], Path(disk_folder),
                                config.get("remote_chunks"))
                found, waits = serve(engine, prompts, gpu["gpu_hit_tokens"])
                if not remote:  # LMCache's remote loop does not stop on destroy
                    engine.close(name)
            runs.append({"seed": seed, **config, "gpu_blocks": gpu["gpu_blocks"],
                         "waits_at": waits,
                         "hit_tokens": [h for h, _ in found],
                         "disk_hit_chunks": [d for _, d in found]})
            print(f"{seed} chunk {config['chunk_tokens']} cpu {config['cpu_chunks']} disk "
                  f"{config['disk_chunks']}: {sum(h for h, _ in found):,} hit tokens"
                  + (f", waits for room at request {waits}" if waits is not None else ""),
                  file=sys.stderr, flush=True)
    out.write_text(json.dumps(runs))


def compare(recorded: Path) -> int:
    """The `lmcache` policy's replay against every recorded configuration; 1 if any differs."""
    from fuzz_tiers_vllm import write_trace

    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import rules_for
    from yaotu_trace.prefix.tiers import TierName, TierSpec, gpu_replay
    from yaotu_trace.prefix.tiers.lmcache import (
        LoadOutgrowsCpu,
        WaitsForCpuRoom,
        replay_lmcache_tiers,
    )

    runs = json.loads(recorded.read_text())
    differing = requests = waiting = 0
    folder = Path(tempfile.mkdtemp(prefix="fuzz-lmcache-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for run in runs:
        path = folder / f"trace_{run['seed']}.parquet"
        if not path.exists():
            write_trace(run["seed"], path, block=BLOCK)
        # LMCache keys chunks by their tokens alone (no tenant salt): one namespace.
        rules = rules_for("vllm", block_size_tokens=BLOCK, tenant_isolation=False,
                          capacity_blocks=run.get("gpu_blocks"))
        chains = prepare(read_trace(path)).chains(rules)
        n = chains.num_requests
        gpu_hit = (np.zeros(n, dtype=np.int64) if run.get("gpu_blocks") is None else
                   np.asarray(gpu_replay(chains, rules).hit_tokens, dtype=np.int64))
        chunk = run["chunk_tokens"]
        tiers = (TierSpec(name=TierName.CPU, capacity_chunks=run["cpu_chunks"],
                          chunk_tokens=chunk),)
        if run["disk_chunks"] is not None:
            tiers += (TierSpec(name=TierName.DISK, capacity_chunks=run["disk_chunks"],
                               chunk_tokens=chunk),)
        if run.get("remote_chunks") is not None:
            tiers += (TierSpec(name=TierName.REMOTE, capacity_chunks=run["remote_chunks"],
                               chunk_tokens=chunk),)
        gpu_blocks = gpu_hit // BLOCK
        waits = None
        try:
            replay_lmcache_tiers(chains, gpu_blocks, np.zeros(n, dtype=bool), tiers)
        except (WaitsForCpuRoom, LoadOutgrowsCpu) as stopped:
            waits = stopped.request
        expected_stop = run.get("waits_at")
        if run.get("remote_chunks") is not None:  # LMCache does not wait: it loads less
            expected_stop = _outgrows(run, gpu_hit, chains.prompt_tokens)
            run["hit_tokens"] = run["hit_tokens"][:expected_stop]
            run["disk_hit_chunks"] = run["disk_hit_chunks"][:expected_stop]
        # the requests LMCache served (those before the one it waits at), replayed alone
        upto = len(run["hit_tokens"])
        hits, _, _ = replay_lmcache_tiers(chains, gpu_blocks, np.arange(n) >= upto, tiers)
        expected = _loaded(np.asarray(run["hit_tokens"], dtype=np.int64),
                           np.asarray(run["disk_hit_chunks"], dtype=np.int64),
                           gpu_hit[:upto], chains.prompt_tokens[:upto], chunk)
        bad = np.flatnonzero(sum(hits)[:upto] != expected[0])
        if len(tiers) > 1:
            bad = np.union1d(bad, np.flatnonzero(hits[1][:upto] != expected[1]))
        gold = np.asarray(run["hit_tokens"])
        whole = gold == chains.prompt_tokens[:upto]
        alike = waits == expected_stop
        requests += upto
        differing += bad.size + (0 if alike else 1)
        waiting += waits is not None
        print(f"{run['seed']} chunk {chunk:>3} cpu {run['cpu_chunks']:>5} disk "
              f"{run['disk_chunks'] or '-':>5}: LMCache {int(gold.sum()):>8,} replay "
              f"{int(sum(hits).sum() + whole.sum()):>8,}  differ {bad.size}"
              + (f" rows {bad[:5].tolist()}" if bad.size else "")
              + ("" if expected_stop is None and waits is None else
                 f"; a load outgrows the CPU at request {expected_stop}, the replay stops at "
                 f"{waits}{'' if alike else '  DIFFER'}"))
    print(f"{len(runs)} configurations ({waiting} where a load outgrows the CPU backend: "
          f"LMCache waits for ever reading the disk, loads less from the remote store, the "
          f"replay stops alike), {requests:,} requests served: {differing} differ")
    return 1 if differing else 0


def _outgrows(run: dict, gpu_hit: np.ndarray, prompt: np.ndarray) -> int | None:
    """The first request whose load, as LMCache found it, holds more chunks in CPU memory at
    once than the CPU backend has: its lookup's chunks in the CPU and those it reads from
    below, past the GPU hit (LMCache with a remote store loads less there)."""
    chunk = run["chunk_tokens"]
    for i, (hit, below) in enumerate(zip(run["hit_tokens"], run["disk_hit_chunks"],
                                         strict=True)):
        run_chunks = hit // chunk
        first = max(int(gpu_hit[i]) // chunk, run_chunks - below)
        read = max(0, run_chunks - first)
        loads = hit - (hit == int(prompt[i])) > int(gpu_hit[i])
        if loads and read > 0 and run_chunks - below + read > run["cpu_chunks"]:
            return i
    return None


def _loaded(hit: np.ndarray, disk_chunks: np.ndarray, gpu_hit: np.ndarray,
            prompt: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """What the adapter loads per request from LMCache's lookup hit (its last `disk_chunks`
    chunks on disk) behind vLLM's `gpu_hit`: every token past the GPU hit, one less for a
    whole prompt (vLLM recomputes it); and of them, those of the disk's chunks."""
    end = hit - (hit == prompt)
    total = np.maximum(end - gpu_hit, 0)
    first_disk = hit // chunk - disk_chunks
    disk = np.zeros_like(total)
    for i in np.flatnonzero(disk_chunks > 0):
        for j in range(int(first_disk[i]), int(hit[i]) // chunk):
            disk[i] += max(0, min((j + 1) * chunk, int(end[i]))
                           - max(j * chunk, int(gpu_hit[i])))
    return total, disk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("lmcache_fuzz.json"))
    parser.add_argument("--small-cpu", action="store_true",
                        help="a disk below a CPU backend of one chunk to the longest prompt's, "
                        "where LMCache can wait for CPU room for ever")
    parser.add_argument("--remote", action="store_true",
                        help="LMCache's mock remote store below a CPU backend of one chunk to "
                        "the longest prompt's, where a load can outgrow it")
    parser.add_argument("--gpu", type=Path, default=None,
                        help="with the project's Python: write each seed's vLLM pool and its "
                        "hits to this file; with LMCache's: put them in front of LMCache")
    parser.add_argument("--compare", type=Path, default=None,
                        help="compare a recorded file with the replay (the project's Python)")
    args = parser.parse_args(argv)
    if args.compare is not None:
        return compare(args.compare)
    if args.gpu is not None and not args.gpu.exists():
        plan_gpu(args.first_seed, args.seeds, args.gpu)
        return 0
    drive(args.first_seed, args.seeds, args.out, args.small_cpu, args.gpu, args.remote)
    sys.stdout.flush()
    os._exit(0)  # LMCache's threads keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
