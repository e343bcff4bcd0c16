"""A step log or metrics export from another run is refused; one that partly overlaps the trace
is judged on the overlap only, with a note (yaotu_trace.data.telemetry_fit,
docs/diagnose.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli, shared_trace
from diag_factories import make_metrics, make_trace

from yaotu_trace import ingest
from yaotu_trace.commands.diagnose import diagnose_trace as diagnose
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.data.telemetry_fit import (
    MIN_OVERLAP_SHARE,
    UNIX_CLOCK_S,
    Span,
    fit_telemetry,
    overlap_share,
    trace_span,
)
from yaotu_trace.errors import ExitCode, TraceReadError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
CHURN = SAMPLES / "diag-kv-churn.parquet"
CHURN_STEPS = SAMPLES / "diag-kv-churn.steps.parquet"


def timed(n: int = 11, *, every_s: float = 100.0, start_s: float = 0.0, served_s: float = 1.0,
          **extra: list[object]) -> dict[str, list[object]]:
    """`n` requests, one every `every_s` from `start_s`, each served in `served_s`."""
    arrival = [start_s + every_s * i for i in range(n)]
    return {"arrival_s": arrival, "scheduled_s": arrival,
            "first_token_s": [a + served_s / 2 for a in arrival],
            "finish_s": [a + served_s for a in arrival],
            "prompt_len": [100] * n, "output_len": [10] * n, **extra}


def steps_over(lo: float, hi: float, k: int = 21, **extra: list[object]) -> dict[str, list]:
    """`k` one-second steps spread evenly from `lo` to `hi` (the last ends at `hi`)."""
    start = list(np.linspace(lo, hi - 1.0, k))
    return {"start_s": start, "end_s": [s + 1.0 for s in start], "num_running": [1] * k,
            "num_waiting": [0] * k, "prefill_tokens": [100] * k, "decode_tokens": [10] * k,
            **extra}


def notes_of(doc: dict) -> list[str]:
    return list(doc["input"]["notes"])


# -- the overlap share and its boundary ---------------------------------------------------------


def test_overlap_share_is_of_the_shorter_range() -> None:
    trace = Span(0.0, 1000.0)
    assert overlap_share(Span(900.0, 2000.0), trace) == pytest.approx(0.1)
    assert overlap_share(Span(100.0, 200.0), trace) == 1.0  # wholly inside: all of it shared
    assert overlap_share(Span(1000.0, 2000.0), trace) == 0.0  # touching ends share nothing
    assert overlap_share(Span(5.0, 5.0), trace) == 1.0  # an instant the trace holds
    assert overlap_share(Span(-5.0, -5.0), trace) == 0.0


@pytest.mark.parametrize(("steps_from", "refused"),
                         [(899.5, False), (900.0, False), (900.5, True)])
def test_the_refusal_threshold_is_a_tenth_of_the_shorter_range(steps_from: float,
                                                                refused: bool) -> None:
    # GIVEN a trace over 0–1000 s and a step log of 1000 s from `steps_from`: from 900 s they
    # share exactly 10 % (accepted), from 900.5 s 9.95 % (refused)
    trace = make_trace(timed(served_s=0.0), steps=steps_over(steps_from, steps_from + 1000.0))
    whole = trace_span(trace)
    assert whole == Span(0.0, 1000.0)
    span = Span(*trace.steps.span())  # type: ignore[union-attr]
    share = overlap_share(span, whole)
    assert (share < MIN_OVERLAP_SHARE) is refused
    if refused:
        with pytest.raises(TraceReadError, match="they are from different runs"):
            fit_telemetry(trace)
    else:
        fitted = fit_telemetry(trace)
        assert fitted.overlap is not None and len(fitted.overlap.requests) == 2


def test_a_step_log_from_another_run_is_refused_naming_both_ranges() -> None:
    trace = make_trace(timed(), steps=steps_over(1_000_000.0, 1_001_001.0))
    with pytest.raises(TraceReadError) as info:
        diagnose(trace)
    message = str(info.value)
    assert message == ("steps: step log covers 1000000.0–1001001.0 s but test covers "
                       "0.0–1001.0 s; they are from different runs (pass the step log of this "
                       "trace's run)")


def test_a_step_log_of_the_same_run_changes_nothing() -> None:
    trace = make_trace(timed(), steps=steps_over(0.0, 1001.0))
    fitted = fit_telemetry(trace)
    assert fitted.overlap is None and fitted.trace.notes == trace.notes
    assert fitted.trace.steps is trace.steps


def test_half_a_step_log_is_judged_on_the_overlap_with_a_note() -> None:
    # GIVEN a step log of the second half of the trace's run only
    trace = make_trace(timed(), steps=steps_over(500.0, 1001.0))
    fitted = fit_telemetry(trace)
    # THEN the timing axes read the six requests from 500 s on; prefix reuse keeps them all
    assert fitted.overlap is not None
    assert list(fitted.overlap.requests["arrival_s"]) == [500.0 + 100 * i for i in range(6)]
    assert fitted.overlap_axes == {"queueing", "kv_memory", "pd_interference"}
    assert fitted.trace.notes[-1] == (
        "the step log covers 50 % of the trace's time range (0.0–1001.0 s); the queueing, "
        "kv_memory and pd_interference axes are judged on 500.0–1001.0 s only (5 of 11 "
        "requests outside it left out)")
    doc = diagnose(trace).to_dict()
    assert fitted.trace.notes[-1] in notes_of(doc)
    queueing = next(a for a in doc["axes"] if a["name"] == "queueing")
    assert queueing["metrics"]["queue_time_s"]["count"] == 6
    # AND each panel judged on the overlap says so (the HTML report shows the panels' notes)
    for axis in doc["axes"]:
        assert (fitted.trace.notes[-1] in axis["notes"]) is (axis["name"] != "prefix_reuse")


def test_a_step_log_between_the_requests_is_refused() -> None:
    # GIVEN requests that each take an instant at 0, 100, ..., 1000 s and a step log of
    # 420–480 s: wholly inside the trace's range, yet no request ran while it was recorded
    trace = make_trace(timed(served_s=0.0), steps=steps_over(420.0, 480.0))
    with pytest.raises(TraceReadError) as info:
        fit_telemetry(trace)
    assert str(info.value) == ("steps: step log covers 420.0–480.0 s but no request of test "
                               "lies in it; they are from different runs (pass the step log of "
                               "this trace's run)")


def test_steps_beyond_the_trace_are_left_out() -> None:
    # GIVEN a step log that runs on for 1000 s after the trace's last request
    trace = make_trace(timed(), steps=steps_over(0.0, 2001.0, k=41))
    fitted = fit_telemetry(trace)
    assert fitted.overlap is None  # every request lies in the step log's range
    kept = fitted.trace.steps
    assert kept is not None and kept.num_rows == 21
    assert max(b["start_s"].max() for b in kept.batches()) <= 1001.0
    assert "only its 21 step(s) within the trace's range are used" in fitted.trace.notes[-1]


# -- streamed step logs ----------------------------------------------------------------------


def test_a_streamed_step_log_takes_its_range_from_the_parquet_statistics(tmp_path: Path) -> None:
    path = tmp_path / "steps.parquet"
    pd.DataFrame(steps_over(500.0, 2001.0, k=61)).to_parquet(path, row_group_size=8)
    log = ingest.read_steps(path, "--steps")
    assert log.streamed and log.span() == (500.0, 2001.0)
    fitted = fit_telemetry(replace(make_trace(timed()), steps=log))
    kept = fitted.trace.steps
    assert kept is not None and kept.streamed and kept.window == (0.0, 1001.0)
    frames = list(kept.batches())
    assert kept.num_rows == sum(len(f) for f in frames) == 21
    assert fitted.overlap is not None and len(fitted.overlap.requests) == 6


@pytest.mark.parametrize("shift_s", [1_000_000.0, 0.0])
def test_the_sample_step_log_shifted_by_a_million_seconds_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], shift_s: float) -> None:
    # GIVEN diag-kv-churn with its own step log, shifted in time as another run's would be
    steps = pd.read_parquet(CHURN_STEPS)
    steps["start_s"] += shift_s
    steps["end_s"] += shift_s
    shifted = tmp_path / "shifted.parquet"
    steps.to_parquet(shifted, index=False)
    code, out, err = run_cli(["diagnose", str(CHURN), "--steps", str(shifted)], capsys)
    if shift_s == 0.0:
        assert code == ExitCode.OK and out.startswith("verdict: kv_memory")
        return
    # THEN no verdict: exit 3, one line naming both files and both ranges
    assert code == ExitCode.INPUT and out == ""
    assert err == (f"error: {shifted}: step log covers 1000000.0–1000112.6 s but {CHURN} covers "
                   "0.0–112.6 s; they are from different runs (pass the step log of this "
                   "trace's run)\n")


def test_the_sample_step_log_half_shifted_is_judged_on_the_overlap(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = pd.read_parquet(CHURN_STEPS)
    late = tmp_path / "late.csv"
    steps[steps["start_s"] > 50.0].to_csv(late, index=False)
    code, out, err = run_cli(["diagnose", str(CHURN), "--steps", str(late), "-f", "json"],
                             capsys)
    assert code == ExitCode.OK, err
    assert any("the step log covers 56 % of the trace's time range (0.0–112.6 s)" in n
               and "judged on 50.0–112.6 s only" in n for n in notes_of(json.loads(out)))


def test_analyze_refuses_a_step_log_from_another_run(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    steps = pd.read_parquet(CHURN_STEPS)
    steps["start_s"] += 5000.0
    steps["end_s"] += 5000.0
    shifted = tmp_path / "s.parquet"
    steps.to_parquet(shifted, index=False)
    code, _, err = run_cli(["analyze", str(CHURN), "--steps", str(shifted)], capsys)
    assert code == ExitCode.INPUT and "they are from different runs" in err


# -- metrics exports ----------------------------------------------------------------------------

T0 = 1_732_931_200.0  # the clock of tests/fixtures/prom_vllm_small.json


def waiting(lo: float, hi: float, every_s: float = 15.0, *, model: str = "m") -> list[tuple]:
    times = np.arange(lo, hi + every_s / 2, every_s)
    return [(float(t), "vllm:num_requests_waiting", f"engine=0,model_name={model}", 1.0)
            for t in times]


def test_metrics_from_another_time_are_refused() -> None:
    trace = make_trace(timed(start_s=T0))
    metrics = make_metrics(waiting(T0 + 86_400, T0 + 86_400 + 900))
    with pytest.raises(TraceReadError) as info:
        diagnose(trace, metrics=metrics)
    assert str(info.value) == (
        f"metrics.json: metrics export covers {T0 + 86_400:.1f}–{T0 + 87_300:.1f} s but test "
        f"covers {T0:.1f}–{T0 + 1001:.1f} s; they are from different runs (export the metrics "
        "of this trace's time range)")


def test_metrics_over_half_the_trace_are_judged_on_that_half() -> None:
    trace = make_trace(timed(start_s=T0))
    metrics = make_metrics(waiting(T0 + 500, T0 + 2000))
    fitted = fit_telemetry(trace, metrics)
    assert fitted.metrics is not None
    kept = fitted.metrics.frame["time_s"]
    assert kept.min() == T0 + 500 and kept.max() <= T0 + 1001 + 15  # one scrape past the end
    assert fitted.overlap is not None and len(fitted.overlap.requests) == 6
    assert fitted.overlap_axes == {"queueing", "kv_memory", "prefix_reuse", "pd_interference"}
    assert any(n.startswith("the metrics export covers 50 % of the trace's time range")
               for n in fitted.trace.notes)


def test_metrics_on_unix_time_against_a_relative_trace_are_noted() -> None:
    assert T0 >= UNIX_CLOCK_S
    trace = make_trace(timed())
    fitted = fit_telemetry(trace, make_metrics(waiting(T0, T0 + 900)))
    assert fitted.overlap is None
    assert "cannot be matched in time; the export is taken as this trace's run" in \
        fitted.trace.notes[-1]


def test_a_model_the_trace_never_names_is_a_note() -> None:
    trace = make_trace(timed(start_s=T0, model=["llama"] * 11))
    same = fit_telemetry(trace, make_metrics(waiting(T0, T0 + 1005, model="llama")))
    assert same.trace.notes == trace.notes
    other = fit_telemetry(trace, make_metrics(waiting(T0, T0 + 1005, model="qwen")))
    assert other.trace.notes[-1] == (
        "the metrics export metrics.json is labelled model_name 'qwen', which the trace's "
        "'model' column ('llama') never names; its series may be of another deployment")


def test_step_log_instances_the_trace_never_names_are_a_note() -> None:
    names = [f"i{k}" for k in range(7)]
    steps = steps_over(0.0, 1001.0, k=21, instance=[names[k % 7] for k in range(21)])
    trace = make_trace(timed(instance=["i0"] * 11), steps=steps)
    note = fit_telemetry(trace).trace.notes[-1]
    assert note == ("the step log steps names instance(s) 'i1', 'i2', 'i3' and 3 more that the "
                    "trace's 'instance' column never names; check the step log is of this "
                    "deployment")


# -- real traces -------------------------------------------------------------------------------


def test_azure_code_trace_refuses_a_step_log_a_day_later(tmp_path: Path) -> None:
    """Azure LLM inference trace 2023 (code): arrivals over 0–3435.9 s after normalisation."""
    trace = ingest.read_trace(shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    day = pd.DataFrame(steps_over(86_400.0, 86_400.0 + 3436.0, k=100))
    with pytest.raises(TraceReadError, match=r"0\.0–3435\.9 s; they are from different runs"):
        fit_telemetry(replace(trace, steps=StepLog.from_frame(day, "day.csv")))
    # the second half's steps decode the outputs of the requests arriving then (93,864 tokens)
    half = pd.DataFrame(steps_over(1718.0, 3436.0, k=100, decode_tokens=[1000] * 100))
    fitted = fit_telemetry(replace(trace, steps=StepLog.from_frame(half, "half.csv")))
    assert fitted.overlap is not None
    kept = len(fitted.overlap.requests)
    assert 0 < kept < len(trace.requests)
    assert "the step log covers 50 % of the trace's time range" in fitted.trace.notes[-1]


def test_a_trace_with_token_times_runs_until_its_last_token() -> None:
    """No finish_s, but token times: the trace covers its requests up to their last token, so
    the steps that decoded them after the last arrival are the trace's, not cut away (a trace
    of 2 requests arriving at 0 and 10 s, tokens until 40 s)."""
    trace = make_trace({"arrival_s": [0.0, 10.0], "prompt_len": [100, 100],
                        "output_len": [3, 3],
                        "token_times_s": [[1.0, 20.0, 40.0], [11.0, 12.0, 13.0]]})
    assert trace_span(trace) == Span(0.0, 40.0)
    steps = StepLog.from_frame(pd.DataFrame(steps_over(0.0, 40.0)), "steps.parquet")
    fitted = fit_telemetry(replace(trace, steps=steps), None)
    assert fitted.trace.steps is not None and fitted.trace.steps.num_rows == 21
