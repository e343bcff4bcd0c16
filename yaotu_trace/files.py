"""Writing outputs so that a reader never sees half of one and no input is ever replaced.

Every output of every command is written through `replace_atomically`:

- a regular file is filled as a temporary file in its own folder and renamed over it; a symlink
  is followed, so the file it points to is updated and the link kept (as `>` would);
- a stream (a FIFO, a terminal, `/dev/stdout`, `/dev/fd/N`, a process substitution) cannot be
  renamed over: the output is filled in a temporary file and copied into the stream once whole;
- `-` is standard output.

Inside `all_or_nothing(targets)` the declared outputs (and standard output) are published only
once the block has succeeded, so a command with two outputs writes both or neither, and an
error or Ctrl-C leaves no output and no temporary file behind; scratch files written on the way
are not held back. `check_outputs` runs before any work: every output is writable, no two outputs
name the same file, and no output is one of the inputs (by device and inode, so `./x`, an
absolute path, a hard link and a symlink are all recognised); `check_inputs` refuses an input
that can be read only once (a named pipe) where it is read more than once.

A write that the machine refuses (a full disk or quota, the file-size limit, a failing device, a
closed stdout) is a `WriteError` (exit 5) naming the output and the bytes it needed
(`write_error`); the temporary file is removed first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from yaotu_trace.errors import OutputError, TraceReadError, WriteError

STDOUT = Path("-")
# What a write fails with when the machine has no room for it: exit 5 wherever it happens.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# The signals `trace` turns into a clean exit (cli/interrupts.py): held while outputs publish.
CLEANUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class TargetKind(StrEnum):
    """How an output is published."""

    FILE = "file"
    STREAM = "stream"
    STDOUT = "stdout"


@dataclass(frozen=True, slots=True)
class Target:
    """Where one output goes: `path` is the file to replace (symlinks resolved) or the stream."""

    given: Path
    kind: TargetKind
    path: Path

    def describe(self, flag: str) -> str:
        return f"{flag} {self.given}" if flag else str(self.given)


def resolve_target(path: Path, flag: str = "") -> Target:
    """Classify an output path; a missing folder or a folder as the target is an OutputError."""
    if str(path) == "-":
        return Target(path, TargetKind.STDOUT, path)
    where = f"{flag} {path}" if flag else str(path)
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{where}: cannot be written ({exc.strerror or exc}); pick another "
                          "path") from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{where}: is a folder; name a file in it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        return Target(path, TargetKind.STREAM, path)
    real = Path(os.path.realpath(path))
    if not real.parent.is_dir():
        raise OutputError(f"{where}: folder '{real.parent}' does not exist; create it or pick "
                          "another path")
    return Target(path, TargetKind.FILE, real)


def _identity(path: Path) -> tuple[int, int] | None:
    """Device and inode of the file a path names (through symlinks); None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _identities(path: Path) -> set[tuple[int, int]]:
    """The identities of a file, or of a folder and everything under it (a folder trace)."""
    own = _identity(path)
    if own is None:
        return set()
    found = {own}
    if path.is_dir():
        for root, _folders, names in os.walk(path):
            for name in (*_folders, *names):
                ident = _identity(Path(root) / name)
                if ident is not None:
                    found.add(ident)
    return found


InputPaths = Mapping[str, Path | Sequence[Path] | None]


def check_outputs(outputs: Mapping[str, Path | None], inputs: InputPaths) -> dict[str, Target]:
    """Refuse, before any work, outputs that cannot be written or would replace an input.

    `outputs` and `inputs` map the option that named a path (`-o`, `--steps`, `TRACE`) to it.
    A folder input also protects what it holds, and nothing may be written into it.
    """
    known: list[tuple[str, Path, set[tuple[int, int]], bool]] = []
    for label, value in inputs.items():
        paths = [] if value is None else [value] if isinstance(value, Path) else list(value)
        known.extend((label, path, _identities(path), path.is_dir())
                     for path in paths if str(path) != "-")
    targets: dict[str, Target] = {}
    seen: dict[object, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        target = resolve_target(path, flag)
        ident = None if target.kind is TargetKind.STDOUT else _identity(path)
        parent = _identity(target.path.parent) if target.kind is TargetKind.FILE else None
        for label, in_path, ids, is_folder in known:
            if ident is not None and ident in ids:
                raise OutputError(f"{flag} {path}: is the input {label} {in_path}; inputs are "
                                  "never overwritten, pick another output path")
            if is_folder and parent is not None and parent in ids:
                raise OutputError(f"{flag} {path}: is inside the trace folder {in_path}, which "
                                  "would then read it as part of the trace; write it elsewhere")
        key: object = ident or target.path
        if key in seen:
            raise OutputError(f"{flag} {path} and {seen[key]} name the same output; give each "
                              "its own path")
        seen[key] = f"{flag} {path}"
        _probe_writable(target, flag)
        targets[flag] = target
    return targets


def check_inputs(inputs: InputPaths, read_once: Iterable[str] = ()) -> None:
    """Refuse, before any work, an input that is not a file or folder (a named pipe, a process
    substitution, a device): a trace is read more than once (its format is sniffed from its
    first bytes, then it is read; Parquet is read by seeking), which such a stream cannot give.
    The options in `read_once` are read whole in one go, and may be streams.
    """
    allowed = set(read_once)
    for label, value in inputs.items():
        paths = [] if value is None else [value] if isinstance(value, Path) else list(value)
        for path in paths:
            if label in allowed or str(path) == "-":
                continue
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue  # missing: the reader names it
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                continue
            if stat.S_ISFIFO(mode):
                raise TraceReadError(f"{path}: is a named pipe (or a process substitution), "
                                     f"which can be read only once, and {label} is read more "
                                     "than once; save it to a file first and give that file")
            kind = "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise TraceReadError(f"{path}: is {kind}, not a file, and {label} is read as a file "
                                 "(more than once); save it to a file first and give that file")


