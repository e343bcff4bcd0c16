"""Progress bars: on stderr only, only for a terminal, never with --quiet."""

from __future__ import annotations

import io

import pytest

from yaotu_trace.cli import progress as progress_module
from yaotu_trace.cli.progress import progress, progress_enabled


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_silent_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = io.StringIO()
    monkeypatch.setattr(progress_module.sys, "stderr", fake)
    assert not progress_enabled(quiet=False)
    with progress("replay") as update:
        update("replaying", 0.5)
    assert fake.getvalue() == ""


def test_progress_quiet_wins_over_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module.sys, "stderr", _Tty())
    monkeypatch.delenv("TERM", raising=False)
    assert progress_enabled(quiet=False)
    assert not progress_enabled(quiet=True)


def test_progress_draws_on_a_terminal_stderr(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    fake = _Tty()
    monkeypatch.setattr(progress_module.sys, "stderr", fake)
    monkeypatch.setenv("TERM", "xterm")
    with progress("sweep") as update:
        update("sweeping every capacity", 0.5)
        update("done", 1.0)
    assert "sweep" in fake.getvalue()
    assert capsys.readouterr().out == ""
