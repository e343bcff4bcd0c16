"""The standard streams as a shell may hand them over: closed, unable to encode, or read by
a reader that leaves early.

- A closed stdout or stderr (`trace analyze t.parquet >&-`) is None in Python, and the next file
  opened would take its descriptor (and a worker process would write into that file): the
  descriptor is held by /dev/null, and stdout refuses writes (the report then fails in one
  line, exit 5) while a closed stderr takes what is said to it and drops it.
- A stream whose encoding cannot write a character (`PYTHONIOENCODING=ascii`, a C locale)
  writes an ASCII stand-in (`x` for `×`, `-` for `─`), or `\\xe9` for a letter, so that a file
  name stays recognisable; the report is never lost for a character.
- A reader that closes the pipe early (`trace analyze t.parquet | head -1`) ends the run with
  exit 141, as SIGPIPE ends other tools (`discard_output` keeps the interpreter's last flush
  quiet).
- A non-blocking stdout or stderr (a pipe a Node.js or asyncio parent made): Python's writes
  fail with EAGAIN once the pipe is full, and what did not fit is lost while the run ends 0 (a
  report cut at 64 KiB). Such a stream is made blocking: the report waits for its reader.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import sys

FALLBACK = "yaotu-trace-ascii"
# ASCII stand-ins for the symbols the reports use; other characters are backslash-escaped.
_ASCII = {
    "×": "x", "÷": "/", "−": "-", "–": "-", "—": "-", "·": ".", "…": "...", "→": "->",
    "←": "<-", "≥": ">=", "≤": "<=", "≈": "~", "±": "+/-", "²": "^2", "µ": "u", "μ": "u",
    "Σ": "S", "τ": "tau", "α": "alpha", "▲": "^", "▔": "^", "✅": "ok", "❌": "x",
    "“": '"', "”": '"', "‘": "'", "’": "'",
}


def _stand_in(char: str) -> str:
    if char in _ASCII:
        return _ASCII[char]
    code = ord(char)
    if 0x2500 <= code <= 0x257F:  # box drawing: rich's table rules and frames
        import unicodedata

        name = unicodedata.name(char, "")
        if "HORIZONTAL" in name and "VERTICAL" not in name:
            return "-"
        if "VERTICAL" in name and "HORIZONTAL" not in name:
            return "|"
        return "+"
    if 0x2580 <= code <= 0x259F:  # block elements: the charts' bars
        return "#"
    return char.encode("ascii", "backslashreplace").decode("ascii")


def _fallback(err: UnicodeError) -> tuple[str, int]:
    """The codec error handler: ASCII stand-ins for what the stream cannot encode."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(_stand_in(c) for c in err.object[err.start:err.end]), err.end


class _ClosedBytes(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")


class _Closed(io.TextIOBase):
    """What a closed stdout becomes: a stream that refuses writes (EBADF), as the closed
    descriptor would, and is no terminal."""

    encoding = "utf-8"

    def __init__(self) -> None:
        super().__init__()
        self.buffer = _ClosedBytes()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")


codecs.register_error(FALLBACK, _fallback)


def prepare() -> None:
    """Make the standard streams safe to use for this process (see the module docstring)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for fd in (1, 2):
        try:
            if not os.get_blocking(fd):
                os.set_blocking(fd, True)
        except OSError:
            pass  # not a descriptor whose mode can change: written as it is
    if sys.stdout is None:
        sys.stdout = _Closed()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (the process's)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=FALLBACK)


def discard_output() -> None:
    """After a reader closed stdout (or stderr): send what is left to /dev/null, so that the
    interpreter's flush at exit does not fail (and print) again. Nothing is said after it."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)
