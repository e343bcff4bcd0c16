"""yaotu-trace: workload analyzer for LLM-inference request traces.

Every `trace` command is also a function of this package, from options (frozen option values
and keyword arguments with the command line's meaning) to the finished `Report` the command
renders; see docs/python-api.md. They are loaded on first use, so that `import yaotu_trace`
(the command line does it for `--help`) costs no pandas, pyarrow or numba.
"""

from __future__ import annotations

import sys

from yaotu_trace._lazy import lazy_names
from yaotu_trace._version import __version__

# NOTE: no `typing` at run time. `trace` imports this package before it can install its Ctrl-C
# handler (yaotu_trace.cli), and `typing` (with `re`) was most of that time: a Ctrl-C in it is
# Python's traceback instead of a silent exit 130.
TYPE_CHECKING = False

# Every public name → the module that defines it under that name: each command's function
# (in `yaotu_trace.commands`) and the option values the commands take.
__getattr__, __dir__, _api = lazy_names(__name__, {
    "DiagnosisOptions": "diagnosis.options",
    "EngineOptions": "sim.options",
    "GenerateOptions": "sim.generate",
    "Parallelism": "prefix.partition",
    "ReplayOptions": "prefix.options",
    "RunBefore": "commands.load",
    "TraceInput": "commands.load",
    "analyze": "commands.analyze",
    "check": "commands.check",
    "compare": "commands.compare",
    "convert": "commands.convert",
    "diagnose": "commands.diagnose",
    "diff": "commands.diff",
    "generate": "commands.generate",
    "load_trace": "commands.load",
    "replay": "commands.replay",
    "report": "commands.report",
    "simulate": "commands.simulate",
    "sweep": "commands.sweep",
})
__all__ = ["__version__", *_api]


class _Package(type(sys)):  # type: ignore[misc]
    """The package as a module whose `diff` is the command's function.

    NOTE: importing the subpackage `yaotu_trace.diff` (the diff's core, which `trace check`
    and `trace report` load too) would bind its name here to that subpackage, so that
    `from yaotu_trace import diff` gave the package rather than the command. The binding is
    skipped: the core is imported by its modules' names (`from yaotu_trace.diff import ...`).
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "diff" and isinstance(value, type(sys)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.commands.check import check
    from yaotu_trace.commands.compare import compare
    from yaotu_trace.commands.convert import convert
    from yaotu_trace.commands.diagnose import diagnose
    from yaotu_trace.commands.diff import diff
    from yaotu_trace.commands.generate import generate
    from yaotu_trace.commands.load import RunBefore, TraceInput, load_trace
    from yaotu_trace.commands.replay import replay
    from yaotu_trace.commands.report import report
    from yaotu_trace.commands.simulate import simulate
    from yaotu_trace.commands.sweep import sweep
    from yaotu_trace.diagnosis.options import DiagnosisOptions
    from yaotu_trace.prefix.options import ReplayOptions
    from yaotu_trace.prefix.partition import Parallelism
    from yaotu_trace.sim.generate import GenerateOptions
    from yaotu_trace.sim.options import EngineOptions
