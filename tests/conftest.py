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


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendered output never depends on the terminal running the tests."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
