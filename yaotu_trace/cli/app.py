"""The typer application and the options and output plumbing shared by every command."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from yaotu_trace.errors import ConfigError
from yaotu_trace.files import (
    STDOUT,
    all_or_nothing,
    check_inputs,
    check_outputs,
    defer,
    replace_atomically,
    write_error,
)
from yaotu_trace.render import OutputFormat, render

# NOTE: the analysis modules (pandas, pyarrow, numba) are imported where a command uses them,
# so that `trace --help`, `trace models` and a usage error start at once.
if TYPE_CHECKING:
    from yaotu_trace.commands.load import RunBefore, TraceInput
    from yaotu_trace.data.report import Report
    from yaotu_trace.ingest.formats import TraceFormat

app = typer.Typer(
    name="trace",
    help="Workload analyzer for LLM-inference request traces: profile a trace, replay its "
    "prefix cache exactly, and find the bottleneck. Every command also takes --stats "
    "(elapsed time and peak memory on stderr after the run) and --debug (the traceback of any "
    "error on stderr; the exit code is kept).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

def trace_input(trace: Path, input_format: TraceFormat | None = None,
                column_map: list[str] | None = None, source_block_size: int | None = None,
                steps: Path | None = None, *, tokenizer: Path | None = None) -> TraceInput:
    """The trace named on the command line and how to read it; the command reads it."""
    from yaotu_trace.commands.load import TraceInput

    return TraceInput(path=trace, input_format=input_format, column_map=tuple(column_map or ()),
                      source_block_size=source_block_size, steps=steps, tokenizer=tokenizer)


def before_input(before: Path | None, steps_before: Path | None, metrics_before: Path | None,
                 matched_only: bool, input_format: TraceFormat | None = None,
                 column_map: list[str] | None = None,
                 source_block_size: int | None = None) -> RunBefore | None:
    """The run before a change (`--before`, read as TRACE is, with its `--steps-before` and
    `--metrics-before`), for `trace check` and `trace report`; an option of that run without
    it is refused before anything is read."""
    if before is None:
        if steps_before is not None:
            raise ConfigError("--steps-before is the step log of the run before: give --before "
                              "BEFORE too")
        if metrics_before is not None:
            raise ConfigError("--metrics-before is the telemetry of the run before: give "
                              "--before BEFORE too")
        if matched_only:
            raise ConfigError("--matched-only judges the change against the run before: give "
                              "--before BEFORE too")
        return None
    from yaotu_trace.commands.load import RunBefore

    return RunBefore(trace=trace_input(before, input_format, column_map, source_block_size,
                                       steps_before),
                     metrics=metrics_before, matched_only=matched_only)


# The report format an output's extension asks for, when --format is not given.
REPORT_SUFFIXES = {
    ".txt": OutputFormat.TABLE, ".text": OutputFormat.TABLE, ".log": OutputFormat.TABLE,
    ".json": OutputFormat.JSON, ".md": OutputFormat.MARKDOWN,
    ".markdown": OutputFormat.MARKDOWN, ".html": OutputFormat.HTML, ".htm": OutputFormat.HTML,
}
# Extensions of data files: a text report under such a name would be mistaken for data.
DATA_SUFFIXES = (".parquet", ".pq", ".arrow", ".feather", ".csv", ".tsv", ".jsonl",
                 ".ndjson", ".gz", ".zst", ".bz2", ".xz")


def report_format(fmt: OutputFormat | None, output: Path | None,
                  default: OutputFormat = OutputFormat.TABLE) -> OutputFormat:
    """`--format` when given, else the one the extension of `-o` names, else `default`."""
    suffix = "" if output is None or output == STDOUT else output.suffix.lower()
    if suffix in DATA_SUFFIXES:
        raise ConfigError(f"-o {output}: '{suffix}' names a data file, but the report is text; "
                          "name it .txt, .json, .md or .html (per-request data: see --help)")
    return fmt or REPORT_SUFFIXES.get(suffix, default)


ChartsOpt = Annotated[
    bool | None,
    typer.Option("--charts/--no-charts", help="Text charts in the table output (arrivals over "
                 "time, lengths, KV, the capacity curve): on by default when the report goes to "
                 "a terminal, off otherwise; never in JSON or Markdown. Example: trace analyze "
                 "chat.parquet --charts | less -R"),
]


def charts_wanted(charts: bool | None, fmt: OutputFormat | None, output: Path | None,
                  default: OutputFormat = OutputFormat.TABLE) -> bool:
    """Whether the command computes the table output's charts: `--charts/--no-charts` when
    given, else only when the table goes to a terminal; never for another format, whose
    output does not carry them (so no time is spent on them)."""
    if report_format(fmt, output, default) is not OutputFormat.TABLE:
        return False
    if charts is not None:
        return charts
    return (output is None or output == STDOUT) and sys.stdout.isatty()


def _encodes_blocks(stream: Any) -> bool:
    """Whether the stream's encoding can write the charts' block characters (else ASCII)."""
    try:
        "▁█▔▲░".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def emit(report: Report, fmt: OutputFormat | None, output: Path | None,
         default: OutputFormat = OutputFormat.TABLE) -> None:
    """Render the report and write it to stdout or `output` with the command's other outputs."""
    chosen = report_format(fmt, output, default)
    to_stdout = output is None or output == STDOUT
    to_terminal = to_stdout and sys.stdout.isatty()
    width = 100
    if to_terminal:
        width = max(80, min(140, os.get_terminal_size().columns))
    color = to_terminal and "NO_COLOR" not in os.environ
    unicode = _encodes_blocks(sys.stdout) if to_stdout else True  # files are UTF-8
    text = render(report, chosen, width=width, color=color, unicode=unicode)
    if to_stdout:
        defer(lambda: _write_stdout(text))
    else:
        assert output is not None
        write_atomically(output, text)


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise write_error("stdout", exc, needed_bytes=len(text.encode("utf-8"))) from exc


