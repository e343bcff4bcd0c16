"""What moving one instance between the pools of a disaggregated deployment does to each pool's
queue and load: the `move_instances` remedy's price.

The model (stated in each quantity's basis): each pool is one work-conserving FCFS fluid server
whose rate is its instances × one instance's rate, so a request waits for the work ahead of it
in its pool / the pool's rate (Lindley's recursion, `queueing.imbalance.fcfs_waits_s`, the
model Q010 prices routing with):

- prefill pool: a request arrives at `arrival_s` with its uncached prompt tokens as work; one
  instance serves the most prompt tokens/s any prefill instance served in a window (each
  request's tokens spread over [scheduled_s, first_token_s]);
- decode pool: a request arrives when its KV is there (first_token_s + kv_transfer_s, else
  decode_start_s − its decode queue) with its decode seconds (finish_s − decode_start_s) as
  work: a decode instance holds seats, not a token budget, so its rate is the most requests it
  ran at once (seat-seconds per second).

The pool's queue with n ± 1 instances is the measured queue × modelled(n ± 1) / modelled(n),
so the model's bias largely cancels (as Q010's vanish share does); a pool whose measured queue
is zero gets the modelled seconds themselves. A pool's busy share after the move is its busy
share × n / (n ± 1): the same work on one instance more or less.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.axes.base import AxisInput, ratio
from yaotu_trace.axes.pd_interference.placement import PlacementMetrics
from yaotu_trace.axes.queueing.imbalance import fcfs_waits_s
from yaotu_trace.axes.queueing.metrics import spread_work
from yaotu_trace.data.handoff import decode_queue_s, handed_off

if TYPE_CHECKING:
    import pandas as pd

# The windows the per-instance rate is read in (s), as the queueing axis' load windows.
RATE_WINDOW_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolModel:
    """One pool's queue now and with one instance more or less (s; None when not measured)."""

    pool: str
    instances: int
    wait_s: float | None
    wait_share_of_ttft: float | None
    wait_after_s: float | None
    busy_share: float | None
    busy_after: float | None
    rate_per_instance: float | None
    rate_unit: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolMove:
    """Moving one instance from `donor` to `taker` (or adding one to `taker` when the donor
    has only one)."""

    taker: PoolModel
    donor: PoolModel
    moved: bool
    ttft_seconds_total: float | None


