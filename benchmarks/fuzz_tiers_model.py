"""vLLM's compiled CPU tier passes against the Python model of its rules, on random traces.

`yaotu_trace/prefix/tiers/vllm_native.py` states vLLM 0.33's offload rules in plain Python
(`replay_vllm_offload`); `vllm_kernel.py` (LRU) and `vllm_arc_kernel.py` (ARC) compile them.
`tests/prefix/test_tiers.py` holds the two together on 60 drawn configurations; this draws as
many more as asked, for a rewrite of a pass: prompts over 2 to 6 token values (shared
prefixes, full hits, the next request often sharing the last one's prefix), two-token blocks,
GPU pools of 4 to 39 blocks, CPU tiers of 1 to 39 chunks of 1 to 3 blocks (1 to 5 on odd
seeds: smaller than a prompt, so offers fail and the live requests' own keys are evicted),
store thresholds of 2 and 3, and a disk (and a remote) tier below some. Per request the hits
of every tier, every counter, every eviction (key, request, last use) and the first chunk no
tier held must agree; a lookup that never settles must stop both at the same request. The
compiled pass runs twice, recording its evictions and counting them only (`explain=False`):
the second must give the same hits, counters and first chunks lacking, and no evictions.

    python benchmarks/fuzz_tiers_model.py [--first-seed 50000] [--seeds 500] [--arc]

Prints one line per differing seed and a summary; exits 1 when any seed differs.
Deterministic: a seed gives the same trace and configuration on every run.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from yaotu_trace.prefix.kernels.blocks import build_block_chains
from yaotu_trace.prefix.kernels.chains import PromptContent
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.tiers import TierName, TierSpec
from yaotu_trace.prefix.tiers.replay import gpu_replay, refused_requests
from yaotu_trace.prefix.tiers.vllm_native import (
    StalledLookup,
    replay_vllm_arc,
    replay_vllm_offload,
    replay_vllm_tiers,
)


def _chains(prompts: list[list[int]], rules):  # type: ignore[no-untyped-def]
    """The prompts' block chains under `rules`."""
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.array([t for p in prompts for t in p], dtype=np.int64)
    return build_block_chains(PromptContent(offsets=offsets, values=values, prompt_len=lengths,
                                            source_block_size=None), None, rules)


def _outcome(run):  # type: ignore[no-untyped-def]
    """What a replay gave, comparable with ==: its hits, counters, evictions and first
    lacking chunks, or the message it stopped with."""
    try:
        hits, counters, evictions, first_lacking = run()
    except StalledLookup as stop:  # a lookup that never settles: an outcome to compare
        return f"stopped: {stop}"
    return ([h.tolist() for h in hits], counters,
            [(e.key.tolist(), e.request.tolist(), e.last_use_request.tolist())
             for e in evictions], first_lacking.tolist())


def one_seed(seed: int, arc: bool) -> tuple[bool, bool, bool]:
    """Seed's trace and configuration through the compiled pass and the model: (they agree,
    an offer failed, a tier below served a hit)."""
    rng = np.random.default_rng(seed)
    vocab, longest = int(rng.integers(2, 7)), int(rng.integers(3, 60))
    prompts = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, longest)))]
               for _ in range(int(rng.integers(20, 160)))]
    per_chunk = int(rng.integers(1, 4))
    rules = rules_for("vllm", block_size_tokens=2, capacity_blocks=int(rng.integers(4, 40)))
    chains = _chains(prompts, rules)
    gpu, refused = gpu_replay(chains, rules), refused_requests(chains, rules)
    threshold = int(rng.choice([0, 0, 2, 3]))
    tokens = 2 * per_chunk
    cpu = TierSpec(name=TierName.CPU, chunk_tokens=tokens, store_threshold=threshold,
                   capacity_chunks=int(rng.integers(1, 6 if seed % 2 else 40)))
    names = [] if threshold or rng.random() < 0.5 else (
        ["disk"] if rng.random() < 0.6 else ["disk", "remote"])
    tiers = (cpu, *(replace(cpu, name=TierName(name), store_threshold=0,
                            capacity_chunks=int(rng.integers(1, 60))) for name in names))
    compiled_pass = replay_vllm_arc if arc else replay_vllm_tiers

    def compiled(explain: bool = True):  # type: ignore[no-untyped-def]
        lacking = np.full(len(prompts), -1, dtype=np.int64)
        return (*compiled_pass(chains, gpu.hit_blocks, refused, tiers, lacking=lacking,
                               explain=explain), lacking)

    def model():  # type: ignore[no-untyped-def]
        lacking = np.full(len(prompts), -1, dtype=np.int64)
        return (*replay_vllm_offload(chains, gpu.hit_blocks, refused, tiers[0], tiers[1:],
                                     arc=arc, lacking=lacking), lacking)

    theirs = _outcome(model)
    mine = _outcome(compiled)
    counted = _outcome(lambda: compiled(explain=False))
    if isinstance(theirs, str) or isinstance(counted, str):
        mine = mine if counted == theirs else f"counted only: {counted}"
    elif counted != (theirs[0], theirs[1], [], theirs[3]):
        mine = "counted only, other results"
    failed = below = False
    if not isinstance(theirs, str):
        failed = theirs[1][0].failed_stores > 0
        below = any(sum(h) > 0 for h in theirs[0][1:])
    return mine == theirs, failed, below


def main(argv: list[str] | None = None) -> int:
    """Every seed of the range; 1 if any differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=50000)
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--arc", action="store_true", help="ARC's pass (default: LRU's)")
    args = parser.parse_args(argv)
    differ = failed = below = 0
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        same, did_fail, from_below = one_seed(seed, args.arc)
        if not same:
            differ += 1
            print(f"seed {seed}: the compiled pass and the model differ", flush=True)
        failed += did_fail
        below += from_below
    print(f"{'arc' if args.arc else 'lru'}, seeds {args.first_seed}–"
          f"{args.first_seed + args.seeds - 1}: {differ} differ (offers failed in {failed}, "
          f"tiers below served hits in {below})")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
