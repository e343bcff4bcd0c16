"""Ctrl-C, SIGTERM and SIGHUP: exit 128 + the signal, silently, wherever the process is.

SIGTERM (`kill`, a CI runner cancelling a job, `timeout`) and SIGHUP (the terminal closed) get
Ctrl-C's treatment: each is raised as a KeyboardInterrupt, so the same cleanup runs (temporary
files removed, worker processes stopped), and the exit code says which signal it was (130,
143, 129) as a shell would. What follows is said of SIGINT and holds for all three.

Python's C-level SIGINT handler only sets a flag; the Python handler runs later, at the next
point where the main thread checks for pending calls, and raises KeyboardInterrupt there. That
is fine almost everywhere, and harmful in three places. There this handler raises nothing, and
has the interrupt raised at the next line of the first frame up the stack that is outside:

- In numba's boxing of a compiled function's results. Numba's C code calls back into Python
  (`numba.core.serialize._numba_unpickle`) once per returned array; a SIGINT that came during
  the compiled loop has its handler run at that callback's first check. A KeyboardInterrupt
  there makes the callback return NULL, which numba's tuple boxing stores without a check: the
  caller then unpacks a tuple holding NULL and crashes (SIGSEGV, exit 139: `trace simulate` in
  about 1 of 4 tries), or receives a result with an exception set (SystemError, exit 4).
  Deferred, the interrupt is raised in the caller once the call has returned.
- In llvmlite, while numba compiles: it calls back into Python through ctypes, which prints an
  exception raised in a callback ("Exception ignored on calling ctypes callback") and drops it;
  the compilation then fails as if it were a bug (exit 4).
- In an import: a C extension's initialisation (numba's `_devicearray`) turns an exception in
  the Python code it runs into an ImportError, after printing its traceback. Deferred, the
  interrupt is raised in the code that asked for the import, once it is done.
- In a finalizer (`__del__`), where an exception is printed as "Exception ignored" and lost.
- In the temp-file steps of an atomic write (`tempfile`, `yaotu_trace.files` itself), between
  the temp file's creation and the `try` whose `finally` removes it; and in a scratch
  folder's removal (`shutil.rmtree`), which cut short leaves the rest of the folder behind.
  Those steps hold the signals, but only in the main thread: one that another thread took
  still sets the flag the main thread acts on, in whatever frame it is, so an interrupt
  anywhere below a `tempfile` or `shutil` frame (in the `os.path` code they call) waits for
  their caller.
- In a worker's launch (`multiprocessing.context`'s `_Popen`, `--jobs`): the new process reads
  what this one writes it (how to start, what to run) as it starts; cut short, it fails to
  read it and prints a traceback ("EOFError: Ran out of input") beside this run's silent exit.
  The worker's signals are blocked meanwhile, but a process-directed signal may reach another
  thread (Arrow's, numba's), whose C handler still sets the flag the main thread acts on.

The deferred interrupt is raised by a trace function set on that frame (tracing is on only
until it fires): posting the signal again instead would be handled at the next check, which in
a loop of compiled calls is always the next boxing callback, so it would never get out.

After the first interrupt every further Ctrl-C (or SIGTERM, SIGHUP) is ignored, so that the
cleanup it unwinds (temp files removed by `finally`, worker processes terminated) runs to its
end.
"""

from __future__ import annotations

import signal
import sys

# The signals handled so; each exits 128 + its number.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Only `signal` and `sys` at import: `trace` installs this handler before it imports anything
# heavier, so that a Ctrl-C during its start-up is handled too.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

_UNSAFE_MODULES = frozenset({"tempfile", "yaotu_trace.files"})
# Packages whose frames may sit below C code that cannot take an exception: an interrupt in
# them, or in anything they call, waits for their caller. The import machinery's frames count:
# the module being imported may be a C extension's. A worker's launch counts: the process it
# starts reads its orders from a pipe that an interrupt would leave half written.
_CALLBACK_PACKAGES = ("numba.core.serialize", "llvmlite", "_frozen_importlib",
                      "_frozen_importlib_external", "importlib._bootstrap",
                      "importlib._bootstrap_external", "multiprocessing.context",
                      # Steps that must run whole once begun, whatever Python code they call
                      # (`os.path`'s): a temporary file made and not yet owned, a folder half
                      # removed.
                      "tempfile", "shutil")


class _State:
    fired = False  # the KeyboardInterrupt of this run is raised, or due
    signum = int(signal.SIGINT)  # the signal that fired it


_state = _State()


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _in_callback_package(frame: FrameType) -> bool:
    module = _module(frame)
    return any(module == p or module.startswith(p + ".") for p in _CALLBACK_PACKAGES)


def _unsafe_here(frame: FrameType) -> bool:
    return frame.f_code.co_name == "__del__" or _module(frame) in _UNSAFE_MODULES


def resume_frame(frame: FrameType | None) -> FrameType | None:
    """Where an interrupt that came in `frame` is raised: `frame` itself when that is safe.

    Below numba's boxing callback or llvmlite the caller of the outermost of their frames (the
    callback may be in cloudpickle or pickle, called from it); in a finalizer or a temp-file
    step the first frame outside.
    """
    if frame is None:
        return None
    outermost: FrameType | None = None
    caller: FrameType | None = frame
    while caller is not None:
        if _in_callback_package(caller):
            outermost = caller
        caller = caller.f_back
    resume = outermost.f_back if outermost is not None else frame
    while resume is not None and _unsafe_here(resume):
        resume = resume.f_back
    return resume


def _raise_at(frame: FrameType) -> None:
    """Raise KeyboardInterrupt at `frame`'s next line (or return), then stop tracing."""
    previous = sys.gettrace()

    def fire(traced: FrameType, event: str, arg: object) -> None:
        sys.settrace(previous)
        traced.f_trace = None
        raise KeyboardInterrupt

    frame.f_trace = fire
    # A frame's own trace function is called only while a global one is set.
    sys.settrace(previous or _no_new_frames)


def _no_new_frames(frame: FrameType, event: str, arg: object) -> None:
    return None


def on_signal(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGINT, SIGTERM and SIGHUP: KeyboardInterrupt once, where it is safe to
    raise one."""
    if _state.fired:
        return
    resume = resume_frame(frame)
    if resume is None:
        return
    _state.fired = True
    _state.signum = signum
    if resume is frame:
        raise KeyboardInterrupt
    _raise_at(resume)


def install() -> object:
    """Handle Ctrl-C, SIGTERM and SIGHUP as above from now on; returns the handlers that were
    there.

    Only the main thread can set a handler: elsewhere this does nothing (and returns None).
    """
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    try:
        for signum in SIGNALS:
            signal.signal(signum, on_signal)
    except ValueError:
        return None
    _state.fired = False
    _state.signum = int(signal.SIGINT)
    return previous


def fired() -> bool:
    """Whether a signal has stopped this run (its interrupt raised, or due)."""
    return _state.fired


def exit_code() -> int:
    """The exit code of an interrupted run: 128 + the signal that stopped it (130 for a
    KeyboardInterrupt that no signal raised)."""
    return 128 + (_state.signum if _state.fired else int(signal.SIGINT))


def restore(previous: object) -> None:
    """Put back the handlers `install` replaced (when it replaced them)."""
    if isinstance(previous, dict):
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def ignore() -> None:
    """Ignore the three signals from now on: the interpreter's shutdown has nothing left to
    stop."""
    restore(dict.fromkeys(SIGNALS, signal.SIG_IGN))