def _probe_writable(target: Target, flag: str) -> None:
    """Fail now, not after the work, when an output could not be written."""
    where = target.describe(flag)
    if target.kind is TargetKind.STREAM and not os.access(target.path, os.W_OK):
        raise OutputError(f"{where}: is not writable; pick another path")
    if target.kind is not TargetKind.FILE:
        return
    # Held: a signal between making the probe and removing it would leave it behind.
    with signals_held():
        try:
            fd, name = tempfile.mkstemp(prefix=f".{target.path.name}.", dir=target.path.parent)
        except OSError as exc:
            if exc.errno in NO_ROOM_ERRNOS:
                raise write_error(where, exc, folder=target.path.parent) from exc
            raise OutputError(f"{where}: cannot write in '{target.path.parent}' "
                              f"({exc.strerror or exc}); pick another path") from exc
        os.close(fd)
        os.unlink(name)


@dataclass
class _Batch:
    """Outputs written but not yet published: each a (publish, discard) pair."""

    held: frozenset[Path]
    pending: list[tuple[Callable[[], None], Callable[[], None]]] = field(default_factory=list)

    def publish(self) -> None:
        with signals_held():
            try:
                while self.pending:
                    publish, _discard = self.pending.pop(0)
                    publish()
            finally:
                self.discard()

    def discard(self) -> None:
        while self.pending:
            _publish, discard = self.pending.pop()
            discard()


_batch: ContextVar[_Batch | None] = ContextVar("yaotu_trace_output_batch", default=None)


@contextlib.contextmanager
def all_or_nothing(targets: Iterable[Target] = ()) -> Iterator[None]:
    """Publish the outputs written inside the block together, once it has succeeded.

    Held back are standard output and the `targets` (from `check_outputs`); any other file
    written in the block is a scratch file and is written at once.
    """
    batch = _Batch(held=frozenset({STDOUT, *(t.path for t in targets)}))
    token = _batch.set(batch)
    try:
        yield
    except BaseException:
        batch.discard()
        raise
    else:
        batch.publish()
    finally:
        _batch.reset(token)


def defer(publish: Callable[[], None], discard: Callable[[], None] = lambda: None,
          target: Path = STDOUT) -> None:
    """Publish now, or when the enclosing `all_or_nothing()` block that holds `target` ends."""
    batch = _batch.get()
    if batch is None or target not in batch.held:
        publish()
    else:
        batch.pending.append((publish, discard))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM, SIGHUP) while outputs are published, so that it cannot fall
    between two of them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, CLEANUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CLEANUP_SIGNALS)


@contextlib.contextmanager
def scratch_folder(beside: Path | None = None, prefix: str = "yaotu-trace-") -> Iterator[Path]:
    """A scratch folder (in `beside`, else the temporary folder), removed whole however the
    block ends.

    Made and removed with signals held: a Ctrl-C between making it and owning it, or in the
    middle of its removal, would leave it behind. (`tempfile.TemporaryDirectory` gives up its
    finalizer before removing, so an interrupt that lands in `shutil.rmtree` leaves the rest
    of the folder for good.)
    """
    folder: str | None = None
    try:
        with signals_held():
            folder = tempfile.mkdtemp(prefix=prefix, dir=beside)
        yield Path(folder)
    finally:
        if folder is not None:
            with signals_held():
                shutil.rmtree(folder, ignore_errors=True)


