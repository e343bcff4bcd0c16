"""Golden output: the console table and Markdown of each command on the bundled samples.

A change to what a user reads shows up here as a diff against the files in tests/golden/.
When the change is meant, write the files anew and review the diff in the commit:

    YAOTU_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
KV = ["sample_traces/diag-kv-churn.parquet", "--steps",
      "sample_traces/diag-kv-churn.steps.parquet"]
COMMANDS = {
    "analyze": ["analyze", "sample_traces/chat.parquet"],
    "replay": ["replay", "sample_traces/multitenant.csv", "--route", "round-robin",
               "--instances", "4", "--capacity", "20000"],
    "sweep": ["sweep", "sample_traces/chat.parquet", "--points", "6"],
    "diagnose": ["diagnose", *KV, "--model", "llama-3.1-8b", "--gpu", "H100"],
    "check": ["check", *KV, "--fail-on", "bottleneck"],
    "models": ["models"],
}


@pytest.mark.parametrize("fmt", ["table", "markdown"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_golden_output(name: str, fmt: str, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    from yaotu_trace.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NO_COLOR", "1")
    main([*COMMANDS[name], "--format", fmt])
    out = capsys.readouterr().out
    path = GOLDEN / f"{name}.{'md' if fmt == 'markdown' else 'txt'}"
    if os.environ.get("YAOTU_UPDATE_GOLDEN"):
        path.write_text(out, encoding="utf-8")
    assert out == path.read_text(encoding="utf-8"), f"{path} differs; see the module docstring"