def _times(req: pd.DataFrame, column: str) -> np.ndarray:
    if column not in req.columns:
        return np.full(len(req), np.nan)
    return req[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _peak_rate(start: np.ndarray, end: np.ndarray, work: np.ndarray,
               who: np.ndarray) -> float | None:
    """The most work per second one instance did in a window (work spread over [start, end])."""
    ok = np.isfinite(start) & np.isfinite(end) & (end >= start) & np.isfinite(work)
    if not ok.any():
        return None
    lo, hi = float(start[ok].min()), float(end[ok].max())
    edges = lo + RATE_WINDOW_S * np.arange(int(np.ceil((hi - lo) / RATE_WINDOW_S)) + 2)
    best = 0.0
    for name in np.unique(who[ok]):
        sel = ok & (who == name)
        done = spread_work(edges, start[sel], end[sel], work[sel])
        best = max(best, float(done.max()) / RATE_WINDOW_S if done.size else 0.0)
    return best or None


def _most_at_once(start: np.ndarray, end: np.ndarray, who: np.ndarray) -> float | None:
    """The most intervals [start, end) open at one instant on any one instance."""
    ok = np.isfinite(start) & np.isfinite(end) & (end >= start)
    best = 0
    for name in np.unique(who[ok]):
        sel = ok & (who == name)
        s, e = np.sort(start[sel]), np.sort(end[sel])
        best = max(best, int((np.arange(1, s.size + 1) - np.searchsorted(e, s, "right")).max()))
    return float(best) or None


def _modelled(arrival: np.ndarray, work: np.ndarray, rate: float) -> float:
    order = np.argsort(arrival, kind="stable")
    return float(fcfs_waits_s(arrival[order], work[order], rate).sum())


def _after(measured: float | None, arrival: np.ndarray, work: np.ndarray, per_instance: float,
           n: int, n_after: int) -> float | None:
    """The pool's queue seconds with `n_after` instances instead of `n` (module docstring)."""
    if n_after < 1 or not arrival.size:
        return None
    now = _modelled(arrival, work, per_instance * n)
    then = _modelled(arrival, work, per_instance * n_after)
    if measured is None:
        return then
    if now <= 0:
        return then if measured == 0 else measured
    return measured * then / now


def _pool(name: str, n: int, n_after: int, arrival: np.ndarray, work: np.ndarray,
          rate: float | None, unit: str, wait_s: float | None, ttft_total: float | None,
          busy: float | None) -> PoolModel:
    ok = np.isfinite(arrival) & np.isfinite(work)
    after = (None if rate is None else
             _after(wait_s, arrival[ok], work[ok], rate, n, n_after))
    return PoolModel(
        pool=name, instances=n, wait_s=wait_s, wait_share_of_ttft=ratio(wait_s, ttft_total),
        wait_after_s=after, busy_share=busy,
        busy_after=None if busy is None or n_after < 1 else min(1.0, busy * n / n_after),
        rate_per_instance=rate, rate_unit=unit)


def pool_move(inp: AxisInput, pm: PlacementMetrics, taker: str) -> PoolMove | None:
    """One instance moved to the `taker` pool ("prefill" or "decode") from the other, priced
    by the module's model; None when the trace lacks the times it needs."""
    req = inp.requests
    split = handed_off(req)
    if not split.any() or taker not in ("prefill", "decode"):
        return None
    arrival, sched = _times(req, "arrival_s"), _times(req, "scheduled_s")
    first, dstart = _times(req, "first_token_s"), _times(req, "decode_start_s")
    finish, xfer = _times(req, "finish_s"), _times(req, "kv_transfer_s")
    prompt = req["prompt_len"].to_numpy(dtype=np.float64)
    # The prefill pool's work: prompt tokens its prefix cache did not supply.
    prompt = prompt - np.clip(np.nan_to_num(_times(req, "cached_tokens")), 0.0, prompt)
    pf = req["prefill_instance"].astype("string").fillna("").to_numpy(dtype=object)
    dec = req["decode_instance"].astype("string").fillna("").to_numpy(dtype=object)
    d_queue = decode_queue_s(req)
    ready = np.where(np.isfinite(xfer), first + xfer, dstart - d_queue)
    p_rate = _peak_rate(sched[split], first[split], prompt[split], pf[split])
    d_rate = _most_at_once(dstart[split], finish[split], dec[split])
    p_wait = np.clip(sched - arrival, 0.0, None)
    p_wait_s = float(np.nansum(p_wait[split])) if np.isfinite(sched[split]).any() else None
    d_wait_s = float(d_queue[split].sum()) if np.isfinite(dstart[split]).any() else None
    n_p, n_d = pm.prefill_instances, pm.decode_instances
    donor_n = n_d if taker == "prefill" else n_p
    moved = donor_n > 1
    dn = -1 if moved else 0
    dp, dd = (1, dn) if taker == "prefill" else (dn, 1)
    prefill = _pool("prefill", n_p, n_p + dp, arrival[split], prompt[split], p_rate,
                    "prompt tokens/s", p_wait_s, pm.ttft_seconds_total, pm.prefill_busy_share)
    decode = _pool("decode", n_d, n_d + dd, ready[split], (finish - dstart)[split], d_rate,
                   "requests at once", d_wait_s, pm.ttft_seconds_total, pm.decode_busy_share)
    take, give = (prefill, decode) if taker == "prefill" else (decode, prefill)
    return PoolMove(taker=take, donor=give, moved=moved, ttft_seconds_total=pm.ttft_seconds_total)
