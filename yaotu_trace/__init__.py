"""yaotu-trace: workload analyzer for LLM-inference request traces.

Every `trace` command is also a function of this package, from options (keyword arguments
with the command line's meaning) to the finished `Report` the command renders; see
docs/python-api.md. They are loaded on first use, so that `import yaotu_trace` (the command
line does it for `--help`) costs no pandas, pyarrow or numba.
"""

from __future__ import annotations

from yaotu_trace._lazy import lazy_names
from yaotu_trace._version import __version__

# NOTE: no `typing` at run time. `trace` imports this package before it can install its Ctrl-C
# handler (yaotu_trace.cli), and `typing` (with `re`) was most of that time: a Ctrl-C in it is
# Python's traceback instead of a silent exit 130.
TYPE_CHECKING = False

# Every function of the API → the module of `yaotu_trace.commands` that defines it.
__getattr__, __dir__, _api = lazy_names(__name__, {
    "TraceInput": "commands.load",
    "analyze": "commands.analyze",
    "check": "commands.check",
    "compare": "commands.compare",
    "convert": "commands.convert",
    "diagnose": "commands.diagnose",
    "generate": "commands.generate",
    "load_trace": "commands.load",
    "replay": "commands.replay",
    "report": "commands.report",
    "simulate": "commands.simulate",
    "sweep": "commands.sweep",
})
__all__ = ["__version__", *_api]

if TYPE_CHECKING:  # the same names, for mypy
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
