"""Random traces and configurations through SGLang's HiCache tree, against the replay.

The fixtures of `golden_tiers_sglang.py` pin five traces at chosen sizes; this draws new ones
(the traces of `fuzz_tiers_vllm.write_trace`: exact repeats, prefixes of earlier prompts,
next turns, shared system prompts, one or two tenants) and three configurations a seed: a
page of 1 token, the trace's block or twice it; a device pool from one page above the longest
prompt to four times it; a host of 0.5 to 3 times the device pool; one of the three write
policies. SGLang runs as `golden_tiers_sglang.HiCache` runs it (one request at a time, every
load-back and backup completed in its step), the replay as `ours` there. Prints a line per
configuration and exits 1 when any request's device or host hit differs. `--storage` puts
SGLang's file store below the host (`golden_tiers_sglang_storage.HiCacheStorage`: its
`HiCacheFile` with its LRU evictor, SGLang's own prefetch and backup threads) of 16 pages to
more than the trace writes, device pools up to twice the longest prompt and hosts of half and
once them, on the engine traces' generator (`traces.generate`, its sizes drawn: long
sessions, prompts of up to 900 tokens, as SGLang prefetches 256 or more), and compares the
storage hits too (`--tier cpu --tier disk`).
Run it in SGLang's environment (benchmarks/engines/README.md, with the project's
dependencies installed there):

    PYTHONPATH=. /tmp/venv-sglang/bin/python benchmarks/engines/fuzz_tiers_sglang.py \\
        --first-seed 4000 --seeds 60 [--storage]

Deterministic: a seed gives the same trace and configurations on every run, and SGLang's tree
core's clock is a counter.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIGS_PER_SEED = 3
POLICIES = ("write_through", "write_through_selective", "write_back")


def configs(seed: int, block: int, prompts: list[list[int]],
            ratios: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0), pools: int = 4) -> list:
    """Seed's configurations (`golden_tiers_sglang.Config`) for its trace: device pools up to
    `pools` times the longest prompt, hosts `ratios` times the device pool."""
    from golden_tiers_sglang import Config

    draw = random.Random(seed)
    out = []
    for _ in range(CONFIGS_PER_SEED):
        page = draw.choice([1, block, 2 * block])
        longest = -(-max(len(p) for p in prompts) // page) * page
        pool = draw.randint(longest // page + 1, pools * longest // page) * page
        out.append(Config(page, pool, draw.choice(ratios), draw.choice(POLICIES)))
    return out


def _storage_trace(seed: int, path: Path) -> tuple[int, list[str], list[list[int]]]:
    """A trace for the store: the engine traces' generator (`traces.generate`: sessions whose
    turns extend the last, system prompts of up to 12 blocks, a vocabulary of 1,000) with its
    sizes drawn, prompts of up to 900 tokens (SGLang prefetches 256 or more)."""
    from traces import TraceShape, generate

    draw = random.Random(seed)
    shape = TraceShape(f"fuzz{seed}", seed=seed, requests=draw.randint(120, 300),
                       tenants=draw.randint(1, 3), block_size_tokens=16,
                       max_prompt_tokens=draw.choice([480, 640, 900]))
    table = generate(shape)
    table.to_parquet(path, index=False)
    return 16, table["tenant"].tolist(), [list(map(int, p)) for p in table["prompt_tokens"]]


@dataclass
class Ran:
    """One configuration on both sides: SGLang's hits (device, host[, storage]) per request
    and the replay's, or the request where each stopped ("Prefill out of memory"; the
    replay's `PrefillOutOfMemory`), and the host's tokens."""

    theirs: list[list[int]] | None
    theirs_stopped: int | None
    mine: tuple | None
    mine_stopped: int | None
    host_tokens: int


def _run(config, storage_pages: int | None, tenants: list[str], prompts: list[list[int]],
         path: Path) -> Ran:
    """`config` (with a store of `storage_pages`, or none) in SGLang and in the replay."""
    import golden_tiers_sglang
    import golden_tiers_sglang_storage

    from yaotu_trace.prefix.tiers.sglang_tree import PrefillOutOfMemory

    if storage_pages is None:
        engine = golden_tiers_sglang.HiCache(config)
        spec, ours = config, golden_tiers_sglang.ours
    else:
        spec = golden_tiers_sglang_storage.StorageConfig(config, storage_pages)
        engine = golden_tiers_sglang_storage.HiCacheStorage(
            spec, Path(tempfile.mkdtemp(prefix="hicache-file-")))
        ours = golden_tiers_sglang_storage.ours
    served: list[int] = []  # the rows SGLang was asked to serve, the last one where it raised
    serve = engine.serve
    engine.serve = lambda row, *more: (served.append(row), serve(row, *more))[1]
    theirs = theirs_stopped = mine = mine_stopped = None
    try:
        *theirs, _ = engine.run(tenants, prompts)
    except RuntimeError:  # SGLang's own allocation gave up
        theirs_stopped = served[-1]
    finally:
        if storage_pages is not None:
            engine.close()
    try:
        mine = ours(path, spec, engine.host_tokens)
    except PrefillOutOfMemory as stopped:
        mine_stopped = stopped.request
    return Ran(theirs, theirs_stopped, mine, mine_stopped, engine.host_tokens)


def main(argv: list[str] | None = None) -> int:
    """Run every seed's configurations in SGLang and the replay; 1 if any request differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=4000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--storage", action="store_true",
                        help="SGLang's file store below the host, of a size each seed draws")
    args = parser.parse_args(argv)
    from fuzz_tiers_vllm import write_trace
    from golden_tiers_sglang import _stub_engine

    _stub_engine()
    if args.storage:
        import logging

        logging.disable(logging.WARNING)
    runs = requests = differing = with_hits = stopped = 0
    print(f"{'seed':>5} {'policy':<24} {'P':>3} {'pool':>5} {'host':>5} {'store':>6} "
          f"{'gpu hits':>8} {'cpu hits':>8} {'storage':>8} {'differ':>6}")
    with tempfile.TemporaryDirectory(prefix="fuzz-sglang-") as folder:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            path = Path(folder) / f"trace_{seed}.parquet"
            if args.storage:
                block, tenants, prompts = _storage_trace(seed, path)
            else:
                block, tenants, prompts = write_trace(seed, path)
            draw = random.Random(-seed)
            shapes = ((0.5, 0.5, 1.0), 2) if args.storage else ((0.5, 1.0, 2.0, 3.0), 4)
            for config in configs(seed, block, prompts, *shapes):
                pages = None
                if args.storage:
                    written = sum(len(p) for p in prompts) // config.page_size
                    pages = draw.randint(16, max(17, written + 16))
                ran = _run(config, pages, tenants, prompts, path)
                where = (f"{seed:>5} {config.write_policy:<24} {config.page_size:>3} "
                         f"{config.pool_tokens:>5} {ran.host_tokens:>5}")
                if ran.theirs_stopped is not None or ran.mine_stopped is not None:
                    alike = ran.theirs_stopped == ran.mine_stopped
                    stopped += 1
                    differing += 0 if alike else 1
                    print(f"{where} SGLang stops at request {ran.theirs_stopped}, the replay "
                          f"at {ran.mine_stopped}{'' if alike else '  DIFFER'}", flush=True)
                    continue
                theirs, mine = ran.theirs, ran.mine
                if mine is None:
                    print("the replay does not import here (numba): nothing compared")
                    return 1
                assert theirs is not None
                bad = [i for i in range(len(theirs[0]))
                       if tuple(t[i] for t in theirs) != tuple(int(m[i]) for m in mine)]
                runs += 1
                requests += len(theirs[0])
                differing += len(bad)
                with_hits += sum(theirs[-1]) > 0
                store = "-" if pages is None else str(pages)
                storage = "-" if pages is None else str(sum(theirs[2]))
                print(f"{where} {store:>6} {sum(theirs[0]):>8} {sum(theirs[1]):>8} "
                      f"{storage:>8} {len(bad):>6}{'  rows ' + str(bad[:5]) if bad else ''}",
                      flush=True)
    last = "storage" if args.storage else "host"
    print(f"{runs} configurations ({with_hits} with {last} hits), {requests:,} requests, and "
          f"{stopped} where SGLang or the replay stops (out of memory): {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
