"""The commands the docs show run: each `trace ...` line of a fenced block in docs/*.md, run in
a fresh folder with the block's earlier commands before it (a `generate` or `simulate` makes the
files the next line reads), its shell variables expanded. A renamed option or a rule that now
refuses an option combination fails here, not in a reader's terminal.

The public traces' names (`conversation_trace.jsonl`, `mooncake/…`, `azure_llm_2023/…`) read
../shared/traces (skipped when absent); `tests/fixtures/…`, `sample_traces/…` and `docs/…` read
the repository (a fixture or a docs file named alone, by its one file of that name). Where the
block shows the command printing an `error:` line, that line is what it must print, with exit
2; a `verdict:` line it shows, it must print among its output's lines. A line that reads a file
nothing makes (a user's own `chat.parquet`) or that shows a template (`TRACE`, `[--config …]`,
`NAME`) is not run, and `test_most_of_the_docs_commands_are_run` holds those to a third of them.
A cut of a public trace the docs make with `head -N` or `jq -c FILTER … | head -n N` is made
too (the jq one where jq is installed; without it, the commands reading the cut are not run).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import SHARED_TRACES

from yaotu_trace.cli import COMMAND_MODULES, main
from yaotu_trace.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
# Options whose value is a file the command writes.
OUTPUT_OPTIONS = frozenset({"-o", "--output", "--out", "--steps-out", "--metrics-out", "--junit",
                            "--markdown"})
INPUT_SUFFIXES = (".parquet", ".jsonl", ".csv", ".json", ".log", ".txt", ".toml", ".prom")
PUBLIC = {"conversation_trace.jsonl": "mooncake/conversation_trace.jsonl"}
PUBLIC_FOLDERS = ("mooncake/", "azure_llm_2023/", "ragpulse/", "tracelab_example/",
                  "weka_claude_code/")
REPO_FOLDERS = ("tests/fixtures/", "sample_traces/", "docs/")
TEMPLATE = re.compile(r"\[|\bTRACE\b|\bAFTER\b|\bBEFORE\b|NAME|\$")


def _fenced(text: str) -> Iterator[list[str]]:
    """The lines of each fenced block of a shell (or no) language."""
    block: list[str] | None = None
    shell = False
    for line in text.splitlines():
        fence = re.match(r"\s*```(\w*)", line)
        if fence is None:
            if block is not None:
                block.append(line)
        elif block is None:
            block, shell = [], fence[1] in ("", "sh", "bash", "shell", "console")
        else:
            if shell:
                yield block
            block = None


@dataclass
class Shown:
    """A command of the docs and what they show it printing: an `error:` line (on stderr,
    exit 2) or `verdict:` lines (on stdout). A `head -N FILE > OUT` line the docs cut a trace
    with is one too (`_head`)."""

    command: str
    error: str | None = None
    verdicts: list[str] = field(default_factory=list)


HEAD = re.compile(r"head (?:-n )?-?(\d+) (\S+) > (\S+)")
# `jq -c 'FILTER' FILE | head -n N > OUT`: a cut of a public trace by a jq filter.
JQ = re.compile(r"jq -c '([^']+)' (\S+)\s+\|\s+head (?:-n )?-?(\d+) > (\S+)")


def _blocks(path: Path) -> list[list[Shown]]:
    """The `trace` command lines of each fenced block of `path`, continuation lines joined,
    comments dropped and the block's `NAME="..."` variables expanded, each with what the block
    shows it printing."""
    blocks = []
    for lines in _fenced(path.read_text(encoding="utf-8")):
        env: dict[str, str] = {}
        commands: list[Shown] = []
        while lines:
            line = lines.pop(0)
            while line.rstrip().endswith("\\") and lines:
                line = line.rstrip()[:-1] + " " + lines.pop(0).strip()
            line = re.split(r"\s#\s", line)[0].strip().removeprefix("$ ")
            if (assigned := re.fullmatch(r'([A-Z_]+)="(.*)"', line)) is not None:
                env[assigned[1]] = assigned[2]
            elif HEAD.fullmatch(line) or JQ.fullmatch(line) or line.split()[:2] in (
                    [["trace", name] for name in COMMAND_MODULES]):
                for name, value in env.items():
                    line = line.replace(f"${name}", value)
                commands.append(Shown(line))
            elif line.startswith("error: ") and commands and commands[-1].error is None:
                commands[-1].error = line
            elif line.startswith("verdict: ") and commands:
                commands[-1].verdicts.append(line)
        if commands:
            blocks.append(commands)
    return blocks


def _fixture(name: str) -> Path | None:
    """The one file of the test fixtures or the docs named `name` (the docs name its folder in
    prose)."""
    found = [*(REPO / "tests" / "fixtures").rglob(name), *(REPO / "docs").rglob(name)]
    return found[0] if len(found) == 1 else None


def _resolved(args: list[str], made: set[str]) -> list[str] | None:
    """`args` with the docs' file names made real, or None when one names a file that
    neither the repository, the public traces nor an earlier command of the block has."""
    out = []
    writes = False
    for arg in args:
        if writes:
            made.add(arg)
            out.append(arg)
            writes = False
            continue
        writes = arg in OUTPUT_OPTIONS
        if arg.startswith("-") or not arg.endswith(INPUT_SUFFIXES):
            out.append(arg)
            continue
        public = PUBLIC.get(arg, arg if arg.startswith(PUBLIC_FOLDERS) else None)
        if public is not None:
            if not (SHARED_TRACES / public).exists():
                pytest.skip(f"public trace {public} not found under {SHARED_TRACES}")
            out.append(str(SHARED_TRACES / public))
        elif arg.startswith(REPO_FOLDERS) and (REPO / arg).exists():
            out.append(str(REPO / arg))
        elif arg in made:
            out.append(arg)
        elif (fixture := _fixture(arg)) is not None:
            out.append(str(fixture))
        else:
            return None
    return out


def _head(cut: re.Match[str], made: set[str]) -> None:
    """`head -N FILE > OUT`, FILE one of the public traces (by its path from the repository)."""
    lines, source, target = int(cut[1]), cut[2], cut[3]
    public = source.removeprefix("../shared/traces/")
    if not (SHARED_TRACES / public).exists():
        pytest.skip(f"public trace {public} not found under {SHARED_TRACES}")
    with (SHARED_TRACES / public).open(encoding="utf-8") as text:
        Path(target).write_text("".join(line for _, line in zip(range(lines), text,
                                                                 strict=False)),
                                encoding="utf-8")
    made.add(target)


def _jq(cut: re.Match[str], made: set[str]) -> None:
    """`jq -c FILTER FILE | head -n N > OUT` run with jq, FILE a public trace; without jq
    on the machine OUT is not made, and the commands that read it are not run."""
    import shutil
    import subprocess

    jq = shutil.which("jq")
    public = PUBLIC.get(cut[2], cut[2])
    if jq is None or not (SHARED_TRACES / public).exists():
        return
    lines = subprocess.run([jq, "-c", cut[1], str(SHARED_TRACES / public)], check=True,
                           capture_output=True, text=True).stdout.splitlines(keepends=True)
    Path(cut[4]).write_text("".join(lines[:int(cut[3])]), encoding="utf-8")
    made.add(cut[4])


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _runnable(command: str, made: set[str]) -> list[str] | None:
    """The command's arguments, files made real, or None when it is not run."""
    if TEMPLATE.search(command):
        return None
    return _resolved(shlex.split(command)[1:], made)


