"""Writing output files so that a reader never sees half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Let `write` fill a temporary file next to `path`, then rename it over `path`.

    Readers never see a half-written file, the result has the permissions `open()` would give
    (mkstemp creates 0600), and a failed write leaves nothing behind.
    """
    parent = path.parent if str(path.parent) else Path(".")
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
