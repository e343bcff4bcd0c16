"""`trace diff`: two runs of a change judged on the same request chain, under the same conditions.

`diff_traces(before, after)` matches the requests, checks the conditions a fair comparison holds
fixed (request chain, input/output lengths, model, hardware, cache warmth, success rate),
diagnoses both runs on the judged requests, compares each axis' key measures against run-to-run
noise and prices the change in a ledger of work saved and added; the values it returns are in
`data/run_diff.py`. The name loads on first use, so importing this package costs nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers → the module that defines it.
__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "diff_traces": "run",
})

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.diff.run import diff_traces
