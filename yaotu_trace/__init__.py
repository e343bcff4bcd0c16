"""yaotu-trace: workload analyzer for LLM-inference request traces.

Every `trace` command is also a function of this package, from options (keyword arguments
with the command line's meaning) to the finished `Report` the command renders; see
docs/python-api.md. They are loaded on first use, so that `import yaotu_trace` (the command
line does it for `--help`) costs no pandas, pyarrow or numba.
"""

from __future__ import annotations

from yaotu_trace._version import __version__

# NOTE: no `typing` at run time. `trace` imports this package before it can install its Ctrl-C
# handler (yaotu_trace.cli), and `typing` (with `re`) was most of that time: a Ctrl-C in it is
# Python's traceback instead of a silent exit 130.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Public name → the module of `yaotu_trace.commands` that defines it under that name.
_API = {
    "analyze": "analyze",
    "replay": "replay",
    "sweep": "sweep",
    "diagnose": "diagnose",
    "simulate": "simulate",
    "compare": "compare",
    "check": "check",
    "report": "report",
    "convert": "convert",
    "generate": "generate",
    "load_trace": "load",
    "TraceInput": "load",
}
__all__ = [
    "TraceInput",
    "__version__",
    "analyze",
    "check",
    "compare",
    "convert",
    "diagnose",
    "generate",
    "load_trace",
    "replay",
    "report",
    "simulate",
    "sweep",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'yaotu_trace' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"yaotu_trace.commands.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


if TYPE_CHECKING:
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.commands.check import check
    from yaotu_trace.commands.compare import compare
    from yaotu_trace.commands.convert import convert
    from yaotu_trace.commands.diagnose import diagnose
    from yaotu_trace.commands.generate import generate
    from yaotu_trace.commands.load import TraceInput, load_trace
    from yaotu_trace.commands.replay import replay
    from yaotu_trace.commands.report import report
    from yaotu_trace.commands.simulate import simulate
    from yaotu_trace.commands.sweep import sweep
