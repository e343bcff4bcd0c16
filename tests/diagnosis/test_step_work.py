"""A step log that computed fewer tokens than the trace's requests need of it is from another
run (yaotu_trace.data.step_work): refused, naming both files and both totals."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from diag_factories import make_trace

from yaotu_trace.data.telemetry_fit import fit_telemetry
from yaotu_trace.errors import ExitCode, TraceReadError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
RUNS = ("diag-kv-churn", "diag-burst", "diag-healthy", "diag-dispatch", "diag-long-prefill",
        "diag-prefix-recompute")


def test_another_runs_step_log_is_refused_with_both_totals(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The chat sample has no timing; the kv-churn log ends drained (1 request in flight), so
    all but one of the 579 chat requests arriving in its 0–112.6 s must be done in it: their
    output needs 100,033 decode tokens, the log computed 87,257."""
    code, out, err = run_cli(["diagnose", str(SAMPLES / "chat.parquet"), "--steps",
                              str(SAMPLES / "diag-kv-churn.steps.parquet")], capsys)
    assert code == ExitCode.INPUT and out == ""
    assert err.count("\n") == 1
    assert "diag-kv-churn.steps.parquet: the step log computes 87,257 decode tokens" in err
    assert "the 579 requests of" in err and "chat.parquet" in err
    assert "need at least 100,033" in err and "they are from different runs" in err


def test_a_timed_trace_is_checked_on_its_own_range() -> None:
    """diag-healthy's requests all finish by 61.2 s; the kv-churn log runs to 112.6 s, and its
    later steps (other requests') must not pay for the ones that are missing before."""
    from yaotu_trace.ingest import read_trace

    trace = read_trace(SAMPLES / "diag-healthy.parquet",
                       steps_path=SAMPLES / "diag-kv-churn.steps.parquet")
    with pytest.raises(TraceReadError, match=r"computes 52,797 prefill tokens in 0\.0–61\.2 s"):
        fit_telemetry(trace)


@pytest.mark.parametrize("name", RUNS)
def test_each_sample_accepts_its_own_step_log(name: str) -> None:
    """The simulator's own logs conserve work exactly (decode = Σ (output − 1) − preemptions,
    prefill = Σ (prompt − cached) + recompute)."""
    from yaotu_trace.ingest import read_trace

    trace = read_trace(SAMPLES / f"{name}.parquet",
                       steps_path=SAMPLES / f"{name}.steps.parquet")
    assert fit_telemetry(trace).trace.steps is not None


def _steps(decode: int, prefill: int, in_flight: int = 0) -> dict[str, list[object]]:
    return {"start_s": [0.0, 5.0], "end_s": [5.0, 10.0], "prefill_tokens": [prefill, 0],
            "decode_tokens": [0, decode], "num_running": [0, in_flight], "num_waiting": [0, 0]}


def _three(**extra: list[object]) -> dict[str, list[object]]:
    """Three requests arriving at 0, 1, 2 s with 11, 21, 31 output tokens: 10 + 20 + 30 = 60
    decode tokens after each first token."""
    return {"arrival_s": [0.0, 1.0, 2.0], "prompt_len": [100, 100, 100],
            "output_len": [11, 21, 31], **extra}


def test_decode_bound_without_timing_takes_the_smallest_done() -> None:
    # GIVEN no timing: with 1 request in flight at the end, at least 2 are done, the two
    # smallest need 10 + 20 = 30 decode tokens
    fit_telemetry(make_trace(_three(), steps=_steps(decode=30, prefill=300, in_flight=1)))
    with pytest.raises(TraceReadError, match=r"computes 29 decode tokens.*at least 30"):
        fit_telemetry(make_trace(_three(), steps=_steps(decode=29, prefill=300, in_flight=1)))
    # and with none in flight all 60 are needed (29 is under 2 % short of 30, so 58 passes)
    with pytest.raises(TraceReadError, match=r"at least 60"):
        fit_telemetry(make_trace(_three(), steps=_steps(decode=50, prefill=300)))
    fit_telemetry(make_trace(_three(), steps=_steps(decode=59, prefill=300)))


def test_preemptions_and_cached_tokens_lower_the_bound() -> None:
    # each preemption moves one token from decode to the recompute prefill: 60 − 3 = 57
    timed = _three(num_preemptions=[1, 1, 1])
    fit_telemetry(make_trace(timed, steps=_steps(decode=56, prefill=300)))
    # cached tokens are not prefilled: 3 × (100 − 40) = 180 prefill tokens needed
    cached = _three(cached_tokens=[40, 40, 40])
    fit_telemetry(make_trace(cached, steps=_steps(decode=60, prefill=180)))
    with pytest.raises(TraceReadError, match=r"computes 150 prefill tokens.*at least 180"):
        fit_telemetry(make_trace(cached, steps=_steps(decode=60, prefill=150)))


def test_more_work_than_needed_is_accepted() -> None:
    """Speculative decoding, requests from before the log, aborted work: more is fine."""
    fit_telemetry(make_trace(_three(), steps=_steps(decode=600, prefill=3000)))
