"""The one exception family of yaotu-trace and the exit codes it maps to."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, documented in the README."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    INPUT = 3
    INTERNAL = 4
    IO = 5
    # 128 + the signal, as a shell reports a command the signal stopped
    HANGUP = 129
    INTERRUPTED = 130
    BROKEN_PIPE = 141
    TERMINATED = 143


class YaotuError(Exception):
    """An expected failure: its message is one line that says what, where and how to fix it."""

    exit_code: ExitCode = ExitCode.INPUT


class TraceReadError(YaotuError):
    """The trace file is missing, unreadable, corrupt or of an unknown format."""


class TraceSchemaError(YaotuError):
    """The trace was read but a column is missing, mistyped or holds an invalid value."""


class ConfigError(YaotuError):
    """An option's value or a combination of options cannot be honoured: a usage error.

    Click's own "Invalid value for '--x'" is exit 2, so a value this tool refuses after parsing
    (an unknown preset, `--capacity 1e30`, block size against the trace's source ids) is too.
    """

    exit_code = ExitCode.USAGE


class ConfigFileError(YaotuError):
    """A check, scenario or baseline file is unreadable, not TOML/JSON, or holds a bad value."""


class OutputError(YaotuError):
    """An output cannot be written: its folder is missing or read-only, or it names an input."""


class WriteError(OutputError):
    """Writing an output failed on the way, and the machine is the cause: the disk or quota is
    full, the file-size limit is reached, the device failed, or stdout is closed.

    Exit 5 rather than 3: the same command succeeds once the machine has room, so a script (or
    CI) can tell it from a file or path that has to be fixed.
    """

    exit_code = ExitCode.IO


class ResourceLimitError(YaotuError):
    """The requested analysis would need more memory than this machine allows."""


class WorkerLostError(ResourceLimitError):
    """A worker process died before it answered, most often at the hands of the out-of-memory
    killer: the machine is the cause, so exit 5 as for a full disk, not 3 (no file is wrong)."""

    exit_code = ExitCode.IO


def where(path: object, row: object | None = None, column: str | None = None) -> str:
    """Format the 'file, row, column' location that every input error starts with."""
    parts = [str(path)]
    if row is not None:
        parts.append(str(row))
    if column is not None:
        parts.append(f"column '{column}'")
    return ": ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")
