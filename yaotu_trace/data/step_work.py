"""Whether a step log can have computed the trace's requests: work is conserved.

A step log that overlaps the trace in time may still be of another run (same clock from zero,
another workload). The tokens it computes tell: every request that arrives while the log runs
and finishes before it ends has its output decoded in the log's steps, one decode token per
output token after the first (the first comes out of the prefill; a preemption moves one more
into the recompute prefill), and its uncached prompt prefilled there. So, over the log's range,

    decode tokens  >= Σ (output_len − 1) − preemptions    of the requests done in the range
    prefill tokens >= Σ max(1, prompt_len − cached_tokens) of the same requests

Which requests are done: those whose `finish_s` lies in the range, when the trace has timing;
otherwise at least all but those still waiting or running at the log's last step of each
instance (`num_waiting` + `num_running`), and the bound takes the smallest of them. A log below
either bound by more than `SLACK` cannot be this trace's run and is refused (exit 3) with both
totals. More tokens than the trace needs are not refused: requests that arrived before the log
began, aborted work and speculative decoding all add steps. So the check is one-sided: it
refuses a log that cannot be the run, not every log that is not.

The range: a trace with timing is checked on the steps within its own range (all its work lies
there); one without, on the whole log (the steps after its last arrival still decode it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data.schema import Trace
from yaotu_trace.data.steplog import PREEMPTION_COLUMNS, StepLog, preemptions
from yaotu_trace.errors import TraceReadError

if TYPE_CHECKING:
    import pandas as pd

# A log may fall short of the bound by this share before it is refused: requests in flight
# between the client and the engine's queue, and counts rounded by the writer.
SLACK = 0.02


@dataclass(frozen=True, slots=True)
class StepWork:
    """What a step log computed in its range, and how it ended."""

    lo_s: float
    hi_s: float
    prefill_tokens: float | None
    decode_tokens: float | None
    preempted: float | None
    # Requests still waiting or running at each instance's last step (None: not logged).
    in_flight_end: float | None


def step_work(steps: StepLog) -> StepWork | None:
    """Sum the log's tokens and read its end state in one pass (None: an empty log)."""
    import pandas as pd

    wanted = ("instance", "prefill_tokens", "decode_tokens", *PREEMPTION_COLUMNS, "num_running",
              "num_waiting")
    lo, hi = np.inf, -np.inf
    sums = {"prefill_tokens": 0.0, "decode_tokens": 0.0}
    preempted = 0.0
    last: dict[str, tuple[float, float]] = {}
    for batch in steps.batches(wanted):
        if batch.empty:
            continue
        lo = min(lo, float(batch["start_s"].min()))
        hi = max(hi, float(batch["end_s"].max()))
        for name in sums:
            if name in batch.columns:
                sums[name] += float(pd.to_numeric(batch[name]).sum())
        preempted += float(preemptions(batch).sum())
        if "num_running" in batch.columns and "num_waiting" in batch.columns:
            _last_state(batch, last)
    if lo > hi:
        return None
    complete = steps.complete("num_running") and steps.complete("num_waiting")
    return StepWork(
        lo_s=lo, hi_s=hi,
        prefill_tokens=sums["prefill_tokens"] if steps.complete("prefill_tokens") else None,
        decode_tokens=sums["decode_tokens"] if steps.complete("decode_tokens") else None,
        preempted=preempted if steps.has_preemptions() else None,
        in_flight_end=sum(v for _, v in last.values()) if complete and last else None,
    )


def _last_state(batch: pd.DataFrame, last: dict[str, tuple[float, float]]) -> None:
    """Keep, per instance, waiting + running at its latest-ending step so far."""
    import pandas as pd

    names = (batch["instance"].astype(str) if "instance" in batch.columns
             else pd.Series("all", index=batch.index))
    flight = (pd.to_numeric(batch["num_running"]) + pd.to_numeric(batch["num_waiting"]))
    frame = pd.DataFrame({"name": names.to_numpy(), "end": batch["end_s"].to_numpy(),
                          "flight": flight.to_numpy(dtype=np.float64)})
    tail = frame.sort_values("end", kind="stable").groupby("name", sort=False).tail(1)
    for name, end, value in tail.itertuples(index=False):
        if name not in last or end >= last[name][0]:
            last[name] = (float(end), float(value))


