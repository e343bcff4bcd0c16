"""What the benchmarks share: running `trace` in a fresh process and reading its `--stats`;
loading a module as it was at a git revision, to time it against the working tree's."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
STATS = re.compile(r"stats: ([\d.]+) s elapsed, peak RSS ([\d.]+) GiB"
                   r"(?: \(largest worker process ([\d.]+) GiB\))?")


def best_of(run: Callable[[], Any], repeat: int, *, warm: bool = True) -> tuple[float, Any]:
    """The fastest of `repeat` timed calls of `run` (after one untimed call when `warm`: the
    compiled kernels loaded, the file cached), in seconds, and the last call's value."""
    if warm:
        run()
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = run()
        best = min(best, time.perf_counter() - t0)
    return best, value


def best_in_turns(runs: list[Callable[[], Any]], repeat: int) -> list[tuple[float, Any]]:
    """`best_of` for several calls timed in turns (after one untimed call each), so that a
    change of the machine's load slows them alike and their ratios hold: per call its
    fastest time in seconds and its last value."""
    values = [run() for run in runs]
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            t0 = time.perf_counter()
            values[i] = run()
            best[i] = min(best[i], time.perf_counter() - t0)
    return list(zip(best, values, strict=True))


def whole_read(patch: str) -> list[str]:
    """Interpreter arguments that run the CLI after `patch` (Python statements), for a
    baseline that switches one streaming path off."""
    return ["-c", f"import sys; {patch}; from yaotu_trace.cli import main; "
                  "sys.exit(main(sys.argv[1:]))"]


def run_trace(args: list[str], head: list[str] | None = None) -> dict[str, Any]:
    """One fresh `trace ARGS --stats` process (`head` replaces `-m yaotu_trace`): wall
    seconds, the peak RSS it reports (its own and its largest worker's) and its stdout."""
    cmd = [sys.executable, *(head or ["-m", "yaotu_trace"]), *args, "--stats"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    match = STATS.search(proc.stderr)
    return {"wall_s": wall, "returncode": proc.returncode, "ok": proc.returncode == 0,
            "peak_gib": float(match.group(2)) if match else None,
            "worker_gib": float(match.group(3)) if match and match.group(3) else None,
            "out": proc.stdout,
            "error": proc.stderr.strip().splitlines()[-2:] if proc.returncode else None}


def cell(result: dict[str, Any] | None, key: str, digits: int) -> str:
    """A table cell: the value, '–' when unknown, '(failed)' when the run failed."""
    if result is None or result[key] is None:
        return "–"
    return f"{result[key]:.{digits}f}" + ("" if result["ok"] else " (failed)")


def ratio(baseline: dict[str, Any] | None, ours: dict[str, Any] | None, key: str) -> str:
    """baseline / ours as 'N.N×', or '–'."""
    if not baseline or not ours or not baseline[key] or not ours[key]:
        return "–"
    return f"{baseline[key] / ours[key]:.1f}×"


def source_at(revision: str, path: str) -> str:
    """The text of `path` (relative to the repository) as it was at git `revision`."""
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def module_from(source: str, path: Path) -> ModuleType:
    """`source` written to `path` and imported as a module of its own (numba caches it apart),
    so that two versions of one module can run side by side."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: a dataclass looks its module up there, and numba's cache
    # imports it by name to load a compiled function back.
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def module_at(revision: str, path: str, folder: Path, stem: str) -> ModuleType:
    """The module at `path` as it was at `revision`, imported from `folder/stem.py`."""
    return module_from(source_at(revision, path), folder / f"{stem}.py")
