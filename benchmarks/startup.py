"""How fast the command line starts, as ratios against what it cannot do without, in one run.

- `trace --help`, `trace models` and a usage error against `python -c "import typer, rich"`:
  the CLI's own cost on top of its two libraries;
- `trace analyze sample_traces/chat.parquet` against reading that file into pandas.

Each cell is the median wall time of fresh processes.

    python benchmarks/startup.py
    python benchmarks/startup.py --repeat 15
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import ROOT  # type: ignore[import-not-found]

SAMPLE = ROOT / "sample_traces" / "chat.parquet"
TRACE = [sys.executable, "-m", "yaotu_trace"]
CASES = [
    ("trace --help", [*TRACE, "--help"], [sys.executable, "-c", "import typer, rich"],
     "import typer, rich"),
    ("trace models", [*TRACE, "models"], [sys.executable, "-c", "import typer, rich"],
     "import typer, rich"),
    ("trace replay X --block-size 0 (usage error)", [*TRACE, "replay", "x", "--block-size", "0"],
     [sys.executable, "-c", "import typer, rich"], "import typer, rich"),
    ("trace analyze sample_traces/chat.parquet", [*TRACE, "analyze", str(SAMPLE)],
     [sys.executable, "-c", f"import pandas; pandas.read_parquet({str(SAMPLE)!r})"],
     "pandas.read_parquet"),
]


def _median_s(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="processes per cell (median)")
    args = parser.parse_args()
    print("| command | s | baseline | baseline s | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, cmd, base, base_name in CASES:
        _median_s(cmd, 1)  # warm the file cache and numba's
        own, other = _median_s(cmd, args.repeat), _median_s(base, args.repeat)
        print(f"| {name} | {own:.3f} | {base_name} | {other:.3f} | {own / other:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
