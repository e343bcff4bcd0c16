"""Speed of the tiered replay (`prefix/tiers/`) against the GPU-only replay it builds on.

Two ratios, on Mooncake's conversation trace (the `vllm` preset, or `sglang` for SGLang's
policies: 512-token blocks, one per hash id, the engine's exact pool) and the same chains for
every line:

- one replay with a CPU tier (the GPU pool's replay plus the tier's pass) against the GPU-only
  replay of the same trace and pool; goal ≤ 2×; and the same with an unlimited disk below the
  CPU tier (no goal: what a second tier costs);
- a 6 × 6 two-dimensional curve (GPU size × CPU tier size: 6 GPU replays and 36 tier passes,
  6 under LMCache, whose backend's pass serves every GPU size) against one single-tier curve
  (`trace sweep`'s one-pass LRU curve of the GPU pool, every capacity at once); goal ≤ 4×; and
  the same curve with each GPU size's tier passes on two threads (`trace sweep --jobs 2`).
  The goal's words also read as the tier's curve (its 6 sizes behind one GPU size, the middle
  one): two lines hold the 6 × 6 curve to that.

Each in-process line is timed after a warm-up run (the compiled kernels loaded), best of
`--repeat` (the first three in turns, so that the machine's load slows them alike: best of
three times `--repeat`); reading and hashing the trace is shared and not counted. The last
four lines are the two goals as users meet them: `trace replay` with and without `--tier`,
and `trace sweep` over the 6 GPU sizes with and without a tier (its 6 sizes, the `--tier`
size and its halvings), each a fresh process with everything included, best of three.

On a machine whose cores share their memory path (the 2-vCPU machines this was written on:
two threads of random reads over 8 MB each run 1.17x as fast as one), threads barely help
these passes, which wait on memory: the 2-thread lines there say so.

    python benchmarks/tiers.py [--trace PATH] [--repeat 3]
        [--policy vllm-native|vllm-native-arc|lmcache|write_through|write_through_selective|
                  write_back] [--before REV]

`--before REV` (vLLM's policies) adds three lines: the CPU tier's compiled pass as it was at
git revision REV and as it is, recording its evictions and counting them only (as a replay
without `--residency` runs it), loaded side by side in this process and timed in turns (best
of 8 × `--repeat`), so that the machine's load slows them alike; their hits and counters (and
the first two's evictions) must be equal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from common import best_in_turns, best_of, module_at, run_trace  # noqa: E402

MOONCAKE_CONVERSATION = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def main(argv: list[str] | None = None) -> int:
    """Time the lines and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=MOONCAKE_CONVERSATION)
    parser.add_argument("--policy", default="vllm-native")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="a git revision whose vLLM pass to time "
                        "beside this one's")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        print(f"skipped: {args.trace} is not here")
        return 0
    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.kernels.sweep import sweep
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import effective_rules
    from yaotu_trace.prefix.tiers import (
        TierName,
        TierPolicy,
        TierSpec,
        gpu_replay,
        replay_tiers,
        tier_curve,
    )
    from yaotu_trace.prefix.tiers.spec import SGLANG_POLICIES

    trace = read_trace(args.trace)
    policy = TierPolicy(args.policy)
    # The policy's engine: SGLang's HiCache policies behind SGLang's pool, the rest behind vLLM's.
    preset = "sglang" if policy in SGLANG_POLICIES else "vllm"
    rules, _, _ = effective_rules(trace, preset)
    chains = prepare(trace).chains(rules)
    distinct = int(chains.num_distinct)
    block = int(chains.block_size_tokens)
    gpu_blocks = max(2, distinct // 20)
    cpu_chunks = max(1, distinct // 5)
    sized = rules.with_(capacity_blocks=gpu_blocks)
    tier = TierSpec(name=TierName.CPU, capacity_chunks=cpu_chunks, chunk_tokens=block)

    # The same CPU tier with a disk below it that never fills (`--tier disk=unlimited`).
    disk = TierSpec(name=TierName.DISK, capacity_chunks=1, chunk_tokens=block, unlimited=True)
    # In turns, each line's ratio to the GPU-only replay taken over the same moments.
    (gpu_s, gpu), (tier_s, tiered), (disk_s, _) = best_in_turns(
        [lambda: gpu_replay(chains, sized),
         lambda: replay_tiers(chains, sized, (tier,), policy),
         lambda: replay_tiers(chains, sized, (tier, disk), policy)], 3 * args.repeat)
    curve_s, _ = best_of(lambda: sweep(chains, touch_order=rules.touch_order), args.repeat)
    gpu_axis = tuple(max(2, distinct * k // 100) for k in (1, 2, 5, 10, 20, 40))
    tier_axis = tuple(max(1, distinct * k // 100) for k in (2, 5, 10, 20, 40, 80))
    grid_s, _ = best_of(lambda: tier_curve(chains, rules, tier, policy, gpu_axis, tier_axis),
                      args.repeat)
    grid2_s, _ = best_of(lambda: tier_curve(chains, rules, tier, policy, gpu_axis, tier_axis,
                                          threads=2), args.repeat)
    # The other reading of "one single-tier curve": the tier's 6 sizes behind one GPU size.
    line_s, _ = best_of(lambda: tier_curve(chains, rules, tier, policy, (gpu_axis[3],),
                                         tier_axis), args.repeat)

    prompt = int(chains.prompt_tokens.sum())
    print(f"trace: {args.trace.name}, {chains.num_requests:,} requests, {prompt:,} prompt "
          f"tokens, {distinct:,} distinct {block}-token blocks; policy {policy}")
    print(f"GPU pool {gpu_blocks:,} blocks, CPU tier {cpu_chunks:,} chunks: GPU hits "
          f"{int(gpu.hit_tokens.sum()) / prompt:.1%} alone, with the tier "  # type: ignore[attr-defined]
          f"{int(tiered.hit_tokens.sum()) / prompt:.1%} (its GPU share "  # type: ignore[attr-defined]
          f"{int(tiered.gpu_hit_tokens.sum()) / prompt:.1%})")  # type: ignore[attr-defined]
    rows = [
        ("GPU-only replay", gpu_s, None, None),
        ("replay with one CPU tier", tier_s, tier_s / gpu_s, 2.0),
        ("the same with an unlimited disk below", disk_s, disk_s / gpu_s, None),
        ("single-tier curve (one-pass LRU sweep)", curve_s, None, None),
        ("6 x 6 GPU x tier curve", grid_s, grid_s / curve_s, 4.0),
        ("6 x 6 curve, 2 threads (sweep --jobs 2)", grid2_s, grid2_s / curve_s, 4.0),
        ("tier curve, 6 sizes behind one GPU size", line_s, None, None),
        ("6 x 6 curve / that tier curve", grid_s, grid_s / line_s, 4.0),
        ("the same, 2 threads", grid2_s, grid2_s / line_s, 4.0),
    ]
    if args.before is not None:
        compared = _against_revision(args.before, policy, chains, gpu, sized, tier, args.repeat)
        if compared is None:
            print("--before times vLLM's passes: give --policy vllm-native or vllm-native-arc")
            return 2
        rows += compared
    # As users run them: fresh `trace` processes, everything included (best of three).
    processes = ["--preset", preset, "--format", "json", "-o", "/dev/null"]
    tier_args = ["--tier-policy", str(policy)]
    capacities = ",".join(str(b) for b in gpu_axis)
    lines = [
        ("trace replay (process, GPU only)",
         ["replay", "--capacity", str(gpu_blocks), "--no-waterfall"], None),
        ("trace replay --tier cpu=... (process)",
         ["replay", "--capacity", str(gpu_blocks), "--no-waterfall", "--tier",
          f"cpu={cpu_chunks * block}tok", *tier_args], 2.0),
        ("trace sweep, 6 GPU sizes (process)", ["sweep", "--capacities", capacities], None),
        ("trace sweep --tier, 6 x 6 (process)",
         ["sweep", "--capacities", capacities, "--tier", f"cpu={tier_axis[-1]}blocks",
          *tier_args], 4.0),
    ]
    walls: list[float] = []  # a line with a goal is held to the line before it
    for name, command, goal in lines:
        wall, run = best_of(lambda command=command: run_trace(
            [command[0], str(args.trace), *processes, *command[1:]]), 3, warm=False)
        if not run["ok"]:
            print(f"trace {command[0]} failed: {run['error']}")
            return 1
        rows.append((name, wall, None if goal is None else wall / walls[-1], goal))
        walls.append(wall)
    print(f"{'line':<42} {'seconds':>8} {'ratio':>7} {'goal':>6}  result")
    for name, seconds, ratio, goal in rows:
        verdict = "" if ratio is None or goal is None else (
            "pass" if ratio <= goal else f"{ratio / goal:.1f}x over the goal")
        r = "" if ratio is None else f"{ratio:.2f}x"
        g = "" if goal is None else f"<= {goal:.0f}x"
        print(f"{name:<42} {seconds:>8.4f} {r:>7} {g:>6}  {verdict}")
    return 0


# vLLM's compiled passes by policy: (module path, function), the same signature.
VLLM_PASSES = {"vllm-native": ("yaotu_trace/prefix/tiers/vllm_kernel.py", "vllm_offload_pass"),
               "vllm-native-arc": ("yaotu_trace/prefix/tiers/vllm_arc_kernel.py",
                                   "vllm_arc_pass")}


def _against_revision(revision: str, policy: object, chains: Any, gpu: Any, sized: Any,
                      tier: Any, repeat: int) -> list[tuple[str, float, float | None,
                                                            float | None]] | None:
    """The CPU tier's pass at `revision` and now, in turns in this process: two table lines,
    the second with its ratio to the first (None for a policy without a vLLM pass)."""
    import importlib
    import subprocess
    import tempfile

    import numpy as np

    from yaotu_trace.prefix.tiers.replay import refused_requests

    found = VLLM_PASSES.get(str(policy))
    if found is None:
        return None
    path, name = found
    now = getattr(importlib.import_module(path[:-3].replace("/", ".")), name)
    block = int(chains.block_size_tokens)
    arguments = (chains.offsets, chains.ids, np.asarray(gpu.hit_blocks, dtype=np.int64),
                 refused_requests(chains, sized), int(tier.chunk_tokens) // block,
                 int(tier.chunk_tokens), block, int(tier.capacity_chunks),
                 int(chains.num_distinct))
    with tempfile.TemporaryDirectory() as folder:
        try:
            then = getattr(module_at(revision, path, Path(folder),
                                     f"before_{Path(path).stem}"), name)
        except subprocess.CalledProcessError:
            raise SystemExit(f"git has no {path} at {revision!r}") from None
        except (ImportError, AttributeError) as exc:
            raise SystemExit(f"{path} at {revision} cannot run beside this tree's helpers: "
                             f"{str(exc).splitlines()[0]}") from None
        a, b = then(*arguments), now(*arguments)
        for x, y in zip(a, b, strict=True):  # hits, counters, evictions: all equal
            same = (all(np.array_equal(p, q) for p, q in zip(x, y, strict=True))
                    if isinstance(x, tuple) else np.array_equal(x, y))
            if not same:
                raise SystemExit(f"the pass at {revision} and now differ")
        # As `trace replay --tier` runs it: the evictions counted, not recorded (only
        # `--residency` reads them); the hits and counters the same.
        counted = now(*arguments, (), 0, False)
        if not (np.array_equal(counted[0], a[0]) and counted[1:5] == a[1:5]):
            raise SystemExit(f"the pass at {revision} and now, counting only, differ")
        (then_s, _), (now_s, _), (counted_s, _) = best_in_turns(
            [lambda: then(*arguments), lambda: now(*arguments),
             lambda: now(*arguments, (), 0, False)], 8 * repeat)
    return [(f"CPU tier pass at {revision[:12]}", then_s, None, None),
            ("CPU tier pass now (same results)", now_s, now_s / then_s, None),
            ("the same, evictions counted only", counted_s, counted_s / then_s, None)]


if __name__ == "__main__":
    raise SystemExit(main())
