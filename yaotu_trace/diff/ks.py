"""The two-sample Kolmogorov–Smirnov test: is one sample of lengths drawn like the other?

The statistic is the largest distance between the two empirical distribution functions; its
p-value is the asymptotic Kolmogorov distribution with Stephens' small-sample correction
(Numerical Recipes §14.3.3, `probks`), which is what is needed to tell "the same workload"
from "another workload" on hundreds of requests or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Terms of the alternating series and its stopping rule, as Numerical Recipes' `probks`.
SERIES_TERMS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class KsTest:
    """The statistic D, its p-value and the two sample sizes."""

    statistic: float
    p_value: float
    n_before: int
    n_after: int


def ks_statistic(x: np.ndarray, y: np.ndarray) -> float:
    """max |F_x(t) − F_y(t)| over every value t of either sample (0 when both are empty)."""
    xs = np.sort(np.asarray(x, dtype=np.float64))
    ys = np.sort(np.asarray(y, dtype=np.float64))
    if xs.size == 0 or ys.size == 0:
        return 0.0 if xs.size == ys.size else 1.0
    grid = np.concatenate([xs, ys])
    cdf_x = np.searchsorted(xs, grid, side="right") / xs.size
    cdf_y = np.searchsorted(ys, grid, side="right") / ys.size
    return float(np.abs(cdf_x - cdf_y).max())


def kolmogorov_q(lam: float) -> float:
    """Q_KS(λ) = 2 Σ_{k≥1} (−1)^{k−1} exp(−2k²λ²): the chance of a distance this large."""
    if lam < 1e-3:
        return 1.0
    total, sign, previous = 0.0, 2.0, 0.0
    for k in range(1, SERIES_TERMS + 1):
        term = sign * math.exp(-2.0 * k * k * lam * lam)
        total += term
        if abs(term) <= 1e-3 * previous or abs(term) <= 1e-8 * total:
            return min(1.0, max(0.0, total))
        sign, previous = -sign, abs(term)
    return 1.0  # the series did not converge: λ so small that the samples cannot differ


def ks_test(x: np.ndarray, y: np.ndarray) -> KsTest:
    """The two-sample test of x against y (finite values only)."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    xs, ys = xs[np.isfinite(xs)], ys[np.isfinite(ys)]
    d = ks_statistic(xs, ys)
    if xs.size == 0 or ys.size == 0:
        return KsTest(statistic=d, p_value=1.0, n_before=int(xs.size), n_after=int(ys.size))
    en = math.sqrt(xs.size * ys.size / (xs.size + ys.size))
    p = kolmogorov_q((en + 0.12 + 0.11 / en) * d)
    return KsTest(statistic=d, p_value=p, n_before=int(xs.size), n_after=int(ys.size))
