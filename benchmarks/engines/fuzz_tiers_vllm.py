"""Random traces and configurations: vLLM's scheduler with its CPU offload against the replay.

The fixtures of `golden_tiers_vllm.py` pin five traces at chosen sizes; this draws new ones.
Each seed makes a small token trace of its own (blocks of 4, 8 or 16 tokens, a vocabulary of
8 to 200 tokens so prompts collide, 40 to 160 requests of one or two tenants: exact repeats,
prefixes of earlier prompts, extensions of them, shared system prompts and unrelated ones,
prompts of a few tokens to 40 blocks) and three configurations of its own (chunks of 1 to 4
blocks, GPU pools from the largest prompt to four times it, CPU tiers from one chunk to a
third of the trace's chunks; lru or arc; a store threshold of 2 in about one in five; vLLM's
fs tier below the CPU in about one in five, its CPU tier then at least the largest prompt, as
`configs_for` explains). vLLM runs as `golden_tiers_vllm.VllmOffload` runs it (one request at
a time, one output token, every transfer done in its step); the replay is `ours` there.
Prints a line per configuration and exits 1 when any request's GPU, CPU or disk hit differs.
`--small-cpu` puts the fs tier below CPU tiers of one chunk to two more than the longest
prompt's, where vLLM can defer a request for ever (its driver's step bound, `NeverFinished`):
the replay must refuse the same request (`vllm_native.StalledLookup`). Run it on an idle
machine: beside a test run that loaded both cores, 4 of 329 `--small-cpu` configurations
differed on one request each, all with the fs tier, and none when run again alone. vLLM's fs
tier reads and writes on a thread pool; the driver waits for it between steps
(`golden_tiers_vllm.VllmOffload._settle_secondary`), and something there still depends on
timing (not chased further).
Writes nothing but a temporary folder, removed at the end. Run it in vLLM 0.33.0's environment
(benchmarks/engines/README.md), with the project importable:

    PYTHONPATH=. /work/venv-vllm/bin/python benchmarks/engines/fuzz_tiers_vllm.py \\
        --first-seed 2000 --seeds 150

Deterministic: a seed gives the same trace and configurations on every run.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_tiers_vllm import Config, NeverFinished, VllmOffload, _model_dir, _scratch, ours

CONFIGS_PER_SEED = 3


def write_trace(seed: int, path: Path, block: int | None = None
                ) -> tuple[int, list[str], list[list[int]]]:
    """Seed's trace as canonical Parquet at `path`: (block size, tenants, prompts). `block`
    fixes the block size the lengths are drawn around (else the seed draws it)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    drawn = int(rng.choice([4, 8, 16]))
    block = drawn if block is None else block
    vocabulary = int(rng.choice([8, 30, 200]))
    requests = int(rng.integers(40, 160))
    tenants = int(rng.integers(1, 3))
    longest = int(rng.integers(6, 40)) * block
    systems = [rng.integers(0, vocabulary, size=int(rng.integers(1, 10 * block))).tolist()
               for _ in range(3)]

    def fresh(most: int) -> list[int]:
        return rng.integers(0, vocabulary, size=int(rng.integers(1, most))).tolist()

    made: list[tuple[int, list[int]]] = []
    for _ in range(requests):
        tenant = int(rng.integers(0, tenants))
        roll = rng.random()
        if made and roll < 0.12:  # an earlier prompt again, whole
            tenant, prompt = made[int(rng.integers(0, len(made)))]
        elif made and roll < 0.2:  # a prefix of an earlier prompt
            tenant, prompt = made[int(rng.integers(0, len(made)))]
            prompt = prompt[:max(1, int(len(prompt) * rng.random()))]
        elif made and roll < 0.55:  # a recent prompt, extended (the next turn)
            tenant, prompt = made[int(rng.integers(max(0, len(made) - 10), len(made)))]
            prompt = prompt + fresh(4 * block)
        elif roll < 0.85:  # a shared system prompt and a question
            prompt = list(systems[int(rng.integers(0, 3))]) + fresh(5 * block)
        else:
            prompt = fresh(8 * block)
        prompt = [int(t) for t in prompt[:longest]]
        if len(prompt) < 2:
            prompt = [*prompt, 1, 2]
        made.append((tenant, prompt))
    pd.DataFrame([{"request_id": f"s{seed}-{i}", "arrival_s": 0.1 * i, "tenant": f"t{t}",
                   "prompt_len": len(p), "output_len": 1, "prompt_tokens": p}
                  for i, (t, p) in enumerate(made)]).to_parquet(path, index=False)
    return block, [f"t{t}" for t, _ in made], [p for _, p in made]


