"""The four diagnosis axes: one pure analyzer per axis, registered here in report order.

Each analyzer is `analyze_<axis>(inp: AxisInput, thresholds: Thresholds) -> AxisResult`; the
registry names them as "module:function" so importing the package stays cheap and free of
cycles (the analyzers import the rule catalog of `yaotu_trace.diagnosis`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final

from yaotu_trace.axes.base import AxisInput, AxisName, AxisResult

AXES: Final[dict[AxisName, str]] = {
    AxisName.QUEUEING: "yaotu_trace.axes.queueing:analyze_queueing",
    AxisName.KV_MEMORY: "yaotu_trace.axes.kv_memory:analyze_kv_memory",
    AxisName.PREFIX_REUSE: "yaotu_trace.axes.prefix_reuse:analyze_prefix_reuse",
    AxisName.PD_INTERFERENCE: "yaotu_trace.axes.pd_interference:analyze_pd_interference",
}


def analyzer(axis: AxisName) -> Callable[..., AxisResult]:
    """The analyzer function of one axis."""
    module_name, func = AXES[axis].split(":")
    fn: Callable[..., AxisResult] = getattr(importlib.import_module(module_name), func)
    return fn


__all__ = ["AXES", "AxisInput", "AxisName", "AxisResult", "analyzer"]
