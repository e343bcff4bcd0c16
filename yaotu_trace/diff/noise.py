"""Run-to-run noise of a measure, by bootstrap over requests, and the change it lets us call.

Each run's requests are drawn again with replacement (a fixed seed, `RESAMPLES` times), the
measure recomputed on each draw; the spread of the two runs' draws is how much the measure
would move between two runs of the same workload by chance. A change counts when the
difference exceeds 1.96 × √(sd_before² + sd_after²) and `MIN_RELATIVE` of the larger value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from yaotu_trace.data.run_diff import Change, MeasureChange
from yaotu_trace.diff.measures import Columns, Measure

RESAMPLES = 200
Z95 = 1.96
# A change smaller than this share of the measure is no change, whatever the noise says.
MIN_RELATIVE = 0.01
NOISE_BASIS = (f"bootstrap over requests: {RESAMPLES} resamples of each run (fixed seed); a "
               f"change counts beyond {Z95} × √(sd_before² + sd_after²) and "
               f"{MIN_RELATIVE:.0%} of the larger value")


@dataclass(frozen=True, slots=True)
class Resamples:
    """The row draws of one run: `RESAMPLES` × n positions into its judged rows."""

    rows: np.ndarray
    draws: np.ndarray

    @classmethod
    def of(cls, rows: np.ndarray, rng: np.random.Generator) -> Resamples:
        """Draws of `rows` (positions into a run's columns) with replacement."""
        draws = (rng.integers(0, rows.size, size=(RESAMPLES, rows.size))
                 if rows.size else np.zeros((0, 0), dtype=np.int64))
        return cls(rows=rows, draws=draws)


def spread(measure: Measure, columns: Columns, resamples: Resamples) -> float | None:
    """The bootstrap standard deviation of the measure on one run (None when undefined)."""
    values = []
    for draw in resamples.draws:
        value = measure.compute(columns, resamples.rows[draw])
        if value is not None and math.isfinite(value):
            values.append(value)
    if len(values) < 2:
        return None
    return float(np.std(values, ddof=1))


def measure_change(measure: Measure, before: Columns, after: Columns, rb: Resamples,
                   ra: Resamples) -> MeasureChange:
    """The measure on each run and whether it improved, regressed or stayed within noise."""
    value_b = measure.compute(before, rb.rows)
    value_a = measure.compute(after, ra.rows)
    if value_b is None or value_a is None:
        return MeasureChange(name=measure.name, before=value_b, after=value_a, unit=measure.unit,
                             change="unknown", noise=None, basis=measure.basis)
    sd_b, sd_a = spread(measure, before, rb), spread(measure, after, ra)
    noise = None if sd_b is None or sd_a is None else Z95 * math.hypot(sd_b, sd_a)
    tolerance = max(noise or 0.0, MIN_RELATIVE * max(abs(value_b), abs(value_a)))
    delta = value_a - value_b
    change: Change = "unchanged"
    if abs(delta) > tolerance:
        lower = delta < 0
        change = "improved" if lower == (measure.better == "lower") else "regressed"
    return MeasureChange(name=measure.name, before=value_b, after=value_a, unit=measure.unit,
                         change=change, noise=noise, basis=measure.basis)
