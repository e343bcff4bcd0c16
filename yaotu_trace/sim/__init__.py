"""Step-level serving-engine simulator: requests in, engine timing and a step log out.

Pure (NumPy and numba only; no pandas, no I/O). `simulate_requests` takes request arrays
(arrival, prompt and output lengths, and optionally the prompt's block chain ids from
`prefix.kernels.blocks.build_block_chains`) and a `SimConfig`, and returns a `SimResult` whose
per-request arrays are the canonical timing columns and whose step arrays are the step log.
`fit_step_cost` is the `--calibrate` least-squares fit of `a + b·prefill_tokens + c·Σcontext`
(coefficients kept non-negative).

The package itself imports nothing heavy: its names are loaded on first use, so that
`yaotu_trace.sim.config` (the choices of `--route` and `--scheduler`) costs no NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers → the module that defines it.
__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "ROUTE_CODES": "config",
    "CalibrationFit": "run",
    "RequestArrays": "run",
    "RoutePolicy": "config",
    "SchedulerKind": "config",
    "SimConfig": "config",
    "SimResult": "run",
    "StepCost": "config",
    "block_identities": "run",
    "fit_step_cost": "run",
    "simulate_requests": "run",
    "step_cost_params": "engine_params",
})

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.sim.config import ROUTE_CODES, RoutePolicy, SchedulerKind, SimConfig, StepCost
    from yaotu_trace.sim.engine_params import step_cost_params
    from yaotu_trace.sim.run import (
        CalibrationFit,
        RequestArrays,
        SimResult,
        block_identities,
        fit_step_cost,
        simulate_requests,
    )
