"""`--calibrate`: the command reads the step log, the simulator fits its step time on the log it
is handed and never opens the file itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest.load import read_step_logs
from yaotu_trace.sim.scenario import Scenario, resolve_scenario
from yaotu_trace.sim.summary import run_scenario

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
STEPS = SAMPLES / "diag-kv-churn.steps.parquet"
BASE = Scenario(model="Llama-3.1-8B", gpu="H100-SXM")


def _log(a_s: float, b_s: float, c_s: float) -> StepLog:
    """Steps whose durations are exactly a + b·prefill_tokens + c·context (KV blocks × 16)."""
    rng = np.random.default_rng(0)
    prefill = rng.integers(0, 4000, 50).astype(float)
    blocks = rng.integers(10, 900, 50).astype(float)
    start = np.arange(50, dtype=float)
    return StepLog.from_frame(pd.DataFrame({
        "start_s": start, "end_s": start + a_s + b_s * prefill + c_s * blocks * 16,
        "prefill_tokens": prefill, "kv_blocks_used": blocks}), "made.csv")


def test_the_fit_is_made_on_the_log_handed_in() -> None:
    # The path names no file: the log the command read is the one used.
    scenario = BASE.merged(Scenario(calibrate="not/read.parquet"))
    resolved = resolve_scenario(scenario, {"not/read.parquet": _log(0.004, 2e-5, 1e-7)})
    assert resolved.calibration is not None
    fit = resolved.calibration
    assert (fit.a_s, fit.b_s_per_prefill_token, fit.c_s_per_context_token) == pytest.approx(
        (0.004, 2e-5, 1e-7))
    assert fit.steps == 50 and fit.context_source == "kv_blocks_used × 16"


def test_the_simulator_asks_for_the_log_rather_than_reading_it() -> None:
    with pytest.raises(ValueError, match=r"--calibrate not/read\.parquet: pass the step log"):
        resolve_scenario(BASE.merged(Scenario(calibrate="not/read.parquet")))


def test_a_run_uses_the_fitted_step_time() -> None:
    table = pd.DataFrame({"arrival_s": [0.0, 0.5], "prompt_len": [100, 200],
                          "output_len": [3, 3]})
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "t")
    run = run_scenario(trace, BASE.merged(Scenario(calibrate="x")), {"x": _log(0.01, 0, 0)})
    assert run.summary.calibration is not None
    # Every step takes the fitted 10 ms: 3 tokens per request, one step each.
    assert run.summary.e2e_s.p50 == pytest.approx(0.03, rel=0.05)


def test_the_command_reads_each_log_once_and_names_the_option(tmp_path: Path) -> None:
    logs = read_step_logs([str(STEPS), None, str(STEPS)], "--calibrate")
    assert list(logs) == [str(STEPS)] and logs[str(STEPS)].path == str(STEPS)
    missing = tmp_path / "none.parquet"
    with pytest.raises(TraceReadError, match="no such step log; check the --calibrate path"):
        read_step_logs([str(missing)], "--calibrate")
