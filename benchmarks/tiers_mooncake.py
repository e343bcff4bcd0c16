"""docs/tiers.md's two-dimensional grid: GPU pool × CPU tier on a Mooncake trace, priced.

Replays every pair of sizes (the GPU pool alone, then a CPU tier below it under vLLM's native
offload rules, `prefix/tiers`, as `tier_curve` does) and prices each tier with `sim/fetch.py`
and the user's prices (`--gpu-price`, `--memory-price`: example inputs, not facts), as `trace
replay --tier ... --gpu ... --gpu-price ...` prices one point. Prints one Markdown table.

    python benchmarks/tiers_mooncake.py
    python benchmarks/tiers_mooncake.py --gpu-blocks 1350 2700 5400 --cpu-blocks 6500 13000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import ROOT  # type: ignore[import-not-found]

from yaotu_trace.catalog.models import find_model
from yaotu_trace.catalog.prices import Prices
from yaotu_trace.commands.shared.pricing import TierServed, prefill_compute, pricing_section
from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import effective_rules
from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, gpu_replay, replay_tiers
from yaotu_trace.sim.fetch import LINKS

TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def main() -> int:
    """Replay, price, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--gpu-blocks", type=int, nargs="+", default=[1350, 2700, 5400])
    parser.add_argument("--cpu-blocks", type=int, nargs="+", default=[6500, 13000, 26000])
    parser.add_argument("--disk-blocks", type=int, default=0)
    parser.add_argument("--gpu-price", type=float, default=2.50)
    parser.add_argument("--memory-price", type=float, default=3.00)
    args = parser.parse_args()
    trace = read_trace(args.trace)
    rules, _, _ = effective_rules(trace, None)
    prepared = prepare(trace)
    model = find_model(args.model)
    kv = model.kv_bytes_per_token
    block = rules.block_size_tokens
    compute = prefill_compute(model, args.gpu, args.tp, kv)
    prices = Prices(gpu_per_hour=args.gpu_price, memory_per_gib_month=args.memory_price)
    print(f"trace {args.trace.name}: {prepared.num_requests:,} requests, block {block} tokens, "
          f"{args.model} ({kv:,} B/token), {args.tp}× {args.gpu}")
    print("\n| GPU blocks | CPU blocks | disk blocks | GPU hits | CPU hits | disk hits | hit ratio "
          "| prefill saved − load, GPU-h/day | net $/day | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpu_blocks in args.gpu_blocks:
        r = rules.with_(capacity_blocks=gpu_blocks)
        chains = prepared.chains(r)
        gpu = gpu_replay(chains, r)
        setups: list[tuple[int, int]] = [(0, 0)] + [(c, 0) for c in args.cpu_blocks]
        if gpu_blocks == args.gpu_blocks[0] and args.disk_blocks:
            setups.append((args.cpu_blocks[-1], args.disk_blocks))
        for cpu_blocks, disk_blocks in setups:
            t0 = time.perf_counter()
            specs = tuple(TierSpec(name=name, capacity_chunks=size, chunk_tokens=block)
                          for name, size in ((TierName.CPU, cpu_blocks),
                                             (TierName.DISK, disk_blocks)) if size)
            hits: list[np.ndarray] = []
            if specs:
                try:
                    tiered = replay_tiers(chains, r, specs, TierPolicy.VLLM, gpu=gpu)
                except NotImplementedError:
                    print(f"| {gpu_blocks:,} | {cpu_blocks:,} | {disk_blocks:,} | not replayed "
                          "(this tier policy has no disk tier yet) | | | | | | |")
                    continue
                hits = list(tiered.tier_hit_tokens)
            section = pricing_section(
                request_id=prepared.request_id, arrival_s=prepared.arrival_s,
                prompt_tokens=chains.prompt_tokens, gpu_hit_tokens=gpu.hit_tokens,
                tiers=[TierServed(name=str(s.name), size_bytes=float(s.capacity_tokens * kv),
                                  hit_tokens=h) for s, h in zip(specs, hits, strict=True)],
                compute=compute, kv_bytes_per_token=kv, links=LINKS, prices=prices,
                gpu=args.gpu, gpu_pool_bytes=float(gpu_blocks * block * kv))
            seconds = time.perf_counter() - t0
            total = int(gpu.hit_tokens.sum()) + sum(int(h.sum()) for h in hits)
            tier_h = [int(h.sum()) for h in hits] + [0] * (2 - len(hits))
            gh = sum(t["gpu_hours_per_day"] or 0.0 for t in section["tiers"])
            net = sum(t["net_money_per_day"] or 0.0 for t in section["tiers"])
            print(f"| {gpu_blocks:,} | {cpu_blocks:,} | {disk_blocks:,} | "
                  f"{int(gpu.hit_tokens.sum()):,} | {tier_h[0]:,} | {tier_h[1]:,} | "
                  f"{100 * total / int(chains.prompt_tokens.sum()):.1f} % | {gh:,.1f} | "
                  f"{net:,.2f} | {seconds:.1f} |")
            for t in section["tiers"]:
                print(f"|  | {t['name']}: {t['size_gib']:,.0f} GiB | load {t['load_s']:.1f} s "
                      f"vs prefill {t['prefill_saved_s']:.1f} s | peak "
                      f"{t['peak_bytes_per_s'] / 1e9:.2f} GB/s | GPU ${t['gpu_money_per_day']:,.2f}"
                      f"/day | memory ${t['memory_money_per_day']:,.2f}/day | break-even "
                      f"{t['break_even_tokens']} tokens | slower requests "
                      f"{section['fetch']['slower_requests']} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
