"""The command line: the only place that reads argv, touches the terminal or exits."""

from __future__ import annotations

import sys
import time

# NOTE: only the Ctrl-C handler, the standard streams' set-up and the exit codes are imported
# here (they need `signal`, `io` and `enum`); everything else, typer (with click and rich) above
# all, is imported once `run` has installed the handler, so that a Ctrl-C while they load is
# exit 130, without a traceback.
from yaotu_trace._visible import visible
from yaotu_trace.cli import interrupts, streams
from yaotu_trace.errors import ExitCode, YaotuError

# One module per command; each registers itself on `app` when imported, and imports what its
# command runs (its options' types too) in the command's function: `trace --help` imports all.
COMMAND_MODULES = ("analyze", "replay", "sweep", "models", "generate", "convert", "diagnose",
                   "simulate", "compare", "diff", "check", "report")


def _register_commands(args: list[str] | None = None) -> None:
    """Import the command modules; only the one named in `args` when there is one.

    Each module registers its command on import, and some import heavy libraries (numba for
    the replay): a run of one command does not pay for the others' imports. Help and unknown
    names get every command.
    """
    import importlib

    wanted = next((a for a in args or [] if not a.startswith("-")), None)
    if wanted in COMMAND_MODULES and not any(a in ("--help", "-h") for a in args or []):
        importlib.import_module(f"yaotu_trace.cli.{wanted}")
        return
    for name in COMMAND_MODULES:
        importlib.import_module(f"yaotu_trace.cli.{name}")


# Exit codes of a run a signal (or a closed pipe) ended: no --stats line after them.
SIGNAL_CODES = frozenset({ExitCode.HANGUP, ExitCode.INTERRUPTED, ExitCode.BROKEN_PIPE,
                          ExitCode.TERMINATED})


