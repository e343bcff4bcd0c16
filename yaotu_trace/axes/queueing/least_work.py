"""The least-work router's queue, compiled: one loop over arrivals (`imbalance.py` uses it).

Its own module so that numba loads only when a diagnosis models routing over instances.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def least_work_waits(arrival_s: np.ndarray, work: np.ndarray, rate: float,
                     instances: int) -> np.ndarray:
    """Each arrival's wait when a router sends it to the instance with the least work ahead
    (ties: the lowest index), `instances` FCFS servers of `rate` work/s, arrivals in order."""
    ahead = np.zeros(instances)  # seconds of work ahead on each instance
    waits = np.empty(arrival_s.size)
    last = arrival_s[0] if arrival_s.size else 0.0
    for j in range(arrival_s.size):
        gone = arrival_s[j] - last
        last = arrival_s[j]
        best = 0
        for k in range(instances):
            ahead[k] = max(0.0, ahead[k] - gone)
            if ahead[k] < ahead[best]:
                best = k
        waits[j] = ahead[best]
        ahead[best] += work[j] / rate
    return waits
