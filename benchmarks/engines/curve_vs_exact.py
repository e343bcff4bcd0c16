"""How far the one-pass capacity curve (the clean LRU model) is from the engine-exact replay.

`trace sweep` sweeps every capacity at once with LRU stack distances, which needs a stack
algorithm: the clean model is one, vLLM's block pool (partial blocks taken from the free queue
and returned to its head, duplicate copies, the null block) and SGLang's radix tree (whole-leaf
eviction, refreshed split nodes) are not. This script replays each trace under the `vllm` and
`sglang` presets at capacities from tight to ample, once with the preset's engine-exact
accounting and once with `--accounting clean` (which is what the curve gives at that capacity,
checked here too), and prints the difference in hit ratio points.

    python benchmarks/engines/curve_vs_exact.py
    python benchmarks/engines/curve_vs_exact.py --traces tests/fixtures/engines/trace_mixed.parquet
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from yaotu_trace.ingest.load import read_trace  # noqa: E402
from yaotu_trace.prefix import effective_rules, replay_trace  # noqa: E402
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
DEFAULT_TRACES = [
    ROOT / "tests" / "fixtures" / "engines" / "trace_mixed.parquet",
    ROOT / "tests" / "fixtures" / "engines" / "trace_sessions.parquet",
    ROOT / "sample_traces" / "chat.parquet",
    SHARED / "mooncake" / "conversation_trace.jsonl",
    SHARED / "mooncake" / "synthetic_trace.jsonl",
]
SHARES = (0.02, 0.05, 0.1, 0.2, 0.4, 0.7)  # of the blocks an unlimited cache ends up holding


def rows_for(path: Path, preset: str) -> list[tuple[str, ...]]:
    """One row per capacity: curve, clean replay, exact replay, difference, seconds."""
    trace = read_trace(path)
    block = 512 if "mooncake" in path.parts else None
    clean, _, notes = effective_rules(trace, preset, block_size_tokens=block,
                                      accounting="clean")
    exact, _, _ = effective_rules(trace, preset, block_size_tokens=block)
    _, curve = sweep_trace(trace, clean, CurveSectionSpec(preset=preset, points=2, notes=notes))
    full = int(curve.full_reuse_capacity_blocks)
    out = []
    for share in SHARES:
        capacity = max(int(full * share), 2)
        curve_ratio = float(curve.hit_ratio_at(np.array([capacity]))[0])
        r_clean = replay_trace(trace, clean.with_(capacity_blocks=capacity), preset=preset,
                               waterfall=False)
        t0 = time.perf_counter()
        r_exact = replay_trace(trace, exact.with_(capacity_blocks=capacity), preset=preset,
                               waterfall=False)
        seconds = time.perf_counter() - t0
        out.append((path.name, preset, f"{capacity:,}", f"{curve_ratio:.4f}",
                    f"{r_clean.hit_ratio:.4f}", f"{r_exact.hit_ratio:.4f}",
                    f"{100 * (r_exact.hit_ratio - curve_ratio):+.2f}", f"{seconds:.2f}"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="*", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args()
    head = ("trace", "preset", "capacity (blocks)", "curve", "replay clean", "replay exact",
            "exact − curve (points)", "exact s")
    rows = [head]
    for path in args.traces:
        if not path.exists():
            print(f"skipped (absent): {path}", file=sys.stderr)
            continue
        for preset in ("vllm", "sglang"):
            rows.extend(rows_for(path, preset))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
