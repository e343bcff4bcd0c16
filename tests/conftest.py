"""Shared fixtures: the input files under tests/fixtures, the public traces under ../shared/traces
(tests skip when absent), and the cases too long for the default run (marked `slow`; CI runs
them after it with `-m slow`)."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# The small inputs the tests read, hand-written or recorded from the real tools (each folder's
# README says where from); the test folders themselves mirror the package.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED_TRACES = Path(
    os.environ.get("YAOTU_SHARED_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)

# NOTE: no clock limit a busy machine can break (a laptop at load 8 on 2 cores runs everything
# several times slower). A child process gets CHILD_TIMEOUT_S, only as a backstop for a hung
# one: subprocess.run kills and reaps it when it passes. Generated examples get no deadline
# (Hypothesis' default is 200 ms each): a slow example is not a wrong one.
CHILD_TIMEOUT_S = 900
settings.register_profile("yaotu", deadline=None)
settings.load_profile("yaotu")


# Tests and parameter cases marked `slow` here because a decorator cannot reach them: one case of a
# parametrized test (its cheaper cases stay in the default run), or a test in a module without
# pytest imported. Each repeats, at a smaller batch or over more generated examples, what a case
# of the default run already checks. A whole test that can carry `@pytest.mark.slow` does.
_STEPLOG = "tests/data/test_steplog_stream.py::"
SLOW = frozenset({
    # Step logs streamed in 7-row batches or 1,000-row batches: the whole-log and the `analyze`
    # cases of the same parametrization stay.
    _STEPLOG + "test_streamed_step_log_equals_whole[diag-dispatch-7-diagnose]",
    _STEPLOG + "test_streamed_step_log_equals_whole[diag-dispatch-7-report]",
    _STEPLOG + "test_streamed_step_log_equals_whole[small-simulated-7-diagnose]",
    _STEPLOG + "test_streamed_step_log_equals_whole[small-simulated-7-report]",
    _STEPLOG + "test_streamed_step_log_equals_whole[simulated-1000-diagnose]",
    _STEPLOG + "test_streamed_step_log_equals_whole[simulated-1000-report]",
    _STEPLOG + "test_error_in_a_late_batch_names_the_row_of_the_file[7]",
    _STEPLOG + "test_axes_on_a_mixed_multi_instance_log_do_not_depend_on_batches[3]",
    _STEPLOG + "test_axes_on_a_mixed_multi_instance_log_do_not_depend_on_batches[7]",
    # Invariants of the replay over generated traces; its agreement with the reference stays.
    "tests/prefix/test_properties.py::test_lru_hits_never_fall_as_capacity_grows",
    "tests/prefix/test_properties.py::test_isolation_never_adds_hits",
    "tests/prefix/test_properties.py::test_larger_block_never_adds_hits_at_unlimited_capacity",
    "tests/prefix/test_properties.py::test_same_input_same_result",
    "tests/prefix/test_properties.py::test_chain_ids_do_not_depend_on_the_seed",
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the SLOW cases before `-m` deselects; a stale entry (renamed test) is an error.

    Staleness is judged only when whole files were collected: naming one case of a test on the
    command line leaves its other cases uncollected, which is not staleness.
    """
    ids = {item.nodeid for item in items}
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)
    if any("::" in arg for arg in config.args):
        return
    functions = {i.split("[")[0] for i in ids}
    stale = sorted(e for e in SLOW if e not in ids and e.split("[")[0] in functions)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW names no collected test: {stale}")


def shared_trace(relative: str) -> Path:
    """Path of a public trace; skips the test cleanly when the shared folder is absent."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"public trace {relative} not found under {SHARED_TRACES}")
    return path


@cache
def golden_document(path: Path) -> dict[str, Any]:
    """A golden fixture file written by an engine's own code: `{"configs": [...], ...}`."""
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def golden_cases(paths: list[Path]) -> list[tuple[str, int]]:
    """(file name, configuration index) of every configuration in golden fixture files."""
    return [(path.name, k) for path in paths
            for k in range(len(golden_document(path)["configs"]))]


def schema_error(path: Path) -> str:
    """Load a malformed trace and return its error: a one-line schema error naming the file."""
    from yaotu_trace.errors import TraceSchemaError, YaotuError
    from yaotu_trace.ingest import read_trace

    with pytest.raises(YaotuError) as info:
        read_trace(path)
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


@pytest.fixture(autouse=True)
def _fresh_streamed_chains() -> None:
    """Each test builds its own streamed chains: one kept from another test would skip the
    reading and memory checks a test may be about."""
    from yaotu_trace.prefix.chain_cache import forget_streamed_chains

    forget_streamed_chains()
