"""Ctrl-C: exit 130, silently, wherever the process is when it comes.

Python's C-level SIGINT handler only sets a flag; the Python handler runs later, at the next
bytecode the main thread executes, and raises KeyboardInterrupt there. That is fine almost
everywhere, and harmful in three places, where this handler posts the interrupt again a moment
later instead, so that it lands in the first safe place:

- Anywhere inside numba. A compiled function's results are boxed by numba's C code, which calls
  back into Python (`numba.core.serialize._numba_unpickle`) once per returned array. A SIGINT
  that came during the compiled loop has its Python handler run at that callback's first
  bytecode; KeyboardInterrupt there makes the callback return NULL, which numba's tuple boxing
  stores without a check. The caller then unpacks a tuple holding NULL and crashes (SIGSEGV,
  exit 139: `trace simulate` in about 1 of 4 tries), or receives a result with an exception set
  (SystemError, exit 4). Numba's compiler and cache loader are Python too, and are not meant
  to stop half-way either.
- In a finalizer (`__del__`), where an exception is printed as "Exception ignored" and lost.
- In the temp-file steps of an atomic write (`tempfile`, `yaotu_trace.files` itself), between
  the temp file's creation and the `try` whose `finally` removes it.

After the first interrupt every further Ctrl-C is ignored, so that the cleanup it unwinds
(temp files removed by `finally`, worker processes terminated) runs to its end.
"""

from __future__ import annotations

import _thread
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

RETRY_S = 0.01  # how soon an interrupt that landed in an unsafe place is posted again
_UNSAFE_MODULES = frozenset({"tempfile", "yaotu_trace.files"})


class _State:
    fired = False  # the KeyboardInterrupt of this run has been raised


_state = _State()


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def unsafe(frame: FrameType | None) -> bool:
    """Whether raising KeyboardInterrupt in `frame` could crash or leak (see the module doc)."""
    if frame is None:
        return False
    if frame.f_code.co_name == "__del__" or _module(frame) in _UNSAFE_MODULES:
        return True
    caller: FrameType | None = frame
    while caller is not None:
        if _module(caller).partition(".")[0] == "numba":
            return True
        caller = caller.f_back
    return False


def _post_again(signum: int) -> None:
    if signal.getsignal(signum) is on_sigint:
        _thread.interrupt_main(signum)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler: KeyboardInterrupt once, where it is safe to raise one."""
    if _state.fired:
        return
    if unsafe(frame):
        retry = threading.Timer(RETRY_S, _post_again, args=(signum,))
        retry.daemon = True
        retry.start()
        return
    _state.fired = True
    raise KeyboardInterrupt


def install() -> None:
    """Handle Ctrl-C as above from now on (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        _state.fired = False
        signal.signal(signal.SIGINT, on_sigint)


def ignore() -> None:
    """Ignore Ctrl-C from now on: the interpreter's shutdown has nothing left to stop."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def handled() -> Iterator[None]:
    """Handle Ctrl-C as above inside the block, then restore the handler that was there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    install()
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)

