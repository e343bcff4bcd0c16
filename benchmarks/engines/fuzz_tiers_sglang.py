"""Random traces and configurations through SGLang's HiCache tree, against the replay.

The fixtures of `golden_tiers_sglang.py` pin five traces at chosen sizes; this draws new ones
(the traces of `fuzz_tiers_vllm.write_trace`: exact repeats, prefixes of earlier prompts,
next turns, shared system prompts, one or two tenants) and three configurations a seed: a
page of 1 token, the trace's block or twice it; a device pool from one page above the longest
prompt to four times it; a host of 0.5 to 3 times the device pool; one of the three write
policies. SGLang runs as `golden_tiers_sglang.HiCache` runs it (one request at a time, every
load-back and backup completed in its step), the replay as `ours` there. Prints a line per
configuration and exits 1 when any request's device or host hit differs. Run it in SGLang's
environment (benchmarks/engines/README.md, with the project's dependencies installed there):

    PYTHONPATH=. /tmp/venv-sglang/bin/python benchmarks/engines/fuzz_tiers_sglang.py \\
        --first-seed 4000 --seeds 60

Deterministic: a seed gives the same trace and configurations on every run, and SGLang's tree
core's clock is a counter.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIGS_PER_SEED = 3
POLICIES = ("write_through", "write_through_selective", "write_back")


def configs(seed: int, block: int, prompts: list[list[int]]) -> list:
    """Seed's configurations (`golden_tiers_sglang.Config`) for its trace."""
    from golden_tiers_sglang import Config

    draw = random.Random(seed)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        page = draw.choice([1, block, 2 * block])
        longest = -(-max(len(p) for p in prompts) // page) * page
        pool = draw.randint(longest // page + 1, 4 * longest // page) * page
        out.append(Config(page, pool, draw.choice([0.5, 1.0, 2.0, 3.0]), draw.choice(POLICIES)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every seed's configurations in SGLang and the replay; 1 if any request differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=4000)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    from fuzz_tiers_vllm import write_trace
    from golden_tiers_sglang import HiCache, _stub_engine, ours

    _stub_engine()
    runs = requests = differing = with_hits = 0
    print(f"{'seed':>5} {'policy':<24} {'P':>3} {'pool':>5} {'host':>5} {'gpu hits':>8} "
          f"{'cpu hits':>8} {'differ':>6}")
    with tempfile.TemporaryDirectory(prefix="fuzz-sglang-") as folder:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            path = Path(folder) / f"trace_{seed}.parquet"
            block, tenants, prompts = write_trace(seed, path)
            for config in configs(seed, block, prompts):
                engine = HiCache(config)
                gpu, cpu, _ = engine.run(tenants, prompts)
                mine = ours(path, config, engine.host_tokens)
                if mine is None:
                    print("the replay does not import here (numba): nothing compared")
                    return 1
                bad = [i for i in range(len(gpu))
                       if (gpu[i], cpu[i]) != (int(mine[0][i]), int(mine[1][i]))]
                runs += 1
                requests += len(gpu)
                differing += len(bad)
                with_hits += sum(cpu) > 0
                print(f"{seed:>5} {config.write_policy:<24} {config.page_size:>3} "
                      f"{config.pool_tokens:>5} {engine.host_tokens:>5} {sum(gpu):>8} "
                      f"{sum(cpu):>8} {len(bad):>6}"
                      f"{'  rows ' + str(bad[:5]) if bad else ''}", flush=True)
    print(f"{runs} configurations ({with_hits} with host hits), {requests:,} requests: "
          f"{differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