def test_most_of_the_docs_commands_are_run() -> None:
    # GIVEN every command of every doc, WHEN the files they read are resolved as the run does
    commands = not_run = errors = 0
    for doc in DOCS:
        for block in _blocks(doc):
            made: set[str] = set()
            for shown in block:
                commands += 1
                if (cut := HEAD.fullmatch(shown.command)) is not None:
                    made.add(cut[3])
                    continue
                if (cut := JQ.fullmatch(shown.command)) is not None:
                    made.add(cut[4])
                    continue
                not_run += _runnable(shown.command, made) is None
                errors += shown.error is not None
    # THEN most are run (templates and a user's own files are the exception), the errors the
    # docs show among them
    assert commands >= 60 and not_run <= commands // 3 and errors >= 3, (
        commands, not_run, errors)


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_the_docs_commands_run(doc: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    for number, block in enumerate(_blocks(doc)):
        folder = tmp_path / f"block{number}"
        folder.mkdir()
        made: set[str] = set()
        with _inside(folder):
            for shown in block:
                command = shown.command
                if (cut := HEAD.fullmatch(command)) is not None:
                    _head(cut, made)
                    continue
                if (cut := JQ.fullmatch(command)) is not None:
                    _jq(cut, made)
                    continue
                args = _runnable(command, made)
                if args is None:
                    continue
                capsys.readouterr()
                code = main(args)
                printed = capsys.readouterr()
                err = printed.err.strip()
                if shown.error is not None:  # a refusal the docs show: that line, exit 2
                    assert (code, err) == (ExitCode.USAGE, shown.error), f"{doc.name}: {command!r}"
                    continue
                assert code == ExitCode.OK, f"{doc.name}: {command!r} exited {code}: {err}"
                lines = {" ".join(line.split()) for line in printed.out.splitlines()}
                for verdict in shown.verdicts:
                    assert verdict in lines, f"{doc.name}: {command!r} did not print {verdict!r}"
