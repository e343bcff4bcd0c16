"""Engine telemetry given where a request trace belongs (`trace diagnose server.log`, the
first thing many users type) is refused with the option that takes it, not with a list of
trace formats. The files are the real excerpts of tests/fixtures (sources in their READMEs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode, TraceReadError
from yaotu_trace.ingest.detect import detect_format


@pytest.mark.parametrize(("name", "kind"), [
    ("serverlogs/vllm_generated_mixed.log", "an engine server log"),
    ("serverlogs/sglang_cached_pr13023.log", "an engine server log"),
    ("prom_text/vllm_docs_snapshot.txt", "a /metrics scrape"),
    ("prom_text/vllm_scrapes.prom", "a /metrics scrape"),
    ("prom_vllm_small.json", "a Prometheus query export"),
    ("prom_sglang_small.csv", "a Prometheus export"),
])
def test_telemetry_as_a_trace_names_the_option_that_takes_it(name: str, kind: str) -> None:
    path = FIXTURES / name
    with pytest.raises(TraceReadError) as err:
        detect_format(path)
    assert str(err.value) == (
        f"{path}: is {kind}, engine telemetry rather than a request trace; give it as "
        f"--metrics {path} (with the trace, or alone: trace diagnose --metrics {path})")


def test_the_cli_says_it_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "serverlogs" / "vllm_generated_mixed.log"
    assert main(["diagnose", str(path)]) == ExitCode.INPUT
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"--metrics {path}" in err[0]


def test_an_unknown_file_keeps_the_format_list(tmp_path: Path) -> None:
    path = tmp_path / "notes.log"
    path.write_text("nothing an engine writes\n")
    with pytest.raises(TraceReadError, match=r"unknown trace format '\.log'; pass --input-format"):
        detect_format(path)


@pytest.mark.parametrize("where", ["trace", "before"])
def test_a_step_log_as_the_trace_names_steps(where: str, tmp_path: Path, capsys) -> None:
    # GIVEN the diag-burst sample's step log, where a request trace belongs
    samples = Path(__file__).resolve().parents[2] / "sample_traces"
    steps = samples / "diag-burst.steps.parquet"
    args = ([str(steps)] if where == "trace"
            else [str(samples / "chat.parquet"), "--before", str(steps)])
    # THEN the command refuses it in one line, naming the option that takes it
    assert main(["report", *args, "-o", str(tmp_path / "r.html")]) == ExitCode.INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{steps}: is a step log" in err and f"--steps {steps}" in err
    assert not (tmp_path / "r.html").exists()