def configs(seed: int, block: int, prompts: list[list[int]], small_cpu: bool = False
            ) -> list[Config]:
    """Seed's configurations for its trace (`small_cpu`: the fs tier below a CPU tier of one
    chunk to two more than the longest prompt's)."""
    draw = random.Random(seed)
    largest = max(-(-len(p) // block) for p in prompts)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        per_chunk = draw.choice([1, 1, 2, 3, 4])
        chunk = block * per_chunk
        largest_chunks = max(1, max(len(p) // chunk for p in prompts))
        total_chunks = sum(len(p) // chunk for p in prompts)
        secondary = "fs" if draw.random() < 0.2 else ""
        policy = draw.choice(["lru", "lru", "arc"])
        threshold = 2 if not secondary and draw.random() < 0.2 else 0
        gpu = draw.choice([largest, largest + 1, largest + draw.randint(0, 3 * largest),
                           2 * largest])
        cpu = (draw.randint(largest_chunks, largest_chunks + max(1, total_chunks // 4))
               if secondary else draw.randint(1, max(2, total_chunks // 3)))
        if small_cpu:
            secondary, threshold, cpu = "fs", 0, draw.randint(1, largest_chunks + 2)
        out.append(Config(block, gpu, cpu, per_chunk, policy, threshold, secondary))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every seed's configurations in vLLM and the replay; 1 if any request differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--small-cpu", action="store_true",
                        help="the fs tier below CPU tiers as small as one chunk, where vLLM "
                        "can defer a request for ever")
    args = parser.parse_args(argv)
    from yaotu_trace.prefix.tiers.vllm_native import StalledLookup

    model_dir = _model_dir()
    folder = Path(_scratch("fuzz-"))  # removed when the run ends
    runs = requests = differing = with_hits = stalls = 0
    print(f"{'seed':>5} {'B':>3} {'K':>2} {'N':>4} {'cpu':>4} {'policy':<6} {'thr':>3} "
          f"{'below':<5} {'gpu hits':>8} {'cpu hits':>8} {'disk':>6} {'differ':>6}")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        path = folder / f"trace_{seed}.parquet"
        block, tenants, prompts = write_trace(seed, path)
        max_len = 1 << max(12, (max(len(p) for p in prompts) + 2).bit_length())
        for config in configs(seed, block, prompts, args.small_cpu):
            engine = VllmOffload(config, model_dir, max_len)
            theirs_stop = mine_stop = None
            try:
                gpu, cpu, _ = engine.run(tenants, prompts)
            except NeverFinished as stalled:
                theirs_stop = stalled.row
            try:
                mine = ours(path, config)
            except StalledLookup as stalled:
                mine_stop = stalled.request
            if theirs_stop is not None or mine_stop is not None:
                stalls += 1
                differing += theirs_stop != mine_stop
                print(f"{seed:>5} {config}: vLLM never finished request {theirs_stop}, the "
                      f"replay refuses request {mine_stop}"
                      f"{'' if theirs_stop == mine_stop else '  DIFFER'}", flush=True)
                continue
            if mine is None:
                print("the replay does not import here (numba): nothing compared")
                return 1
            theirs = [gpu, cpu, *([engine.disk] if config.secondary else [])]
            bad = [i for i in range(len(gpu))
                   if tuple(t[i] for t in theirs) != tuple(int(m[i]) for m in mine)]
            runs += 1
            requests += len(gpu)
            differing += len(bad)
            with_hits += sum(cpu) > 0
            disk = f"{sum(engine.disk):>6}" if config.secondary else f"{'-':>6}"
            print(f"{seed:>5} {block:>3} {config.blocks_per_chunk:>2} "
                  f"{config.num_gpu_blocks:>4} {config.cpu_chunks:>4} "
                  f"{config.eviction_policy:<6} {config.store_threshold:>3} "
                  f"{config.secondary or '-':<5} {sum(gpu):>8} {sum(cpu):>8} {disk} "
                  f"{len(bad):>6}{'  rows ' + str(bad[:5]) if bad else ''}", flush=True)
    print(f"{runs} configurations ({with_hits} with CPU hits), {requests:,} requests, and "
          f"{stalls} where vLLM or the replay never starts a request: {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
