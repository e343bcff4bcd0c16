"""Benchmark of the engine simulator: steps per second and requests per second.

Loads a trace (default: the public Mooncake conversation trace, 12,031 requests, 1.4e8 prompt
tokens), warms numba's on-disk cache on a tiny run, then times `sim.simulate` alone (trace
loading and the block chains are timed separately) for a few deployments.

    python benchmarks/simulate.py
    python benchmarks/simulate.py --trace /path/to/trace.jsonl --model Qwen2.5-7B --gpu A100

`benchmarks/simulate_vs.py` times the loop against the one at a git revision, for a change to
`sim/engine.py` that must not slow it or change its results.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from yaotu_trace.ingest import read_trace
from yaotu_trace.sim import RequestArrays, SimConfig, StepCost, simulate_requests
from yaotu_trace.sim.scenario import Scenario, resolve_scenario
from yaotu_trace.sim.summary import request_arrays

DEFAULT_TRACE = (Path(__file__).resolve().parents[2]
                 / "shared/traces/mooncake/conversation_trace.jsonl")
CASES = (
    ("1 instance", Scenario()),
    ("4 instances, kv-aware", Scenario(instances=4, route="kv-aware")),
    ("P/D 2:2", Scenario(pd="2:2", route="least-loaded")),
    ("1 instance, sglang", Scenario(scheduler="sglang")),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="H100")
    args = parser.parse_args()

    warm = RequestArrays(arrival_s=np.zeros(2), prompt_tokens=np.array([8, 8]),
                         output_tokens=np.array([2, 2]))
    simulate_requests(warm, SimConfig(kv_blocks=10, step_cost=StepCost.fixed(1.0)))

    t0 = time.perf_counter()
    trace = read_trace(args.trace)
    t_load = time.perf_counter() - t0
    n = len(trace.requests)
    print(f"trace {args.trace.name}: {n:,} requests, "
          f"{int(trace.requests['prompt_len'].sum()):,} prompt tokens; load {t_load:.2f} s")
    print(f"{'deployment':<26}{'chains s':>10}{'sim s':>9}{'steps':>11}{'steps/s':>12}"
          f"{'req/s':>10}{'preempt':>9}{'hit %':>8}")
    for label, case in CASES:
        resolved = resolve_scenario(case.merged(Scenario(model=args.model, gpu=args.gpu)))
        t0 = time.perf_counter()
        requests, _ = request_arrays(trace, resolved.config.block_size_tokens)
        t_chain = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = simulate_requests(requests, resolved.config)
        t_sim = time.perf_counter() - t0
        hit = result.cached_tokens.sum() / requests.prompt_tokens.sum()
        print(f"{label:<26}{t_chain:>10.2f}{t_sim:>9.2f}{result.num_steps:>11,}"
              f"{result.num_steps / t_sim:>12,.0f}{n / t_sim:>10,.0f}"
              f"{int(result.num_preemptions.sum()):>9,}{100 * hit:>8.1f}")


if __name__ == "__main__":
    main()
