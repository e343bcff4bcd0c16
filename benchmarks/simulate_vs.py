"""The engine loop against its own past: CPU time, compile time and bit-identity versus a revision.

Loads `yaotu_trace/sim/engine.py` as it was at a git revision (default `main`) next to the
working tree's, feeds both the same inputs for the deployments of `benchmarks/simulate.py`
(Mooncake conversation trace), checks that every result array is bit-identical, and times the
two loops alternately (CPU seconds, median of the repeats). The first call of each, in a fresh
process with an empty numba cache, is the compile time.

    python benchmarks/simulate_vs.py
    python benchmarks/simulate_vs.py --baseline main --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
from common import module_at, module_from  # type: ignore[import-not-found]

from yaotu_trace.data.schema import Trace
from yaotu_trace.ingest import read_trace
from yaotu_trace.sim import RequestArrays, SimConfig, StepCost
from yaotu_trace.sim.engine_params import engine_params, step_cost_params
from yaotu_trace.sim.run import _engine_inputs, _runnable, _token_budget
from yaotu_trace.sim.scenario import Scenario, resolve_scenario
from yaotu_trace.sim.summary import request_arrays

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parents[0] / "shared/traces/mooncake/conversation_trace.jsonl"
ENGINE = "yaotu_trace/sim/engine.py"
CASES = (
    ("1 instance", Scenario()),
    ("4 instances, kv-aware", Scenario(instances=4, route="kv-aware")),
    ("P/D 2:2", Scenario(pd="2:2", route="least-loaded")),
    ("1 instance, sglang", Scenario(scheduler="sglang")),
    ("4 instances, sglang", Scenario(instances=4, route="prefix-affinity", scheduler="sglang")),
)


def baseline_engine(revision: str, folder: Path) -> ModuleType:
    """The engine module as it was at `revision`, imported under its own name."""
    return module_at(revision, ENGINE, folder, "engine_baseline")


def current_engine() -> ModuleType:
    """The working tree's engine, as `sim.simulate` imports it."""
    from yaotu_trace.sim import engine

    return engine


def engine_args(module: ModuleType, trace: Trace, case: Scenario, model: str,
                gpu: str) -> tuple:
    """`simulate_cluster`'s arguments for `case`, exactly as `sim.simulate` builds them."""
    config = resolve_scenario(case.merged(Scenario(model=model, gpu=gpu))).config
    requests, _ = request_arrays(trace, config.block_size_tokens)
    _, runnable = _runnable(requests, config)
    inputs = module.Inputs(*_engine_inputs(runnable, config))
    return inputs, engine_params(config, _token_budget(runnable, config)), step_cost_params(
        config.step_cost)


def identical(a: tuple, b: tuple) -> bool:
    """Bit-identity of two result tuples (NaN payloads included)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def cpu_seconds(fn: Callable[..., tuple], args: tuple) -> tuple[float, tuple]:
    """CPU time, not wall time: other work on a shared machine inflates the latter more."""
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def compile_seconds(which: str, revision: str) -> float:
    """First call on a tiny input in a fresh process with an empty numba cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, __file__, "--compile-only", which,
                              "--baseline", revision], check=True, capture_output=True,
                             text=True, env=env).stdout
    return float(out.split()[-1])


def compile_only(which: str, revision: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        # both from a copy of their source, so that they compile on equal terms
        module = baseline_engine(revision, Path(folder)) if which == "baseline" else (
            module_from((ROOT / ENGINE).read_text(), Path(folder) / "engine_current.py"))
        tiny = RequestArrays(arrival_s=np.zeros(2), prompt_tokens=np.array([8, 8]),
                             output_tokens=np.array([2, 2]))
        config = SimConfig(kv_blocks=10, step_cost=StepCost.fixed(1.0))
        _, runnable = _runnable(tiny, config)
        args = (module.Inputs(*_engine_inputs(runnable, config)),
                engine_params(config, _token_budget(runnable, config)),
                step_cost_params(config.step_cost))
        t0 = time.perf_counter()
        module.simulate_cluster(*args)
        print(f"compile {time.perf_counter() - t0:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile-repeats", type=int, default=3)
    parser.add_argument("--compile-only", choices=("baseline", "current"))
    parser.add_argument("--only", default="", help="deployments whose label contains this")
    args = parser.parse_args()
    if args.compile_only:
        compile_only(args.compile_only, args.baseline)
        return

    for which in ("baseline", "current"):
        runs = [compile_seconds(which, args.baseline) for _ in range(args.compile_repeats)]
        print(f"compile {which:<9} median {statistics.median(runs):6.2f} s  "
              f"({', '.join(f'{r:.2f}' for r in runs)})")

    trace = read_trace(args.trace)
    with tempfile.TemporaryDirectory() as folder:
        old, new = baseline_engine(args.baseline, Path(folder)), current_engine()
        t_first = True
        print(f"{'deployment':<26}{'base s':>9}{'new s':>9}{'new/base':>10}  identical")
        for label, case in CASES:
            if args.only not in label:
                continue
            old_args = engine_args(old, trace, case, args.model, args.gpu)
            new_args = engine_args(new, trace, case, args.model, args.gpu)
            if t_first:  # compile (or load from the cache) outside the timing
                old.simulate_cluster(*old_args)
                new.simulate_cluster(*new_args)
                t_first = False
            t_old, t_new = [], []
            same = True
            for _ in range(args.repeats):
                dt, out_old = cpu_seconds(old.simulate_cluster, old_args)
                t_old.append(dt)
                dt, out_new = cpu_seconds(new.simulate_cluster, new_args)
                t_new.append(dt)
                same = same and identical(out_old, out_new)
            m_old, m_new = statistics.median(t_old), statistics.median(t_new)
            print(f"{label:<26}{m_old:>9.3f}{m_new:>9.3f}{m_new / m_old:>10.3f}  {same}",
                  flush=True)


if __name__ == "__main__":
    main()
