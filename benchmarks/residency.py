"""What `trace replay --residency` costs over the replay it explains.

Times `replay_trace_with_requests` on the same trace and rules with and without `explain`
(the residency pass follows the achieved replay's caches again, then the reuse-distance pass
and the summaries), in one process after a warm-up run that compiles the kernels, the best of
`--repeat`. Prints one table: seconds without, with, and the ratio.

    python benchmarks/residency.py
    python benchmarks/residency.py --capacity 2700 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import ROOT  # type: ignore[import-not-found]

from yaotu_trace.ingest import read_trace
from yaotu_trace.prefix.rules import effective_rules
from yaotu_trace.prefix.trace import replay_trace_with_requests

TRACES = (ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl",
          ROOT / "sample_traces" / "chat.parquet")


def _best(repeat: int, run) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    """Time both, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, nargs="+", default=[2700, 20000])
    parser.add_argument("--presets", nargs="+", default=["auto", "vllm"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'trace':<26} {'preset':<8} {'capacity':>9} {'replay s':>9} {'+residency s':>13} "
          f"{'ratio':>6}")
    for path in TRACES:
        if not Path(path).exists():
            print(f"{path.name:<26} skipped: not found")
            continue
        trace = read_trace(path)
        for preset in args.presets:
            try:
                rules, name, _ = effective_rules(trace, None if preset == "auto" else preset)
            except Exception as exc:  # a preset this trace's ids refuse
                print(f"{path.name:<26} {preset:<8} skipped: {exc}")
                continue
            for capacity in args.capacity:
                r = rules.with_(capacity_blocks=capacity)
                replay_trace_with_requests(trace, r, explain=True, waterfall=False)  # compile
                plain = _best(args.repeat, lambda r=r, tr=trace: replay_trace_with_requests(
                    tr, r, waterfall=False))
                explained = _best(args.repeat, lambda r=r, tr=trace: replay_trace_with_requests(
                    tr, r, waterfall=False, explain=True))
                print(f"{path.name:<26} {name:<8} {capacity:>9,} {plain:>9.3f} "
                      f"{explained:>13.3f} {explained / plain:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
