"""The four diagnosis axes: one pure analyzer per axis, registered here in report order.

Each axis is a package, `axes/<axis>/`: `metrics.py` (what it measures), `analyze.py`
(`analyze_<axis>(inp: AxisInput, thresholds: Thresholds) -> AxisResult`) and `rules/`, one file
per rule holding its id, words, thresholds, check and what it means to the verdict and the
ledger (its cause and remedies, `yaotu_trace.axes.rule`). The thresholds
are in `axes/thresholds.py`, the catalog of every rule in `axes/rules.py`. The registry names
the analyzers as "module:function" so importing this package stays cheap; the axes never import
`yaotu_trace.diagnosis`, which builds on them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final

from yaotu_trace.axes.base import AxisInput, AxisName, AxisResult

AXES: Final[dict[AxisName, str]] = {
    AxisName.QUEUEING: "yaotu_trace.axes.queueing.analyze:analyze_queueing",
    AxisName.KV_MEMORY: "yaotu_trace.axes.kv_memory.analyze:analyze_kv_memory",
    AxisName.PREFIX_REUSE: "yaotu_trace.axes.prefix_reuse.analyze:analyze_prefix_reuse",
    AxisName.PD_INTERFERENCE: "yaotu_trace.axes.pd_interference.analyze:analyze_pd_interference",
}


def analyzer(axis: AxisName) -> Callable[..., AxisResult]:
    """The analyzer function of one axis."""
    module_name, func = AXES[axis].split(":")
    fn: Callable[..., AxisResult] = getattr(importlib.import_module(module_name), func)
    return fn


__all__ = ["AXES", "AxisInput", "AxisName", "AxisResult", "analyzer"]
