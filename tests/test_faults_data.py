"""Pathological inputs: a clock whose span would size memory, and duplicate column names.

The commands that could once exhaust memory run in a child process under a 2 GiB address-space
cap, so that a regression fails here instead of taking the machine down.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from diag_factories import make_input, thresholds

from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.axes.queueing.metrics import (
    MIN_GRID_WINDOWS,
    grid_limit,
    request_timing,
    windows_of,
)
from yaotu_trace.diagnosis.ledger import _busiest_window_sum
from yaotu_trace.errors import ExitCode

MEMORY_CAP_BYTES = 2 * 2**30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def run_capped(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`trace ARGS` in a child process that cannot map more than 2 GiB."""
    return subprocess.run([sys.executable, "-m", "yaotu_trace", *args], cwd=cwd,
                          preexec_fn=_capped, capture_output=True, text=True, timeout=600,
                          env={"COLUMNS": "100", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
                          check=False)


def far_rows(far_s: float, n: int = 59, timed: bool = True) -> list[dict[str, object]]:
    """`n` requests a second apart from 0 s, then one at `far_s`; each served in 2 s."""
    rows: list[dict[str, object]] = []
    for t in [*map(float, range(n)), far_s]:
        row: dict[str, object] = {"arrival_s": t, "prompt_len": 100, "output_len": 20}
        if timed:
            row.update(scheduled_s=t + 0.5, first_token_s=t + 0.7, finish_s=t + 2.0)
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- the load grid follows the data -------------------------------------------------------


def test_grid_limit_is_the_floor_or_four_windows_per_request():
    assert grid_limit(60) == MIN_GRID_WINDOWS
    assert grid_limit(1_000_000) == 4_000_000


def test_windows_of_a_far_request_stay_within_the_limit_in_whole_window_multiples():
    inp = make_input({k: [r[k] for r in far_rows(1e7)]
                      for k in ("arrival_s", "prompt_len", "output_len", "finish_s")})
    timing = request_timing(inp, [])
    grid = windows_of(timing, 5.0)
    assert grid.count <= MIN_GRID_WINDOWS
    assert grid.width_s % 5.0 == 0 and grid.width_s > 5.0
    assert grid.t0_s + grid.count * grid.width_s >= 1e7 + 2.0  # the last finish is covered


def test_windows_of_a_short_trace_keep_window_s():
    inp = make_input({k: [r[k] for r in far_rows(100.0)]
                      for k in ("arrival_s", "prompt_len", "output_len", "finish_s")})
    grid = windows_of(request_timing(inp, []), 5.0)
    assert (grid.width_s, grid.count) == (5.0, 21)


def test_queueing_notes_the_widened_windows():
    columns = {k: [r[k] for r in far_rows(1e7)] for k in far_rows(0.0, 1)[0]}
    result = analyze_queueing(make_input(columns), thresholds())
    assert result.metrics.window_s > 5.0
    assert result.metrics.windows is None or result.metrics.windows <= MIN_GRID_WINDOWS
    assert any("load windows are" in n and "window_s 5 s" in n for n in result.notes)


def spread_rows(span_s: float, n: int = 60) -> list[dict[str, object]]:
    """`n` requests evenly over `span_s`, each served in 2 s."""
    return [{"arrival_s": t, "prompt_len": 100, "output_len": 20, "scheduled_s": t + 0.5,
             "first_token_s": t + 0.7, "finish_s": t + 2.0}
            for t in np.linspace(0.0, span_s, n).tolist()]


@pytest.mark.parametrize("command", ["diagnose", "report"])
@pytest.mark.parametrize("rows", [far_rows(1e7), spread_rows(9e11)], ids=["far", "spread"])
def test_a_long_span_runs_in_bounded_memory(command: str, rows: list[dict[str, object]],
                                            tmp_path: Path):
    # GIVEN 60 requests over 116 days (one far from the rest) or over 9e11 s (before: 1.8e11
    # windows of 5 s, a 1.31 TiB allocation and exit 4)
    write_jsonl(tmp_path / "t.jsonl", rows)
    out = "r.html" if command == "report" else "r.txt"
    # WHEN the command runs under a 2 GiB cap
    done = run_capped([command, "t.jsonl", "-o", out], tmp_path)
    # THEN it finishes, and diagnose says the windows were widened
    assert done.returncode == ExitCode.OK, done.stderr
    if command == "diagnose":
        assert "load windows are" in (tmp_path / out).read_text(encoding="utf-8")


def test_the_busiest_window_is_summed_over_the_windows_that_hold_a_time():
    # 5 s windows from 0: {0, 1} hold 3, {6} holds 4 and the one at 1e11 s holds 8; the
    # 2e10 empty windows between them are never allocated.
    times = np.array([0.0, 1.0, 6.0, 1e11])
    assert _busiest_window_sum(times, np.array([1.0, 2.0, 4.0, 8.0]), 5.0) == 8.0
    assert _busiest_window_sum(times[:3], np.array([1.0, 2.0, 4.0]), 5.0) == 4.0
    assert _busiest_window_sum(np.zeros(0), np.zeros(0), 5.0) == 0.0
