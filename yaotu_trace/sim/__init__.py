"""Step-level serving-engine simulator: requests in, engine timing and a step log out.

Pure (NumPy and numba only; no pandas, no I/O). `simulate` takes request arrays (arrival,
prompt and output lengths, and optionally the prompt's block chain ids from
`prefix.kernels.blocks.build_block_chains`) and a `SimConfig`, and returns a `SimResult` whose
per-request arrays are the canonical timing columns and whose step arrays are the step log.
`fit_step_cost` is the `--calibrate` least-squares fit of `a + b·prefill_tokens + c·Σcontext`
(coefficients kept non-negative).

The package itself imports nothing heavy: its names are loaded from `sim.run` on first use, so
that `yaotu_trace.sim.config` (the choices of `--route` and `--scheduler`) costs no NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers, defined in (or re-exported by) `sim.run`.
__all__ = [
    "ROUTE_CODES",
    "CalibrationFit",
    "ConfigError",
    "RequestArrays",
    "ResourceLimitError",
    "RoutePolicy",
    "SchedulerKind",
    "SimConfig",
    "SimResult",
    "StepCost",
    "block_identities",
    "fit_step_cost",
    "simulate",
    "step_cost_params",
]

__getattr__, __dir__ = lazy_names(__name__, "run", __all__)

if TYPE_CHECKING:
    from yaotu_trace.sim.run import (
        ROUTE_CODES,
        CalibrationFit,
        ConfigError,
        RequestArrays,
        ResourceLimitError,
        RoutePolicy,
        SchedulerKind,
        SimConfig,
        SimResult,
        StepCost,
        block_identities,
        fit_step_cost,
        simulate,
        step_cost_params,
    )
