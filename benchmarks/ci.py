"""Fast where users run it: a fresh install in CI, a mid-size trace, against what users compare.

In one run, as ratios, each cell the median wall time of fresh processes (a command and what it
is compared with run in turns, so other work on the machine slows both alike):

- first run after a fresh install against a warm run, for `analyze`, `diagnose`, `check` and
  `replay`: "fresh" is numba's cache empty (`NUMBA_CACHE_DIR` set to a new empty folder for
  that one process), as in a CI job without a cache; the bytecode is there, as pip writes it at
  install time (the benchmark compiles the measured tree's modules first, as pip does, so that
  `PYTHONDONTWRITEBYTECODE` in the environment does not leave every run compiling them). "warm"
  reuses one cache folder that an earlier run filled;
- `analyze`, `sweep` and `diagnose` (the goal's three) and `check --fail-on bottleneck` (what a
  CI job runs) against a fresh Python process that reads the same file with pyarrow
  (`pyarrow.json.read_json`), after the floor of a command that reads a trace into pandas: a
  fresh process that imports pandas and does nothing else;
- the whole capacity curve (`trace sweep --preset mooncake`) against kvcache-simulator's 6
  budgets (`pip install kvcache-simulator` into any venv and pass `--kvsim PATH`; skipped
  when absent).

The default trace is the public Mooncake conversation trace (12,031 requests, 3 MB of JSONL);
`--large` adds the first-run rows on a trace above the numpy passes' limits (RAGPulse,
1.3e6 blocks), where the compiled kernels are needed; `--tiers` those of runs with a tier below
the GPU pool, whose pass is compiled on a first run; `--engines` those of runs that compile an
engine's model: vLLM's exact pool with its residency, and the simulator. Every row prints
the commands that reproduce it.

    python benchmarks/ci.py
    python benchmarks/ci.py --repeat 5 --kvsim /tmp/venv-kvsim/bin/kvcache-simulator --large
    git archive REV | tar -x -C /tmp/rev && python benchmarks/ci.py --tree /tmp/rev
    python benchmarks/ci.py --only read --only kvsim --kvsim PATH --before /tmp/rev
    python benchmarks/ci.py --only first --tiers --repeat 1
    python benchmarks/ci.py --only first --engines --repeat 1 --tree /tmp/rev
"""

from __future__ import annotations

import argparse
import compileall
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT  # type: ignore[import-not-found]

SHARED = ROOT.parent / "shared" / "traces"
MOONCAKE = SHARED / "mooncake" / "conversation_trace.jsonl"
RAGPULSE = SHARED / "ragpulse" / "0_trace.jsonl"
TRACE = [sys.executable, "-m", "yaotu_trace"]
FIRST_RUN = {
    "analyze": ["analyze"],
    "diagnose": ["diagnose"],
    "check": ["check", "--fail-on", "bottleneck"],
    "replay": ["replay"],
}
# `--tiers`: the runs that compile a tier's pass (or, for `diagnose --kv-capacity`, the CPU
# tier it sizes) on top of the GPU pool's replay, the sizes of docs/ci.md.
FIRST_RUN_TIERS = {
    "replay, vLLM CPU tier": ["replay", "--preset", "vllm", "--capacity", "8544",
                              "--tier", "cpu=34179blocks"],
    "replay, vLLM ARC CPU tier": ["replay", "--preset", "vllm", "--capacity", "8544",
                                  "--tier", "cpu=34179blocks", "--tier-policy",
                                  "vllm-native-arc"],
    "replay, LMCache CPU tier": ["replay", "--preset", "vllm", "--capacity", "8544",
                                 "--tier", "cpu=34179blocks", "--tier-policy", "lmcache"],
    "replay, SGLang HiCache": ["replay", "--preset", "sglang", "--capacity", "200000",
                               "--tier", "cpu=1000000blocks", "--tier-policy", "write_through"],
    "diagnose --kv-capacity": ["diagnose", "--model", "llama-3.1-70b", "--gpu", "H100",
                               "--kv-capacity", "1382400tok"],
}
# `--engines`: the runs that compile an engine's model (vLLM's block pool, the Belady bound of
# the waterfall and the residency pass; the simulator's loop).
FIRST_RUN_ENGINES = {
    "replay, vLLM pool --residency": ["replay", "--preset", "vllm", "--capacity", "8544",
                                      "--residency"],
    "simulate": ["simulate", "--model", "Llama-3.1-8B", "--gpu", "H100", "--out",
                 os.path.join(tempfile.gettempdir(), "yaotu-ci-simulated.parquet")],
}
TREE = [ROOT]  # where `python -m yaotu_trace` finds the package (`--tree`)
BEFORE: list[Path] = []  # a tree measured in the same turns (`--before`)
AGAINST_READ = {"analyze": ["analyze"], "sweep": ["sweep"], "diagnose": ["diagnose"],
                "check": ["check", "--fail-on", "bottleneck"]}


