"""The README's "A first look" examples are what the tool prints: each is run, and its lines
are found in the output, so a changed number (or preset, or label) fails here, not in a reader.

An example is a ```text block that opens with `$ trace ...` (a trailing backslash continues the
command), then lines of its output. `...` marks lines left out; lines not separated by it are
consecutive in the output, blank lines and table rules aside. The public traces' examples skip
when ../shared/traces is absent.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import shared_trace

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
SHARED_PREFIX = "../shared/traces/"
ELIDED = "..."


def _examples() -> list[tuple[str, list[str]]]:
    """(command line, shown output lines) of each example in the README's "A first look"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## A first look\n", 1)[1].split("\n## ", 1)[0]
    examples = []
    for block in re.findall(r"```text\n(.*?)```", section, re.S):
        lines = block.splitlines()
        command = lines.pop(0).removeprefix("$ ")
        while command.endswith("\\"):
            command = command[:-1].rstrip() + " " + lines.pop(0).strip()
        examples.append((command, [line.rstrip() for line in lines]))
    return examples


EXAMPLES = _examples()


def _runs(shown: list[str]) -> list[list[str]]:
    """The shown lines in runs that are consecutive in the output (split at `...`)."""
    runs: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == ELIDED:
            runs.append([])
        else:
            runs[-1].append(line)
    return [run for run in runs if run]


def _printed(output: str) -> list[str]:
    """The output's lines, without blank lines and table rules."""
    return [line.rstrip() for line in output.splitlines()
            if line.strip() and set(line.strip()) != {"─"}]


def test_readme_has_the_first_look_examples() -> None:
    assert [shlex.split(command)[1] for command, _ in EXAMPLES] == ["analyze", "replay",
                                                                      "diagnose"]
    assert all(len(shown) >= 5 for _, shown in EXAMPLES)


@pytest.mark.parametrize(("command", "shown"), EXAMPLES,
                         ids=[shlex.split(c)[1] for c, _ in EXAMPLES])
def test_readme_example_is_what_the_tool_prints(
    command: str, shown: list[str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the command as the README shows it (paths relative to the repository)
    argv = [str(shared_trace(a.removeprefix(SHARED_PREFIX))) if a.startswith(SHARED_PREFIX)
            else a for a in shlex.split(command)[1:]]
    monkeypatch.chdir(REPO)
    # WHEN it runs
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    # THEN every run of shown lines is in the output, in order
    printed = _printed(out)
    at = 0
    for run in _runs(shown):
        found = next((i for i in range(at, len(printed) - len(run) + 1)
                      if printed[i:i + len(run)] == run), None)
        assert found is not None, (
            f"README.md, `{command}`: these lines are not in its output (after line {at}); "
            "run the command and copy them again:\n" + "\n".join(run)
            + "\n--- output ---\n" + "\n".join(printed))
        at = found + len(run)
