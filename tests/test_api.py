"""The Python API: the example of docs/python-api.md runs, and every function's report is the
document the command line writes with the same options."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CHILD_TIMEOUT_S

import yaotu_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.gate.check import FailOn
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.workloads import WorkloadKind

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"
CHAT = str(SAMPLE / "chat.parquet")
CHURN = str(SAMPLE / "diag-kv-churn.parquet")
CHURN_STEPS = str(SAMPLE / "diag-kv-churn.steps.parquet")


def test_the_documented_example_runs(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    monkeypatch.chdir(ROOT)
    exec(compile(code.group(1), "docs/python-api.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("1000 requests at ") and "hit ratio at 1M tokens:" in out
    assert "## yaotu-trace analyze" in out


def test_import_is_light_and_names_are_documented() -> None:
    probe = ("import sys, yaotu_trace; dir(yaotu_trace); "
             "print(sorted(m for m in ('pandas', 'pyarrow', 'numba', 'numpy') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=ROOT, timeout=CHILD_TIMEOUT_S)
    assert done.stdout.strip() == "[]"
    doc = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    for name in yaotu_trace.__all__:
        if name != "__version__":
            assert callable(getattr(yaotu_trace, name))
            assert f"`{name}" in doc, name


def _cli_json(args: list[str], capsys: pytest.CaptureFixture[str],
              ok: int = ExitCode.OK) -> dict[str, Any]:
    capsys.readouterr()
    assert main([*args, "--format", "json", "--quiet"]) == ok
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


HEALTHY = str(SAMPLE / "diag-healthy.parquet")
HEALTHY_STEPS = str(SAMPLE / "diag-healthy.steps.parquet")
CHURN_RUN = yaotu_trace.TraceInput(path=Path(CHURN), steps=Path(CHURN_STEPS))
HEALTHY_RUN = yaotu_trace.TraceInput(path=Path(HEALTHY), steps=Path(HEALTHY_STEPS))
MODEL = yaotu_trace.DiagnosisOptions(model="Llama-3.1-8B")

CASES: dict[str, tuple[list[str], Callable[[], Any], int]] = {
    "analyze": (["analyze", CHAT], lambda: yaotu_trace.analyze(CHAT), ExitCode.OK),
    "replay": (["replay", CHAT, "--capacity", "1Mtok", "--preset", "vllm"],
               lambda: yaotu_trace.replay(
                   CHAT, yaotu_trace.ReplayOptions(capacity="1Mtok", preset="vllm")),
               ExitCode.OK),
    "replay-grid": (["replay", CHAT, "--grid", "block-size=16,64"],
                    lambda: yaotu_trace.replay(CHAT, grid=["block-size=16,64"]),
                    ExitCode.OK),
    "sweep": (["sweep", CHAT, "--points", "6", "--model", "Llama-3.1-8B"],
              lambda: yaotu_trace.sweep(CHAT, yaotu_trace.ReplayOptions(model="Llama-3.1-8B"),
                                        points=6), ExitCode.OK),
    "diagnose": (["diagnose", CHURN, "--steps", CHURN_STEPS, "--model", "Llama-3.1-8B"],
                 lambda: yaotu_trace.diagnose(CHURN_RUN, MODEL), ExitCode.OK),
    "check": (["check", CHURN, "--steps", CHURN_STEPS, "--fail-on", "bottleneck"],
              lambda: yaotu_trace.check(CHURN_RUN, fail_on=FailOn.BOTTLENECK),
              ExitCode.FINDINGS),
    "check-before": (["check", CHURN, "--steps", CHURN_STEPS, "--before", HEALTHY,
                      "--steps-before", HEALTHY_STEPS, "--model", "Llama-3.1-8B"],
                     lambda: yaotu_trace.check(CHURN_RUN, MODEL,
                                               before=yaotu_trace.RunBefore(trace=HEALTHY_RUN)),
                     ExitCode.FINDINGS),
    "report": (["report", CHAT], lambda: yaotu_trace.report(CHAT), ExitCode.OK),
    "diff": (["diff", HEALTHY, CHURN, "--steps-before", HEALTHY_STEPS, "--steps-after",
              CHURN_STEPS, "--model", "Llama-3.1-8B"],
             lambda: yaotu_trace.diff(HEALTHY_RUN, CHURN_RUN, MODEL), ExitCode.OK),
}


@pytest.mark.parametrize("name", CASES)
def test_api_report_is_the_cli_document(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    args, call, code = CASES[name]
    assert call().to_dict() == _cli_json(args, capsys, code)


def test_simulate_and_compare_are_the_cli_documents(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.parquet"
    yaotu_trace.generate(
        yaotu_trace.GenerateOptions(scenario=WorkloadKind.CHAT, requests=60, seed=3), out=small)
    options = ["--model", "Llama-3.1-8B", "--gpu", "H100", "--instances", "2"]
    cli = _cli_json(["simulate", str(small), "--out", str(tmp_path / "cli.parquet"),
                     "--steps-out", str(tmp_path / "cli.steps.parquet"), *options], capsys)
    api = yaotu_trace.simulate(small, Scenario(model="Llama-3.1-8B", gpu="H100", instances=2),
                               out=tmp_path / "api.parquet",
                               steps_out=tmp_path / "api.steps.parquet")
    assert api.to_dict() == cli
    for table in ("{}.parquet", "{}.steps.parquet"):
        assert (tmp_path / table.format("api")).read_bytes() == \
            (tmp_path / table.format("cli")).read_bytes()
    scenarios = [ROOT / "docs" / "scenarios" / f"{name}.toml" for name in ("baseline", "chunked")]
    given = [arg for path in scenarios for arg in ("--scenario", str(path))]
    cli = _cli_json(["compare", str(small), *given], capsys)
    assert yaotu_trace.compare(small, scenarios=scenarios).to_dict() == cli


def test_convert_and_generate_write_the_cli_files(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "bursty", "-n", "40", "--seed", "2", "--quiet",
                 "--out", str(tmp_path / "cli.jsonl")]) == ExitCode.OK
    made = yaotu_trace.generate(
        yaotu_trace.GenerateOptions(scenario=WorkloadKind.BURSTY, requests=40, seed=2),
        out=tmp_path / "api.jsonl")
    assert made.sections["generated"].requests == 40
    assert (tmp_path / "api.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert main(["convert", str(tmp_path / "cli.jsonl"), "--quiet",
                 "--out", str(tmp_path / "cli.parquet")]) == ExitCode.OK
    done = yaotu_trace.convert(tmp_path / "api.jsonl", out=tmp_path / "api.parquet")
    assert done.sections["conversion"].requests == 40
    assert (tmp_path / "api.parquet").read_bytes() == (tmp_path / "cli.parquet").read_bytes()
    capsys.readouterr()


def test_diff_is_the_command_even_once_its_core_is_loaded() -> None:
    """`yaotu_trace.diff` is also the package of the diff's core, which `check` and `report`
    load: importing it leaves the API's name to the command."""
    importlib.import_module("yaotu_trace.diff.run")
    from yaotu_trace import diff
    from yaotu_trace.commands.diff import diff as command

    assert diff is command and yaotu_trace.diff is command
