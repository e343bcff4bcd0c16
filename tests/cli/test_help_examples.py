"""Every example in the commands' help parses: an option renamed or dropped leaves no example
behind that a user would copy and see refused."""

from __future__ import annotations

import re
import shlex

import pytest
from typer import _click as click
from typer.main import get_command

from yaotu_trace.cli import COMMAND_MODULES, _register_commands
from yaotu_trace.cli.app import app


def _examples() -> list[tuple[str, str]]:
    """(command, example) for each example paragraph of each command's help, folded onto
    one line; what follows a pipe or a redirection is the shell's, not ours."""
    _register_commands()
    group = get_command(app)
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        text = (command.help or "").partition("Examples:")[2]
        for paragraph in re.split(r"\n\s*\n", text):
            line = " ".join(paragraph.split())
            if line.startswith("trace "):
                found.append((name, re.split(r" [|>] ", line)[0]))
    return found


EXAMPLES = _examples()


def test_every_command_has_examples() -> None:
    assert {name for name, _ in EXAMPLES} == set(COMMAND_MODULES)


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_a_help_example_parses(name: str, example: str) -> None:
    # GIVEN an example as the help prints it, WHEN its words are parsed as the command line
    args = shlex.split(example)[1:]
    group = get_command(app)
    context = group.make_context("trace", list(args))
    command_name, command, rest = group.resolve_command(context, list(args))
    # THEN it names its command and every option exists and takes the value given
    assert command_name == name and command is not None
    try:
        command.make_context(command_name, rest, parent=context)
    except click.exceptions.UsageError as error:
        pytest.fail(f"trace {name} --help example {example!r}: {error.format_message()}")
