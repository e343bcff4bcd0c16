"""Packages that load their names on first use, so that importing one part costs nothing else.

`trace --help` and the option types (`ingest.formats`, `prefix.rules`, `sim.config`,
`sim.workloads`) import a package before its light module, and `import yaotu_trace` comes before
any command. A package lists each name it offers once, with the module that defines it, and
`lazy_names` makes that list its `__getattr__`, `__dir__` and `__all__`: the package pulls in
pandas, pyarrow or numba only when one of its heavy names is used. For mypy the package imports
the same names under `if TYPE_CHECKING:`; tests/test_lazy.py holds the two lists equal.
"""

from __future__ import annotations

import sys

# NOTE: no `typing` (nor `importlib`) at run time: `yaotu_trace` uses this module before `trace`
# installs its Ctrl-C handler, and a Ctrl-C during those imports would be Python's traceback.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_names(package: str, names: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The `__getattr__`, `__dir__` and `__all__` of `package`, whose `names` map each name it
    offers to the module that defines it (relative to `package`: "load", "commands.analyze")."""
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = f"{package}.{module}"
        __import__(where)
        value = getattr(sys.modules[where], name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_, sorted(names)
