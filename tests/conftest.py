"""Shared fixtures: the public traces under ../shared/traces (tests skip when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_TRACES = Path(
    os.environ.get("YAOTU_SHARED_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)


def shared_trace(relative: str) -> Path:
    """Path of a public trace; skips the test cleanly when the shared folder is absent."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"public trace {relative} not found under {SHARED_TRACES}")
    return path


def schema_error(path: Path) -> str:
    """Load a malformed trace and return its error: a one-line schema error naming the file."""
    from yaotu_trace.errors import TraceSchemaError, YaotuError
    from yaotu_trace.ingest import load_trace

    with pytest.raises(YaotuError) as info:
        load_trace(path)
    message = str(info.value)
    assert isinstance(info.value, TraceSchemaError)
    assert "\n" not in message
    assert str(path) in message
    return message


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `trace` in this process: the exit code and what it wrote to stdout and stderr."""
    from yaotu_trace.cli import main

    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """Run `trace` in this process, expect exit 0, and parse the one JSON document it printed."""
    import json

    from yaotu_trace.cli import main
    from yaotu_trace.errors import ExitCode

    assert main(args) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendered output never depends on the terminal running the tests."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
