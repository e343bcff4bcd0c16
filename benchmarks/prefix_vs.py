"""The prefix replay's compiled kernels against their own past: CPU time and identical results.

Loads `exact_vllm.py`, `exact_sglang.py` and `optimal.py` as they were at a git revision
(default `main`) next to the working tree's, runs both through their public entry points on
the same block chains (the Mooncake conversation trace and the larger RAGPulse trace, at a few
capacities) and checks that every result is identical. Only the kernel is timed (CPU seconds
of `_vllm_pool`, `_radix_replay` or `_belady`, wrapped where the entry point calls it), the two
versions alternately, the median of the repeats; the first call of each compiles outside the
timing.

    python benchmarks/prefix_vs.py
    python benchmarks/prefix_vs.py --baseline main --repeats 7 --only vllm
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from common import ROOT, module_from, source_at  # type: ignore[import-not-found]

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix import effective_rules
from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.prepare import prepare

TRACES = ROOT.parent / "shared" / "traces"
DEFAULT_TRACES = (TRACES / "mooncake" / "conversation_trace.jsonl",
                  TRACES / "ragpulse" / "0_trace.jsonl")
# kernel: (module path, kernel name, preset whose chains it replays)
KERNELS = {
    "vllm": ("yaotu_trace/prefix/kernels/exact_vllm.py", "_vllm_pool", "vllm"),
    "sglang": ("yaotu_trace/prefix/kernels/exact_sglang.py", "_radix_replay", "sglang"),
    "optimal": ("yaotu_trace/prefix/kernels/optimal.py", "_belady", "vllm"),
}
# A baseline from before the kernels moved to prefix/kernels/ is read from its old path, and
# its imports of moved modules are pointed at their place now.
MOVED_IMPORTS = (
    ("from yaotu_trace.prefix.blocks import BlockChains",
     "from yaotu_trace.prefix.kernels.chains import BlockChains"),
    ("from yaotu_trace.prefix.result import", "from yaotu_trace.prefix.kernels.result import"),
)
# capacities as shares of the distinct blocks: small, middling, all but the tail
SHARES = (0.02, 0.125, 0.5)
OPTIMAL_CACHES = (1, 4)  # one global cache, and four round-robin ones


@dataclass
class Timed:
    """A module whose kernel records the CPU seconds of each call."""

    module: ModuleType
    seconds: list[float]


def timed(module: ModuleType, kernel: str) -> Timed:
    """Wrap `module.kernel` (looked up at call time by the entry point) with a CPU timer."""
    inner = getattr(module, kernel)
    out = Timed(module, [])

    def wrapper(*args: Any) -> Any:
        t0 = time.process_time()
        result = inner(*args)
        out.seconds.append(time.process_time() - t0)
        return result

    setattr(module, kernel, wrapper)
    return out


@cache
def prepared(path: Path, preset: str) -> tuple[BlockChains, bool]:
    """The block chains of the trace at `path` under `preset`, and whether it touches head
    first."""
    trace = read_trace(path)
    rules, _, _ = effective_rules(trace, preset)
    return prepare(trace).chains(rules), rules.touch_order == "head-first"


def baseline(revision: str, path: str, folder: Path, stem: str) -> ModuleType:
    """The kernel module at `path` as it was at `revision`, imported from `folder/stem.py`."""
    try:
        source = source_at(revision, path)
    except subprocess.CalledProcessError:  # older than prefix/kernels/
        source = source_at(revision, path.replace("prefix/kernels/", "prefix/"))
    for old, new in MOVED_IMPORTS:
        source = source.replace(old, new)
    return module_from(source, folder / f"{stem}.py")


def current(path: str) -> ModuleType:
    """The working tree's module, as the package imports it."""
    import importlib

    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def cases(kernel: str, chains: BlockChains, head_first: bool) -> list[tuple[str, Callable]]:
    """(label, call(module) -> comparable result) for each capacity of `kernel`."""
    n = chains.num_requests
    out: list[tuple[str, Callable]] = []
    for share in SHARES:
        cap = max(2, int(chains.num_distinct * share))
        if kernel == "vllm":
            out.append((f"{cap:,} blocks", lambda m, c=cap: _fields(m.replay_vllm(chains, c))))
        elif kernel == "sglang":
            out.append((f"{cap:,} pages", lambda m, c=cap: _fields(m.replay_sglang(chains, c))))
        else:
            for k in OPTIMAL_CACHES:
                codes = np.arange(n, dtype=np.int64) % k
                out.append((f"{cap:,} blocks × {k}",
                            lambda m, c=cap, k=k, codes=codes: m.optimal_replay(
                                chains, codes, k, c, head_first)))
    return out


def _fields(result: Any) -> tuple:
    return (result.hit_blocks, result.hit_tokens, result.evicted_blocks,
            result.inserted_blocks, result.rejected_requests)


def identical(a: tuple, b: tuple) -> bool:
    """Bit-identity of two result tuples."""
    return len(a) == len(b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, action="append",
                        help="a trace to replay (repeatable; default: Mooncake conversation "
                             "and RAGPulse)")
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--only", default="", help="kernels whose name contains this")
    args = parser.parse_args()

    print(f"{'kernel':<9}{'trace':<26}{'capacity':<22}{'base ms':>9}{'new ms':>9}"
          f"{'new/base':>10}  identical")
    with tempfile.TemporaryDirectory() as folder:
        for kernel, (path, name, preset) in KERNELS.items():
            if args.only not in kernel:
                continue
            old = timed(baseline(args.baseline, path, Path(folder), f"{kernel}_baseline"), name)
            new = timed(current(path), name)
            for trace_path in args.trace or DEFAULT_TRACES:
                chains, head_first = prepared(trace_path, preset)
                for label, call in cases(kernel, chains, head_first):
                    call(old.module)  # compile (or load from the cache) outside the timing
                    call(new.module)
                    old.seconds.clear()
                    new.seconds.clear()
                    same = True
                    for _ in range(args.repeats):
                        a = call(old.module)
                        b = call(new.module)
                        same = same and identical(a, b)
                    m_old = statistics.median(old.seconds)
                    m_new = statistics.median(new.seconds)
                    print(f"{kernel:<9}{trace_path.name[:25]:<26}{label:<22}{m_old * 1e3:>9.2f}"
                          f"{m_new * 1e3:>9.2f}{m_new / m_old:>10.3f}  {same}", flush=True)


if __name__ == "__main__":
    main()