def main(argv: list[str] | None = None) -> int:
    """Run `trace`; map every outcome to a documented exit code (never a traceback).

    NOTE: the command runs with click's standalone mode off, so that this function is the one
    place where errors become exit codes (usage errors keep click's 2, Ctrl-C becomes 130,
    SIGTERM 143, SIGHUP 129, a reader that closed stdout 141). `--debug` adds the traceback on
    stderr and keeps the exit code.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args
    stats = "--stats" in args
    args = [a for a in args if a not in ("--debug", "--stats")]
    previous = interrupts.install()
    try:
        started_s = time.perf_counter()
        code = _run(args, debug)
        if stats and code not in SIGNAL_CODES:
            sys.stderr.write(run_stats(time.perf_counter() - started_s) + "\n")
    except KeyboardInterrupt:
        code = interrupts.exit_code()
    except BrokenPipeError:  # stderr's reader left too: nothing more can be said
        code = int(ExitCode.BROKEN_PIPE)
    finally:
        interrupts.restore(previous)
    return code


def run_stats(elapsed_s: float) -> str:
    """`--stats`: wall time and peak resident memory of this process and of its workers.

    Peak RSS is `getrusage`'s ru_maxrss (KiB on Linux): the high-water mark of this process,
    and separately of the largest worker process it waited for (`--jobs`, `--dask local`).
    """
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    text = f"stats: {elapsed_s:.2f} s elapsed, peak RSS {own / 2**30:.2f} GiB"
    if workers:
        text += f" (largest worker process {workers / 2**30:.2f} GiB)"
    return text


def _run(args: list[str], debug: bool) -> int:
    """Run one command line; every outcome becomes an exit code."""
    try:
        return _invoke(args)
    except YaotuError as err:
        _show_traceback(debug)
        sys.stderr.write(f"error: {visible(str(err), one_line=True)}\n")
        return int(err.exit_code)
    except KeyboardInterrupt:
        _show_traceback(debug)
        return interrupts.exit_code()
    except BrokenPipeError:
        # The reader of stdout left (`| head -1`): quiet, and 141 as SIGPIPE would end the
        # run, so that `set -o pipefail` sees a report that was not read whole.
        _show_traceback(debug)
        return int(ExitCode.BROKEN_PIPE)
    except Exception as exc:
        _show_traceback(debug)
        # After a signal whatever fails is its consequence (C code may turn the interrupt
        # into another error): the run was stopped, not broken.
        if _interrupted(exc) or interrupts.fired():
            return interrupts.exit_code()
        if _is_click_error(exc):
            sys.stderr.write(_usage_line(exc) + "\n")
            return int(ExitCode.USAGE)
        no_room = _no_room(exc)
        if no_room is not None:
            sys.stderr.write(f"error: {visible(str(no_room), one_line=True)}\n")
            return int(no_room.exit_code)
        first_line = visible(str(exc).splitlines()[0]) if str(exc) else ""
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {first_line} "
            "(a bug; re-run with --debug and report it)\n"
        )
        return int(ExitCode.INTERNAL)


def _interrupted(exc: BaseException) -> bool:
    """Whether Ctrl-C is what failed: Python wraps a KeyboardInterrupt raised while a class is
    being made (`__set_name__`, during an import) in a RuntimeError, with it as the cause."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _no_room(exc: BaseException) -> YaotuError | None:
    """A full disk or file-size limit met by a file that is not an output (numba's compile
    cache, a scratch folder): the user's situation, not a bug; its error, or None."""
    from yaotu_trace.files import NO_ROOM_ERRNOS, write_error

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError) and cause.errno in NO_ROOM_ERRNOS:
            where = cause.filename or "a working file of the run (a cache or scratch file)"
            return write_error(str(where), cause)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _invoke(args: list[str]) -> int:
    """Import and run the command: its exit code."""
    import typer
    import typer.main

    from yaotu_trace.cli.app import app
    from yaotu_trace.cli.coercion import lighten

    _register_commands(args)
    command = typer.main.get_command(app)
    lighten(command)
    # Outside standalone mode typer returns an Exit's code (130 for a KeyboardInterrupt, which
    # SIGTERM and SIGHUP raise too) and re-raises Abort (end of input at a prompt); a broken pipe
    # it turns into exit 1 (a failed check's code), so its cause is raised again here.
    try:
        result = command.main(args=args, prog_name="trace", standalone_mode=False)
    except typer.Abort as exc:
        raise KeyboardInterrupt from exc
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):
            raise exc.__context__ from None
        raise
    if result == ExitCode.INTERRUPTED:
        return interrupts.exit_code()
    return int(result) if isinstance(result, int) else int(ExitCode.OK)


def _show_traceback(debug: bool) -> None:
    """`--debug`: the traceback of the exception being handled, on stderr."""
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)


def _usage_line(exc: Exception) -> str:
    """Click's usage error as one line, like every other error, with where to read more."""
    text = exc.format_message()  # type: ignore[attr-defined]
    message = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    message = message.replace("Value error, ", "")  # typer's validation prefix
    context = getattr(exc, "ctx", None)
    path = getattr(context, "command_path", None) or "trace"
    return f"error: {visible(message.rstrip('.'), one_line=True)} (see '{path} --help')"


def _is_click_error(exc: Exception) -> bool:
    """Usage errors of click (vendored by newer typer): they know how to show themselves."""
    return callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code")


def run() -> None:
    """Console-script entry point: the exit code of `main`, and a quiet interpreter shutdown."""
    interrupts.install()
    try:
        streams.prepare()
        code = main()
        interrupts.ignore()
    except KeyboardInterrupt:
        code = interrupts.exit_code()
        interrupts.ignore()
    if code == ExitCode.BROKEN_PIPE:
        streams.discard_output()
    # NOTE: CPython remembers a KeyboardInterrupt that left code run by exec() or eval() of a
    # string (dataclasses and numba make functions that way), even one caught later, and at exit
    # kills the process with SIGINT instead of returning this code. Running such code once more
    # clears that memory.
    exec("")
    sys.exit(code)