def replace_atomically(path: Path, write: Callable[[Path], None], *,
                       size_bytes: int | None = None) -> None:
    """Let `write` fill a temporary file, then publish it at `path` (see the module docstring).

    The result has the permissions `open()` would give (mkstemp creates 0600), and a failed or
    interrupted write leaves nothing behind. `size_bytes`, when the caller knows it, is what a
    full disk's error says the output needs.
    """
    target = resolve_target(path)
    folder = target.path.parent if target.kind is TargetKind.FILE else None
    prefix = f".{target.path.name}." if folder is not None else "yaotu-trace-output-"
    tmp: Path | None = None
    try:
        # Held: a signal between making the file and naming it here would leave it behind.
        with signals_held():
            tmp = _temporary(target, path, prefix, folder, size_bytes)
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        made = tmp
        # Inside the `try`: a signal before the output is handed over still removes it.
        defer(lambda: _publish(target, made), lambda: made.unlink(missing_ok=True),
              target.path)
    except OSError as exc:
        written = None if tmp is None else _size_of(tmp)
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if exc.errno in NO_ROOM_ERRNOS and tmp is not None:
            raise _spool_error(target, exc, folder, size_bytes, written) from exc
        raise
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def _temporary(target: Target, path: Path, prefix: str, folder: Path | None,
               size_bytes: int | None) -> Path:
    """A new empty file beside the output (or in the temporary folder for a stream)."""
    try:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=folder)
    except OSError as exc:
        if exc.errno in NO_ROOM_ERRNOS:
            raise _spool_error(target, exc, folder, size_bytes, None) from exc
        raise OutputError(f"{path}: cannot be written ({exc.strerror or exc}); pick another "
                          "path") from exc
    os.close(fd)
    return Path(name)


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _name(target: Target) -> str:
    return "stdout" if target.kind is TargetKind.STDOUT else str(target.given)


def _spool_error(target: Target, exc: OSError, folder: Path | None, needed_bytes: int | None,
                 written_bytes: int | None) -> OutputError:
    """A write error of the temporary file that holds an output until it is whole."""
    if folder is not None:
        return write_error(_name(target), exc, folder=folder, needed_bytes=needed_bytes,
                           written_bytes=written_bytes)
    spool = Path(tempfile.gettempdir())
    return write_error(f"{_name(target)} (held in '{spool}' until whole; TMPDIR moves it)", exc,
                       folder=spool, needed_bytes=needed_bytes, written_bytes=written_bytes)


def _publish(target: Target, tmp: Path) -> None:
    try:
        if target.kind is TargetKind.FILE:
            os.replace(tmp, target.path)
        elif target.kind is TargetKind.STREAM:
            with tmp.open("rb") as src, open(target.path, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            with tmp.open("rb") as src:
                sys.stdout.flush()
                shutil.copyfileobj(src, sys.stdout.buffer)
                sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise write_error(_name(target), exc, needed_bytes=_size_of(tmp)) from exc
    finally:
        tmp.unlink(missing_ok=True)


def write_error(where: str, exc: OSError, *, folder: Path | None = None,
                needed_bytes: int | None = None, written_bytes: int | None = None
                ) -> OutputError:
    """The one line for an output that could not be written: a `WriteError` (exit 5) when the
    machine refused it (no room, a failing device, a closed stream), else an `OutputError`.

    `needed_bytes` is the whole output's size when known, `written_bytes` how much of it was
    written when the write failed; `folder` is where its free space is read.
    """
    needs = _needs(needed_bytes, written_bytes)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on the disk" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        free = _free_bytes(folder)
        room = "" if free is None else f"; '{folder}' has {free:,} bytes free"
        return WriteError(f"{where}: {what}{': ' + needs if needs else ''}{room}; free some "
                          "space, or write it to another disk")
    if exc.errno == errno.EFBIG:
        limit = _file_size_limit()
        if limit is not None:
            if needed_bytes is None:
                needs = f"it needs more than {limit:,} bytes"
            return WriteError(f"{where}: file too large: {needs}, and the file-size limit (ulimit "
                              f"-f) is {limit:,} bytes; raise it (ulimit -f unlimited) and run "
                              "again")
        return WriteError(f"{where}: file too large for its filesystem"
                          f"{': ' + needs if needs else ''}; write it to another disk")
    if exc.errno == errno.EBADF:
        return WriteError(f"{where}: is closed, so the report has nowhere to go; redirect it "
                          "(> report.txt) or pass -o FILE")
    if exc.errno == errno.EIO:
        return WriteError(f"{where}: the device failed while it was written (Input/output "
                          "error); check the disk and run again, or pick another path")
    return OutputError(f"{where}: cannot be written ({exc.strerror or exc}); pick another path")


def _needs(needed_bytes: int | None, written_bytes: int | None) -> str:
    if needed_bytes is not None:
        return f"it needs {needed_bytes:,} bytes"
    if written_bytes:
        return f"it needs more than the {written_bytes:,} bytes written"
    return ""


def _free_bytes(folder: Path | None) -> int | None:
    """Bytes free to this user in `folder`'s filesystem (None when it cannot be read)."""
    if folder is None:
        return None
    try:
        vfs = os.statvfs(folder)
    except OSError:
        return None
    return vfs.f_bavail * vfs.f_frsize


def _file_size_limit() -> int | None:
    """This process's file-size limit in bytes (`ulimit -f`), or None when there is none."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft
