"""Benchmark results with run-level numbers only: read as a summary by `trace analyze`, refused
by every other command with the flag that saves per-request data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode, TraceSchemaError
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.summary import read_summary
from yaotu_trace.ingest.telemetry.bench_summary import UNAVAILABLE
from yaotu_trace.render.json_report import json_schema

DOCS_RUN = FIXTURES / "vllm_bench" / "docs_summary.json"


def test_vllm_summary_holds_the_documented_run() -> None:
    # The numbers of the run printed in vLLM's docs/benchmarking/cli.md (see the README).
    summary = read_summary(DOCS_RUN)
    assert summary is not None
    assert summary.tool == "vllm bench serve"
    totals = {v.key: (v.value, v.unit) for v in summary.totals}
    assert totals == {
        "completed": (10.0, "requests"),
        "duration": (5.78, "s"),
        "total_input_tokens": (1369.0, "tokens"),
        "total_output_tokens": (2212.0, "tokens"),
        "request_throughput": (1.73, "req/s"),
        "output_throughput": (382.89, "tokens/s"),
        "total_token_throughput": (619.85, "tokens/s"),
    }
    stats = {lat.metric: dict(lat.stats) for lat in summary.latencies}
    assert stats == {
        "TTFT": {"mean": 71.54, "median": 73.88, "p99": 79.49},
        "TPOT": {"mean": 7.91, "median": 7.96, "p99": 8.03},
        "ITL": {"mean": 7.74, "median": 7.70, "p99": 8.39},
    }
    assert {lat.unit for lat in summary.latencies} == {"ms"}
    run = {v.key: v.value for v in summary.run}
    assert run["model_id"] == "NousResearch/Hermes-3-Llama-3.1-8B"
    assert run["request_rate"] == "inf"
    assert "label" not in run  # null in the file
    assert summary.unavailable == UNAVAILABLE


def test_vllm_summary_keeps_unknown_numbers_and_orders_percentiles(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({
        "request_throughput": 2.5, "p99_e2el_ms": 900.0, "p50_e2el_ms": 400.0,
        "mean_e2el_ms": 450.0, "std_e2el_ms": 80.0, "p99.9_e2el_ms": 990.0,
        "rtfx": 0.0, "spec_decode_acceptance_length": 2.25, "custom_wait_ms": 3.0,
    }))
    summary = read_summary(path)
    assert summary is not None
    (e2el,) = summary.latencies
    assert list(e2el.stats) == ["mean", "std", "p50", "p99", "p99.9"]
    others = {v.key: v.unit for v in summary.totals if v.key == v.label}
    assert others == {"rtfx": "", "spec_decode_acceptance_length": "", "custom_wait_ms": "ms"}


def test_vllm_detailed_result_is_not_a_summary() -> None:
    assert read_summary(FIXTURES / "vllm_bench_small.json") is None
    assert read_summary(FIXTURES / "azure_small.csv") is None  # not a .json document: not opened


def test_summary_refused_by_the_trace_reader_in_one_line() -> None:
    with pytest.raises(TraceSchemaError) as info:
        read_trace(DOCS_RUN)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{DOCS_RUN}: a summary without per-request arrays")
    assert "`trace analyze` shows what it holds" in message
    assert "--save-detailed" in message


def test_analyze_prints_the_summary_and_what_is_unavailable(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(DOCS_RUN)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "Benchmark summary  (vllm bench serve, run-level numbers only)" in out
    assert "619.85 tokens/s" in out and "1.73 req/s" in out and "1,369 tokens" in out
    assert "none (run-level summary)" in out
    ttft = next(line for line in out.splitlines() if line.lstrip().startswith("TTFT"))
    assert ttft.split()[-4:] == ["ms", "71.54", "73.88", "79.49"]
    assert "not available without per-request data: arrivals" in " ".join(out.split())


def test_analyze_summary_json_validates_and_holds_the_numbers(
        capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert main(["analyze", str(DOCS_RUN), "--format", "json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(json_schema()).validate(doc)
    assert doc["input"]["format"] == "vllm-bench (summary)"
    assert "profile" not in doc
    itl = next(lat for lat in doc["bench_summary"]["latencies"] if lat["metric"] == "ITL")
    assert itl["stats"] == {"mean": 7.74, "median": 7.7, "p99": 8.39}


def test_analyze_summary_with_input_format_and_steps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Named explicitly, a summary under another name is read the same way.
    renamed = tmp_path / "run.txt"
    renamed.write_text(DOCS_RUN.read_text())
    assert read_summary(renamed) is None  # not a .json name: never guessed
    summary = read_summary(renamed, TraceFormat.VLLM_BENCH)
    assert summary is not None and summary.format_name == "vllm-bench"
    code = main(["analyze", str(DOCS_RUN), "--steps", str(DOCS_RUN)])
    assert code == ExitCode.USAGE  # an option the file cannot take
    assert "no requests to match a step log to" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["replay", "sweep", "convert"])
def test_other_commands_refuse_a_summary(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [command, str(DOCS_RUN)]
    if command == "convert":
        args += ["--out", str(tmp_path / "t.parquet")]
    assert main(args) == ExitCode.INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--save-detailed" in err[0]