@dataclass(frozen=True, slots=True)
class _Bound:
    """The least tokens the trace's requests need of the log, and why."""

    decode_tokens: float
    prefill_tokens: float | None
    requests: int
    done: int
    basis: str


def _bound(requests: pd.DataFrame, work: StepWork, preempted: float) -> _Bound | None:
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    inside = (arrival >= work.lo_s) & (arrival <= work.hi_s)
    if not inside.any() or "output_len" not in requests.columns:
        return None
    output = requests["output_len"].to_numpy(dtype=np.float64, na_value=np.nan)[inside]
    decode = np.maximum(np.nan_to_num(output, nan=1.0) - 1.0, 0.0)
    prefill = None
    if "prompt_len" in requests.columns and "cached_tokens" in requests.columns:
        prompt = requests["prompt_len"].to_numpy(dtype=np.float64, na_value=np.nan)[inside]
        cached = requests["cached_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)[inside]
        if not np.isnan(cached).any():
            prefill = np.maximum(np.nan_to_num(prompt, nan=1.0) - cached, 1.0)
    n = int(inside.sum())
    finish = (requests["finish_s"].to_numpy(dtype=np.float64, na_value=np.nan)[inside]
              if "finish_s" in requests.columns else None)
    if finish is not None and not np.isnan(finish).all():
        done = finish <= work.hi_s
        basis = "finished by the log's end"
        decode_need = float(decode[done].sum())
        prefill_need = None if prefill is None else float(prefill[done].sum())
        count = int(done.sum())
    elif work.in_flight_end is not None:
        count = max(0, n - int(np.ceil(work.in_flight_end)))
        basis = (f"all but the {int(work.in_flight_end)} still waiting or running at the log's "
                 "end, taking the smallest")
        decode_need = float(np.sort(decode)[:count].sum())
        prefill_need = None if prefill is None else float(np.sort(prefill)[:count].sum())
    else:
        return None
    return _Bound(decode_tokens=max(0.0, decode_need - preempted), prefill_tokens=prefill_need,
                  requests=n, done=count, basis=basis)


def _preempted(requests: pd.DataFrame, work: StepWork) -> float:
    """Preemptions in the range: the log's own count, else the trace's; 0 when neither says."""
    import pandas as pd

    if work.preempted is not None:
        return work.preempted
    if "num_preemptions" in requests.columns:
        arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
        inside = (arrival >= work.lo_s) & (arrival <= work.hi_s)
        counts = pd.to_numeric(requests["num_preemptions"]).to_numpy(dtype=np.float64,
                                                                    na_value=0.0)
        return float(np.nansum(counts[inside]))
    return 0.0


def check_step_work(trace: Trace, steps: StepLog) -> None:
    """Refuse a step log that computed fewer tokens than the trace's requests need of it."""
    work = step_work(steps)
    if work is None:
        return
    bound = _bound(trace.requests, work, _preempted(trace.requests, work))
    if bound is None:
        return
    checks = (("decode", work.decode_tokens, bound.decode_tokens,
               "their output tokens less the first of each and the preemptions"),
              ("prefill", work.prefill_tokens, bound.prefill_tokens,
               "their prompt tokens less their cached_tokens"))
    for what, has, needs, how in checks:
        if has is None or needs is None or has >= needs * (1.0 - SLACK):
            continue
        raise TraceReadError(
            f"{steps.path}: the step log computes {has:,.0f} {what} tokens in "
            f"{work.lo_s:.1f}–{work.hi_s:.1f} s, but the {bound.requests:,} requests of "
            f"{trace.path} that arrive then need at least {needs:,.0f} ({how}, over the "
            f"{bound.done:,} done by then: {bound.basis}); they are from different runs "
            "(pass the step log of this trace's run)")
