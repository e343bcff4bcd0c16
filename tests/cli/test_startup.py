"""An instant CLI: help, the catalog and usage errors load none of the analysis libraries, and
a trace without prompt content loads no compiled replay.

The time is measured in benchmarks/startup.py; this test keeps the cause from coming back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHILD_TIMEOUT_S

HEAVY = ("numpy", "pandas", "pyarrow", "numba")
PROBE = ("import contextlib, io, json, sys\n"
         "from yaotu_trace.cli import main\n"
         "quiet = io.StringIO()\n"
         "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
         "    main(sys.argv[1:])\n"
         f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")


@pytest.mark.parametrize("args", [["--help"], ["models"], ["replay", "--help"],
                                  ["replay", "x", "--block-size", "0"], ["analyse", "x"]])
def test_no_analysis_library_is_loaded(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          check=True, timeout=CHILD_TIMEOUT_S)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_trace_without_content_loads_no_compiled_replay(tmp_path) -> None:
    """Lengths only (as the Azure traces): no prefix replay to run, so no numba to load."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,10,5\n1.5,20,3\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", PROBE, "analyze", str(trace)],
                          capture_output=True, text=True, check=True, timeout=CHILD_TIMEOUT_S)
    assert "numba" not in json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["diagnose"], ["replay"], ["sweep"],
                                  ["check", "--fail-on", "bottleneck"]])
def test_a_small_trace_loads_no_compiled_replay(tmp_path, args: list[str]) -> None:
    """A small block-id trace (Mooncake's format) replays in numpy: a fresh install has no
    kernel to compile, and a warm run none to load (docs/performance.md)."""
    trace = tmp_path / "small.jsonl"
    lines = [json.dumps({"timestamp": 100 * i, "input_length": 512 * (i % 4 + 1) - 7,
                         "output_length": 20,
                         "hash_ids": [0, *range(10 * i + 1, 10 * i + i % 4 + 1)]})
             for i in range(40)]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", PROBE, args[0], str(trace), *args[1:]],
                          capture_output=True, text=True, check=True, timeout=CHILD_TIMEOUT_S)
    assert "numba" not in json.loads(done.stdout.strip().splitlines()[-1])


def test_the_ctrl_c_handler_comes_before_typing() -> None:
    """`trace` installs its handler once `yaotu_trace.cli` is imported; `typing` and `re` (most
    of that time, before) are left for later, so a Ctrl-C at start-up is exit 130, silent."""
    probe = ("import sys\nbefore = set(sys.modules)\nimport yaotu_trace.cli\n"
             "print(sorted({'typing', 're'} & (set(sys.modules) - before)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=CHILD_TIMEOUT_S, cwd=Path(__file__).parents[2])
    assert done.stdout.strip() == "[]"
