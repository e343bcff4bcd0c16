"""Compressed traces, read transparently: production traces are kept as .gz, .zst, .bz2, .xz.

A file is compressed when its first bytes are a codec's magic number, whatever its name; a name
that ends in a codec's extension but does not start with its magic is refused as damaged or
misnamed. The trace format is told by the name without the codec's extension (`x.jsonl.gz` is
JSON Lines). Text is decompressed as it is read, one block at a time, so a reader that streams
(JSON Lines, CSV, `trace convert` in parts) streams a compressed file too. A decompression error
(bad CRC, a truncated stream, corrupt data) is a one-line `TraceReadError` naming the file and
the codec, wherever in the file it is met.

gzip, bzip2 and xz come from the standard library, zstd from pyarrow's codec.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from yaotu_trace.errors import TraceReadError

BLOCK_BYTES = 1 << 20  # decompressed bytes per read


# Each opener returns a stream that `_Decompressed` owns and closes.
def _open_gzip(path: Path) -> Any:
    return gzip.open(path, "rb")


def _open_zstd(path: Path) -> Any:
    return pa.input_stream(str(path), compression="zstd")


def _open_bzip2(path: Path) -> Any:
    return bz2.open(path, "rb")


def _open_xz(path: Path) -> Any:
    return lzma.open(path, "rb")


@dataclass(frozen=True, slots=True)
class Codec:
    """A compression format: its name in messages, its file extensions, its magic number."""

    name: str
    extensions: tuple[str, ...]
    magic: tuple[bytes, ...]
    open: Callable[[Path], Any]

    def matches(self, head: bytes) -> bool:
        """Whether a file starting with `head` is in this format."""
        return any(head.startswith(m) for m in self.magic)


CODECS = (
    Codec("gzip", (".gz", ".gzip"), (b"\x1f\x8b",), _open_gzip),
    Codec("zstd", (".zst", ".zstd"), (b"\x28\xb5\x2f\xfd",), _open_zstd),
    Codec("bzip2", (".bz2",), tuple(b"BZh" + bytes([c]) for c in b"123456789"), _open_bzip2),
    Codec("xz", (".xz",), (b"\xfd7zXZ\x00",), _open_xz),
)
EXTENSIONS = tuple(ext for codec in CODECS for ext in codec.extensions)
MAGIC_BYTES = 6

# What the codecs raise on damaged data: gzip's BadGzipFile and bz2's "Invalid data stream" are
# OSErrors, a truncated stream is EOFError, pyarrow's zstd raises OSError or ArrowException.
_DAMAGE: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError, zlib.error,
                                             lzma.LZMAError)


def _damage_errors() -> tuple[type[BaseException], ...]:
    return (*_DAMAGE, pa.ArrowException)


def named_codec(path: Path) -> Codec | None:
    """The codec the file name claims by its last extension, if any."""
    suffix = path.suffix.lower()
    return next((c for c in CODECS if suffix in c.extensions), None)


def codec_of(path: Path) -> Codec | None:
    """The codec a trace file is compressed with, from its first bytes; None when plain.

    A file that is not a regular file (a pipe, a device) is judged by its name only, since
    reading its first bytes would consume them.
    """
    named = named_codec(path)
    if not path.is_file():
        return named
    try:
        with path.open("rb") as fh:
            head = fh.read(MAGIC_BYTES)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror}); check permissions") from exc
    found = next((c for c in CODECS if c.matches(head)), None)
    if named is not None and found is None:
        raise TraceReadError(
            f"{path}: named {path.suffix} but not {named.name} data (its first bytes are not "
            f"{named.name}'s); the file is damaged or misnamed: copy it again, or rename it "
            f"without {path.suffix}"
        )
    return found


def format_suffix(path: Path) -> str:
    """The extension that names the trace format: `.jsonl` for `x.jsonl.gz` (lower case)."""
    name = path.name.lower()
    for ext in EXTENSIONS:
        if name.endswith(ext) and len(name) > len(ext):
            return Path(name[: -len(ext)]).suffix
    return path.suffix.lower()


def plain_stem(path: Path) -> str:
    """The file name without its compression and format extensions: `trace_0001` for
    `trace_0001.json.gz`."""
    name = path.name
    for ext in EXTENSIONS:
        if name.lower().endswith(ext) and len(name) > len(ext):
            name = name[: -len(ext)]
            break
    return Path(name).stem


def plain_names(name: str) -> tuple[str, ...]:
    """A file name and its compressed spellings, the plain one first (`0_trace.jsonl`, ...)."""
    return (name, *(name + ext for ext in EXTENSIONS))


def find_file(folder: Path, name: str) -> Path | None:
    """`folder/name`, or its compressed spelling (`name.gz`, ...), if one exists."""
    return next((folder / n for n in plain_names(name) if (folder / n).is_file()), None)


def is_compressed(path: Path) -> bool:
    """Whether the trace file is compressed (see `codec_of`)."""
    return codec_of(path) is not None


def damaged(path: Path, codec: Codec, exc: BaseException) -> TraceReadError:
    """The one-line error for a compressed file that cannot be decompressed."""
    reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    return TraceReadError(
        f"{path}: damaged {codec.name} file ({reason}); it is truncated or corrupt: copy it "
        "again or re-export the trace"
    )


class _Decompressed(io.RawIOBase):
    """A codec's stream whose decompression errors become one-line `TraceReadError`s."""

    def __init__(self, path: Path, codec: Codec) -> None:
        super().__init__()
        self._path, self._codec = path, codec
        self._errors = _damage_errors()
        try:
            self._stream = codec.open(path)
        except self._errors as exc:
            raise damaged(path, codec, exc) from exc

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        try:
            data = self._stream.read(len(view))
        except self._errors as exc:
            raise damaged(self._path, self._codec, exc) from exc
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(*self._errors):  # a read that met damage reported it
                self._stream.close()
        super().close()


def open_compressed(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is compressed; close it when done.

    Errors opening it or decompressing any part of it are `TraceReadError`s naming the file.
    """
    codec = codec_of(path)
    try:
        if codec is None:
            return path.open("rb")
        return io.BufferedReader(_Decompressed(path, codec), buffer_size=BLOCK_BYTES)
    except IsADirectoryError as exc:
        raise TraceReadError(f"{path}: is a folder; pass a trace file") from exc
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror}); check permissions") from exc


def read_bytes(path: Path) -> bytes:
    """All of the file's (decompressed) bytes."""
    with open_compressed(path) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise TraceReadError(f"{path}: cannot read ({exc.strerror}); check the file") from exc


def read_text(path: Path, what: str) -> str:
    """The file as UTF-8 text (a leading byte-order mark dropped); `what` says what to pass."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceReadError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); {what}"
        ) from exc
