"""Memory checks before the replay's large allocations: a clear error instead of an OOM kill.

The replay's big arrays (id tables, per-block arrays, the ideal pass's prefix table) are sized
before they are allocated, so the need is known up front. `require` compares it with what the
machine can still give: `MemAvailable` from /proc/meminfo, capped by the cgroup limit (v2
`memory.max − memory.current`, or v1 `memory.limit_in_bytes − memory.usage_in_bytes`) when
one is set. Where neither is readable (not Linux) the check passes.

Passes that run side by side on threads (a tier curve's points, `--jobs`) each hold their need
while they run (`reserved`): what the machine reports available does not yet count the pages
another pass has asked for but not touched, so each would pass alone and together be killed.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path

from yaotu_trace.errors import ResourceLimitError

GIB = 2**30
# Fresh pages are touched once they are used, so a need slightly above what is available may
# still fit as the kernel reclaims caches; refuse only beyond this margin.
_SLACK = 1.05


# Where a cgroup states its limit and its usage: v2, then v1.
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    if not text or text == b"max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _mem_available() -> int | None:
    """`MemAvailable` of /proc/meminfo in bytes (its third line; the first 4 kB hold it)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            text = f.read(4096)
        at = text.index(b"MemAvailable:") + len(b"MemAvailable:")
        return int(text[at:text.index(b"kB", at)]) * 1024
    except (OSError, ValueError):
        return None


@functools.cache
def _cgroup_files() -> tuple[tuple[str, str], ...]:
    """The cgroup files this process can read (they do not come and go while it runs): every
    replay asks what is available, and a file that is not there costs as much to look for as
    one that is to read."""
    return tuple(pair for pair in _CGROUP_FILES if all(Path(p).exists() for p in pair))


def available_bytes() -> int | None:
    """Bytes this process can still allocate, or None when the system does not say."""
    limits = []
    for limit_path, used_path in _cgroup_files():
        limit, used = _read_int(limit_path), _read_int(used_path)
        if limit is not None and used is not None and limit < 2**60:
            limits.append(max(limit - used, 0))
    candidates = [v for v in (_mem_available(), *limits) if v is not None]
    return min(candidates) if candidates else None


def require(needed_bytes: int, what: str, hint: str = "") -> None:
    """Raise `ResourceLimitError` when `needed_bytes` more than what is available."""
    avail = available_bytes()
    if avail is None or needed_bytes <= avail * _SLACK:
        return
    tail = f"; {hint}" if hint else ""
    raise ResourceLimitError(
        f"{what} needs about {needed_bytes / GIB:.1f} GiB of memory but only "
        f"{avail / GIB:.1f} GiB is available{tail}"
    )


class _Held:
    """The needs of the passes running in this process, and a condition to wait on."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.bytes = 0
        self.passes = 0
        self.mine = threading.local()  # whether this thread holds a need (a pass in a pass)


_HELD = _Held()


@contextlib.contextmanager
def reserved(needed_bytes: int, what: str, hint: str = "") -> Iterator[None]:
    """`require` for a pass that may run beside others on threads: its need is held while the
    block runs, and a pass that would not fit beside the ones running waits for them to end
    (the passes then run one after another). It is refused only when it does not fit alone.
    The held needs count pages already touched twice, so a pass may wait when it would have
    fit; it is never let in when it would not."""
    inner = getattr(_HELD.mine, "holds", False)
    with _HELD.changed:
        while _HELD.passes and not inner:
            avail = available_bytes()
            if avail is None or needed_bytes + _HELD.bytes <= avail * _SLACK:
                break
            _HELD.changed.wait()
        else:
            require(needed_bytes, what, hint)
        _HELD.bytes += needed_bytes
        _HELD.passes += 1
    _HELD.mine.holds = True
    try:
        yield
    finally:
        _HELD.mine.holds = inner
        with _HELD.changed:
            _HELD.bytes -= needed_bytes
            _HELD.passes -= 1
            _HELD.changed.notify_all()
