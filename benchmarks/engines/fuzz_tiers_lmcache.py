"""Random traces and configurations through LMCache's own engine, for the `lmcache` tier policy.

The fixtures of `golden_tiers_lmcache.py` pin five traces at chosen sizes; this draws new ones
(the traces of `fuzz_tiers_vllm.write_trace`, blocks of 16 tokens so that LMCache's chunks are
whole blocks) and drives `golden_tiers_lmcache.Engine` as that script does, one request at a
time with the calls vLLM's adapter makes behind a GPU pool that hits nothing. Three
configurations a seed: chunks of 16 to 64 tokens, a CPU backend of 1 to a third of the trace's
chunks, and in about one in four a local disk below it (the CPU backend then holds the longest
prompt, as the golden script explains; one I/O thread, each write landed before the next
request). It writes, per configuration, each request's hit tokens and the chunks of it the disk
held to one JSON file; `--compare` holds the `lmcache` policy's replay to it (as
`tests/prefix/test_tiers_lmcache_engine.py` holds it to the fixtures), run with the project's
Python, which makes the same traces again from their seeds:

    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /tmp/venv-lmcache/bin/python \\
        /path/to/repo/benchmarks/engines/fuzz_tiers_lmcache.py --seeds 60 --out /tmp/lm.json
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


def configs(seed: int, prompts: list[list[int]]) -> list[dict]:
    """Seed's configurations for its trace."""
    draw = random.Random(seed)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        chunk = draw.choice([16, 16, 32, 64])
        largest = max(1, max(len(p) // chunk for p in prompts))
        total = sum(len(p) // chunk for p in prompts)
        if draw.random() < 0.25:
            cpu = draw.randint(largest, largest + max(1, total // 6))
            disk = draw.randint(1, max(2, total // 2))
        else:
            cpu, disk = draw.randint(1, max(2, total // 3)), None
        out.append({"chunk_tokens": chunk, "cpu_chunks": cpu, "disk_chunks": disk})
    return out


def drive(first_seed: int, seeds: int, out: Path) -> None:
    """LMCache's hits for every seed's configurations, written to `out`."""
    from fuzz_tiers_vllm import write_trace
    from golden_tiers_lmcache import Engine

    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    runs = []
    for seed in range(first_seed, first_seed + seeds):
        with tempfile.TemporaryDirectory(prefix="fuzz-lmcache-") as folder:
            _, _, prompts = write_trace(seed, Path(folder) / "trace.parquet", block=BLOCK)
        for k, config in enumerate(configs(seed, prompts)):
            name = f"fuzz-{seed}-{k}"
            with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as disk_folder:
                engine = Engine(name, config["chunk_tokens"], config["cpu_chunks"],
                                config["disk_chunks"], Path(disk_folder))
                found = [engine.request(f"r{i}", p) for i, p in enumerate(prompts)]
                engine.close(name)
            runs.append({"seed": seed, **config,
                         "hit_tokens": [h for h, _ in found],
                         "disk_hit_chunks": [d for _, d in found]})
            print(f"{seed} chunk {config['chunk_tokens']} cpu {config['cpu_chunks']} disk "
                  f"{config['disk_chunks']}: {sum(h for h, _ in found):,} hit tokens",
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
    from yaotu_trace.prefix.tiers.lmcache import replay_lmcache_tiers

    runs = json.loads(recorded.read_text())
    differing = requests = 0
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
        hits, _, _ = replay_lmcache_tiers(chains, np.zeros(n, dtype=np.int64),
                                          np.zeros(n, dtype=bool), tiers)
        gold = np.asarray(run["hit_tokens"])
        whole = gold == chains.prompt_tokens  # the adapter recomputes a whole hit's last token
        bad = np.flatnonzero(sum(hits) != gold - whole)
        if run["disk_chunks"] is not None:
            served = np.asarray(run["disk_hit_chunks"]) * chunk
            bad = np.union1d(bad, np.flatnonzero(hits[1] != served - (whole & (served > 0))))
        requests += n
        differing += bad.size
        print(f"{run['seed']} chunk {chunk:>3} cpu {run['cpu_chunks']:>5} disk "
              f"{run['disk_chunks'] or '-':>5}: LMCache {int(gold.sum()):>8,} replay "
              f"{int(sum(hits).sum() + whole.sum()):>8,}  differ {bad.size}"
              + (f" rows {bad[:5].tolist()}" if bad.size else ""))
    print(f"{len(runs)} configurations, {requests:,} requests: {differing} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("lmcache_fuzz.json"))
    parser.add_argument("--compare", type=Path, default=None,
                        help="compare a recorded file with the replay (the project's Python)")
    args = parser.parse_args(argv)
    if args.compare is not None:
        return compare(args.compare)
    drive(args.first_seed, args.seeds, args.out)
    sys.stdout.flush()
    os._exit(0)  # LMCache's threads keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