def write_atomically(path: Path, text: str) -> None:
    """Write text as a whole file (see `files.replace_atomically`); '-' is stdout."""
    if path == STDOUT:
        defer(lambda: _write_stdout(text))
        return
    data = text.encode("utf-8")

    def write(tmp: Path) -> None:
        tmp.write_bytes(data)

    replace_atomically(path, write, size_bytes=len(data))


# Parameters of the command functions that name outputs, with their option; every other path
# parameter is an input.
OUTPUT_OPTIONS = {"output": "-o", "out": "--out", "steps_out": "--steps-out",
                  "metrics_out": "--metrics-out",
                  "junit": "--junit", "markdown": "--markdown"}

# Inputs read whole in one go, which may be a named pipe or a process substitution
# (`--config <(...)`); every other input is read more than once and must be a file.
READ_ONCE_INPUTS = ("--config", "--baseline")

Command = TypeVar("Command", bound=Callable[..., Any])


def command(arguments: dict[str, str] | None = None,
            **settings: Any) -> Callable[[Command], Command]:
    """Register a `trace` command whose files are checked before any of its work.

    Every input must be a file or folder (a named pipe only where it is read once), every output
    must be writable and none may name an input (by device and inode), whatever the command;
    the outputs are then published together when the command succeeds, so an
    error or Ctrl-C leaves none of them (see `yaotu_trace.files`). `arguments` names the
    positional inputs other than TRACE in the messages (`{"before": "BEFORE"}`).
    """
    def register(function: Command) -> Command:
        @functools.wraps(function)
        def checked(**params: Any) -> Any:
            outputs, inputs = paths_of(params, arguments or {})
            check_inputs(inputs, READ_ONCE_INPUTS)
            targets = check_outputs(outputs, inputs)
            with all_or_nothing(targets.values()):
                return function(**params)

        app.command(**settings)(checked)
        return function

    return register


def paths_of(params: dict[str, Any], arguments: dict[str, str] | None = None
             ) -> tuple[dict[str, Path | None], dict[str, Any]]:
    """Split a command's path parameters into outputs and inputs, keyed by their option (or
    argument: TRACE, and those `arguments` names)."""
    names = {"trace": "TRACE", **(arguments or {})}
    outputs: dict[str, Path | None] = {}
    inputs: dict[str, Any] = {}
    for name, value in params.items():
        if name in OUTPUT_OPTIONS:
            outputs[OUTPUT_OPTIONS[name]] = value
        elif isinstance(value, Path) or (isinstance(value, list | tuple) and value
                                         and all(isinstance(v, Path) for v in value)):
            inputs[names.get(name) or "--" + name.replace("_", "-")] = value
    return outputs, inputs


def _show_version(value: bool) -> None:
    if value:
        from yaotu_trace._version import __version__

        sys.stdout.write(f"yaotu-trace {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Show the version and exit.", callback=_show_version,
                     is_eager=True),
    ] = False,
) -> None:
    """Workload analyzer for LLM-inference request traces.

    Every command also takes --stats (elapsed time and peak memory on stderr after the run)
    and --debug (the traceback of any error on stderr; the exit code is kept).

    Exit codes: 0 report produced; 1 a check failed; 2 usage error (unknown option, or an
    option value that cannot be honoured); 3 input error (a trace, telemetry, check or scenario
    file that cannot be used, or an output that cannot be written or would replace an input);
    4 internal error; 5 an output failed while being written (a full disk, the file-size limit,
    a closed stdout); 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; 141 the reader of stdout left.
    """
