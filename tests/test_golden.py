"""Golden output: the console table and Markdown of each command on the bundled samples, and the
one-line summary of the commands that write a file (generate, convert).

A change to what a user reads shows up here as a diff against the files in tests/golden/.
When the change is meant, write the files anew and review the diff in the commit:

    YAOTU_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py

(add `-k NAME` to write only some of them). Each command runs in a fresh folder that links the
bundled samples and scenarios, so the paths it prints are the ones a user types.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
KV = ["sample_traces/diag-kv-churn.parquet", "--steps",
      "sample_traces/diag-kv-churn.steps.parquet"]
SCENARIOS = ["--scenario", "docs/scenarios/baseline.toml",
             "--scenario", "docs/scenarios/chunked.toml"]
COMMANDS = {
    "analyze": ["analyze", "sample_traces/chat.parquet"],
    "replay": ["replay", "sample_traces/multitenant.csv", "--route", "round-robin",
               "--instances", "4", "--capacity", "20000"],
    "sweep": ["sweep", "sample_traces/chat.parquet", "--points", "6"],
    "sweep-capacities": ["sweep", "sample_traces/multitenant.csv", "--points", "2",
                         "--capacities", "300,20ktok,unlimited"],
    "diagnose": ["diagnose", *KV, "--model", "llama-3.1-8b", "--gpu", "H100"],
    "check": ["check", *KV, "--fail-on", "bottleneck"],
    "models": ["models"],
    "simulate": ["simulate", "sample_traces/multitenant.csv", "--model", "llama-3.1-8b",
                 "--gpu", "H100", "--out", "sim.parquet", "--steps-out", "sim.steps.parquet"],
    "compare": ["compare", "sample_traces/multitenant.csv", *SCENARIOS],
    "report": ["report", *KV],
    "diff": ["diff", "sample_traces/diag-healthy.parquet", "sample_traces/diag-kv-churn.parquet",
             "--steps-before", "sample_traces/diag-healthy.steps.parquet",
             "--steps-after", "sample_traces/diag-kv-churn.steps.parquet",
             "--model", "llama-3.1-8b", "--gpu", "H100"],
}
# Commands whose product is a file: their golden is the summary they write to stderr.
SUMMARIES = {
    "generate": ["generate", "diag-kv-churn", "--requests", "40", "--seed", "3",
                 "--out", "churn.parquet", "--steps-out", "churn.steps.parquet"],
    "convert": ["convert", "sample_traces/multitenant.csv", "--out", "multitenant.parquet"],
}


def _run(args: list[str], folder: Path, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `trace` in a folder that links the samples and scenarios: exit code, stdout, stderr."""
    from yaotu_trace.cli import main

    for name in ("sample_traces", "docs"):
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("NO_COLOR", "1")
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _compare(out: str, path: Path) -> None:
    if os.environ.get("YAOTU_UPDATE_GOLDEN"):
        path.write_text(out, encoding="utf-8")
    assert out == path.read_text(encoding="utf-8"), f"{path} differs; see the module docstring"


@pytest.mark.parametrize("fmt", ["table", "markdown"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_golden_output(name: str, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run([*COMMANDS[name], "--format", fmt], tmp_path, monkeypatch, capsys)
    _compare(out, GOLDEN / f"{name}.{'md' if fmt == 'markdown' else 'txt'}")


@pytest.mark.parametrize("name", list(SUMMARIES))
def test_golden_summary(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(SUMMARIES[name], tmp_path, monkeypatch, capsys)
    assert (code, out) == (0, "")
    _compare(err, GOLDEN / f"{name}.txt")
