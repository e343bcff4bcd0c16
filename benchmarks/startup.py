"""How fast the command line starts, as ratios against what it cannot do without, in one run.

- `trace --help`, `trace models` and a usage error against `python -c "import typer, rich"`:
  the CLI's own cost on top of its two libraries;
- `trace analyze sample_traces/chat.parquet` against reading that file into pandas.

Each cell is the median wall time of fresh processes; a command and its baseline run in
turns, so that other work on the machine slows both alike. The processes may write their compiled
bytecode (`__pycache__`), as an installed package has it, even when `PYTHONDONTWRITEBYTECODE`
is set (a source checkout then compiles every module of the package in every process);
`--as-is` keeps the environment as it is.

    python benchmarks/startup.py
    python benchmarks/startup.py --repeat 15
"""

from __future__ import annotations

import argparse
import os
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


def _wall_s(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False, env=env)
    return time.perf_counter() - t0


def _medians_s(cmd: list[str], base: list[str], repeat: int,
               env: dict[str, str]) -> tuple[float, float]:
    """Median wall seconds of `cmd` and of `base`, run in turns."""
    own, other = [], []
    for _ in range(repeat):
        own.append(_wall_s(cmd, env))
        other.append(_wall_s(base, env))
    return statistics.median(own), statistics.median(other)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="processes per cell (median)")
    parser.add_argument("--as-is", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE if it is set")
    args = parser.parse_args()
    env = dict(os.environ)
    if not args.as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    print("| command | s | baseline | baseline s | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, cmd, base, base_name in CASES:
        _medians_s(cmd, base, 1, env)  # warm the file cache, the bytecode and numba's cache
        own, other = _medians_s(cmd, base, args.repeat, env)
        print(f"| {name} | {own:.3f} | {base_name} | {other:.3f} | {own / other:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
