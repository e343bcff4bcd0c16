"""Packages that load their names on first use, so that importing one part costs nothing else.

`trace --help` and the option types (`ingest.formats`, `prefix.rules`, `sim.config`,
`sim.workloads`) import a package before its light module; with `lazy_names` in the
package's `__init__`, that package does not pull in pandas, pyarrow or numba until one of its
heavy names is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


def lazy_names(package: str, module: str, names: Iterable[str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` that take `names` from `package.module`."""
    exported = frozenset(names)
    namespace = importlib.import_module(package).__dict__

    def getattr_(name: str) -> Any:
        if name not in exported:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | exported)

    return getattr_, dir_
