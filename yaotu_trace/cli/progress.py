"""Progress bars on stderr for long reads, replays and simulations.

The core reports progress through an optional `callback(stage, share_done)`; this module turns
it into a rich bar on stderr. Bars appear only when stderr is a terminal and `--quiet` is not
given, so stdout (the report) and CI logs stay clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

ProgressCallback = Callable[[str, float], None]

QuietOpt = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="No progress bars on stderr (they are shown only when "
                 "stderr is a terminal)."),
]


def progress_enabled(quiet: bool) -> bool:
    """Bars only for a person watching: stderr is a terminal, not dumb, and not --quiet."""
    if quiet or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()


def _noop(stage: str, share: float) -> None:
    del stage, share


@contextmanager
def progress(title: str, quiet: bool = False) -> Iterator[ProgressCallback]:
    """Yield a callback that moves one bar; a no-op when bars are disabled."""
    if not progress_enabled(quiet):
        yield _noop
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=sys.stderr)
    with Progress(TextColumn("[bold]{task.fields[title]}[/]"), BarColumn(),
                  TextColumn("{task.percentage:>3.0f}%"), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=100.0, title=title)

        def update(stage: str, share: float) -> None:
            bar.update(task, description=stage, completed=max(0.0, min(1.0, share)) * 100.0)

        yield update