def _wall_s(cmd: list[str], env: dict[str, str] | None = None, tree: Path | None = None
            ) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree or TREE[0], capture_output=True, check=False,
                          env=env if env is not None else dict(os.environ))
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # check exits 1 when a check fails: still a full run
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}): "
                         f"{proc.stderr.decode()[-400:]}")
    return wall


def _shown(row: str) -> str:
    """Print a row as soon as it is measured (a long run shows its progress)."""
    print(row, flush=True)
    return row


def _command(args: list[str], trace: Path) -> list[str]:
    return [*TRACE, args[0], str(trace), *args[1:]]


def first_runs(trace: Path, repeat: int, tmp: Path,
               commands: dict[str, list[str]] = FIRST_RUN) -> list[str]:
    """Rows of first run (empty numba cache) against warm run, per command."""
    rows = []
    warm_dir = tmp / "warm-cache"
    warm = dict(os.environ, NUMBA_CACHE_DIR=str(warm_dir))
    for k_name, (name, args) in enumerate(commands.items()):
        cmd = _command(args, trace)
        _wall_s(cmd, warm)  # fills the warm cache (and the file cache)
        cold_s, warm_s = [], []
        for k in range(repeat):
            fresh = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / f"fresh-{k_name}-{k}"))
            cold_s.append(_wall_s(cmd, fresh))
            warm_s.append(_wall_s(cmd, warm))
        c, w = statistics.median(cold_s), statistics.median(warm_s)
        rows.append(_shown(f"| first run: {name} {trace.name} | {c:.2f} | warm run | {w:.2f} | "
                    f"{c / w:.2f}× | `NUMBA_CACHE_DIR=$(mktemp -d) trace {shlex.join(args)} "
                    f"{trace}` |"))
    return rows


def against_read(trace: Path, repeat: int) -> list[str]:
    """Rows of a warm command against reading the file with pyarrow in a fresh process."""
    read = [sys.executable, "-c",
            f"import pyarrow.json as j; j.read_json({str(trace)!r})"]
    rows = []
    # The floor while the commands read through pandas: importing it, and nothing more.
    pandas = [sys.executable, "-c", "import pandas"]
    alone, base = [], []
    for _ in range(repeat):
        alone.append(_wall_s(pandas))
        base.append(_wall_s(read))
    a, b = statistics.median(alone), statistics.median(base)
    rows.append(_shown(f"| import pandas (the floor) | {a:.2f} | pyarrow.json.read_json | "
                       f"{b:.2f} | {a / b:.2f}× | {'– | – | ' if BEFORE else ''}"
                       "`python -c 'import pandas'` |"))
    for name, args in AGAINST_READ.items():
        cmd = _command(args, trace)
        _wall_s(cmd)
        ours, base, before = [], [], []
        for _ in range(repeat):
            ours.append(_wall_s(cmd))
            base.append(_wall_s(read))
            before += [_wall_s(cmd, tree=tree) for tree in BEFORE]
        o, b = statistics.median(ours), statistics.median(base)
        rows.append(_shown(f"| {name} {trace.name} | {o:.2f} | pyarrow.json.read_json | "
                           f"{b:.2f} | {o / b:.2f}× | {_before(before, b)}"
                           f"`trace {shlex.join(args)} {trace}` |"))
    return rows


def _before(before: list[float], base_s: float) -> str:
    """The cells of the `--before` tree: its seconds and its ratio to the same baseline."""
    if not BEFORE:
        return ""
    s = statistics.median(before)
    return f"{s:.2f} | {s / base_s:.2f}× | "


