"""Every compiled kernel and helper compiles once per kind of run.

Numba compiles a function once per signature it is called with, and a literal (`0`, `-1`) is
a signature of its own: a helper given `_lock_path(node, 1, …)` and `_lock_path(node, -1, …)`
compiles twice, and an int32 where an int64 came before does the same. Each such repeat costs
a user's first run (on a fresh install, in CI) up to a second of compiling. This runs the
replays that reach every tier pass and both engine-exact pools in one fresh process and asks
numba's dispatchers how many signatures each compiled (a pass given its lower tiers as arrays
or None compiles once for each on purpose, and counts once); a kernel legitimately given
arrays of two dtypes would show here too, and would be named. The process compiles into an
empty numba cache (a cached function loads without compiling its helpers, which would hide
them): about 45 s, so the test is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

_RUNS = [
    ["--preset", "vllm", "--capacity", "40", "--tier", "cpu=100blocks"],
    ["--preset", "vllm", "--capacity", "40", "--tier", "cpu=100blocks", "--tier",
     "disk=unlimited"],
    ["--preset", "vllm", "--capacity", "40", "--tier", "cpu=100blocks", "--tier-store-threshold",
     "2"],
    ["--preset", "vllm", "--capacity", "40", "--tier", "cpu=100blocks", "--tier-policy",
     "vllm-native-arc", "--tier", "disk=300blocks"],
    ["--preset", "vllm", "--capacity", "40", "--tier", "cpu=100blocks", "--tier-policy", "lmcache",
     "--tier", "disk=300blocks"],
    ["--preset", "sglang", "--capacity", "400", "--tier", "cpu=1000blocks", "--tier-policy",
     "write_through"],
    ["--preset", "sglang", "--capacity", "400", "--tier", "cpu=1000blocks", "--tier",
     "disk=2000blocks", "--tier-policy", "write_back"],
    ["--preset", "vllm", "--capacity", "40", "--residency"],
    ["--preset", "sglang", "--capacity", "400", "--residency"],
]

_PROBE = """
import contextlib, gc, io, json, sys
from numba.core.registry import CPUDispatcher
from yaotu_trace.cli import main
trace, runs = sys.argv[1], json.loads(sys.argv[2])
codes = []
for run in runs:
    with contextlib.redirect_stdout(io.StringIO()):
        codes.append(main(["replay", trace, *run, "--format", "json"]))
def kinds(d):
    # A pass given the tiers below, SGLang's storage or write_back's log as arrays, or None
    # without them, compiles once for each on purpose: one signature per kind of run. The
    # places where some signature has None are left out.
    sigs = [[str(a) for a in s] for s in d.signatures]
    optional = {i for s in sigs for i, a in enumerate(s) if a == "none"}
    return {tuple(a for i, a in enumerate(s) if i not in optional) for s in sigs}
twice = sorted(f"{d.py_func.__module__}.{d.py_func.__qualname__}: {len(kinds(d))}"
               for d in gc.get_objects()
               if isinstance(d, CPUDispatcher) and d.py_func.__module__.startswith("yaotu_trace")
               and len(kinds(d)) > 1)
compiled = sum(1 for d in gc.get_objects() if isinstance(d, CPUDispatcher) and d.signatures)
print(json.dumps({"codes": codes, "twice": twice, "compiled": compiled}))
"""


@pytest.mark.slow
def test_no_kernel_compiles_twice_across_the_replays_of_every_tier_policy(tmp_path: Path) -> None:
    """`tests/fixtures/engines/trace_mixed.parquet` through vLLM's pool (with its CPU tier
    alone, above an fs tier, with a store threshold, under ARC, under LMCache), SGLang's
    pool (its HiCache tree with and without storage) and both residency passes: every run
    succeeds, dozens of functions are compiled, and none with two signatures."""
    proc = subprocess.run([sys.executable, "-c", _PROBE,
                           str(FIXTURES / "engines" / "trace_mixed.parquet"), json.dumps(_RUNS)],
                          capture_output=True, text=True, check=False, timeout=900,
                          env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["codes"] == [0] * len(_RUNS)
    assert found["compiled"] >= 40  # the probe reached the kernels, not numpy fallbacks
    assert found["twice"] == []
