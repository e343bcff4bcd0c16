"""The progress line of a simulation says when the engine loop compiles first (a fresh install,
about 15 s once), instead of a bar standing still with no word."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.sim.run import COMPILING_STAGE, simulate_stage

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_numba_cache_says_the_engine_compiles_first(tmp_path: Path) -> None:
    # GIVEN an empty numba cache (numba reads NUMBA_CACHE_DIR when it is imported)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", "from yaotu_trace.sim.run import simulate_stage; "
                               "print(simulate_stage())"],
        env=env, capture_output=True, text=True, check=True)
    # THEN the stage names the compile, and this import compiled nothing
    assert done.stdout.strip() == COMPILING_STAGE
    assert not list((tmp_path / "numba").rglob("*.nbc"))


def test_once_compiled_the_stage_is_plain_simulating(tmp_path: Path) -> None:
    # GIVEN a run of the engine in this process (which compiles it into the cache if needed)
    sample = ROOT / "sample_traces" / "bursty.jsonl"
    assert main(["simulate", str(sample), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--out", str(tmp_path / "s.parquet"), "-q"]) == ExitCode.OK
    # THEN the next run is announced as a simulation only
    assert simulate_stage() == "simulating"