def against_kvsim(trace: Path, kvsim: str, repeat: int, tmp: Path) -> list[str]:
    """The whole curve against kvcache-simulator's 6 budgets."""
    ours_cmd = [*TRACE, "sweep", str(trace), "--preset", "mooncake", "--format", "json"]
    theirs = [kvsim, "run", "--trace", str(trace), "--block-size", "512", "--model",
              "llama-3.1-70b", "--budgets-gib", "1,2,4,8,16,32", "--policies", "lru",
              "--no-progress", "--format", "json", "--output", str(tmp / "kvsim.json")]
    _wall_s(ours_cmd)
    _wall_s(theirs)  # compiles its C++ core on first use
    ours, base, before = [], [], []
    for _ in range(repeat):
        ours.append(_wall_s(ours_cmd))
        base.append(_wall_s(theirs))
        before += [_wall_s(ours_cmd, tree=tree) for tree in BEFORE]
    o, b = statistics.median(ours), statistics.median(base)
    return [_shown(f"| sweep --preset mooncake (whole curve) | {o:.2f} | kvcache-simulator, "
            f"6 budgets | {b:.2f} | {o / b:.2f}× | {_before(before, b)}"
            f"`trace sweep {trace} --preset mooncake -f json` vs "
            f"`kvcache-simulator run --trace {trace} --block-size 512 --model llama-3.1-70b "
            "--budgets-gib 1,2,4,8,16,32 --policies lru` |")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=MOONCAKE)
    parser.add_argument("--repeat", type=int, default=3, help="processes per cell (median)")
    parser.add_argument("--kvsim", default=shutil.which("kvcache-simulator"),
                        help="the kvcache-simulator executable")
    parser.add_argument("--large", action="store_true",
                        help="add first-run rows on RAGPulse (compiled kernels)")
    parser.add_argument("--tiers", action="store_true",
                        help="add first-run rows of runs with a tier below the GPU (and "
                             "diagnose --kv-capacity), which compile the tier's pass")
    parser.add_argument("--engines", action="store_true",
                        help="add first-run rows of runs that compile an engine's model "
                             "(vLLM's pool with --residency, the simulator)")
    parser.add_argument("--only", choices=("first", "read", "kvsim"), action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--before", type=Path,
                        help="another source tree (e.g. a `git archive` of the revision a "
                             "change started from) measured in the same turns as this one: "
                             "its seconds and ratio beside each row of --only read and kvsim")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="a source tree to measure instead of this one (e.g. a "
                             "`git archive` of an earlier revision), run from its folder")
    opts = parser.parse_args()
    TREE[0] = opts.tree
    BEFORE[:] = [opts.before] if opts.before else []
    if not opts.trace.exists():
        print(f"{opts.trace} is missing; pass --trace", file=sys.stderr)
        return 2
    parts = opts.only or ["first", "read", "kvsim"]
    # The bytecode an install writes (pip compiles every module): measured runs load it.
    for tree in (opts.tree, *BEFORE):
        compileall.compile_dir(tree / "yaotu_trace", quiet=1)
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.1f} at the start; median of "
          f"{opts.repeat} fresh processes per cell, in turns")
    print()
    before = " before s | before ratio |" if BEFORE else ""
    print(f"| run | s | against | s | ratio |{before} reproduce |")
    print(f"|---|---:|---|---:|---:|{'---:|---:|' if BEFORE else ''}---|")
    with tempfile.TemporaryDirectory(prefix="yaotu-ci-") as name:
        tmp = Path(name)
        rows: list[str] = []
        if "first" in parts:
            rows += first_runs(opts.trace, opts.repeat, tmp)
            if opts.large and RAGPULSE.exists():
                rows += first_runs(RAGPULSE, opts.repeat, tmp / "large")
            if opts.tiers:
                rows += first_runs(opts.trace, opts.repeat, tmp / "tiers", FIRST_RUN_TIERS)
            if opts.engines:
                rows += first_runs(opts.trace, opts.repeat, tmp / "engines", FIRST_RUN_ENGINES)
        if "read" in parts:
            rows += against_read(opts.trace, opts.repeat)
        if "kvsim" in parts and opts.kvsim:
            rows += against_kvsim(opts.trace, opts.kvsim, opts.repeat, tmp)
        elif "kvsim" in parts:
            rows.append(_shown("| sweep --preset mooncake | – | kvcache-simulator | – | – | "
                               "not installed: pip install kvcache-simulator, then --kvsim "
                               "PATH |"))
    print()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
