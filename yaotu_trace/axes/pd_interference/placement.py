"""Placement measures of a disaggregated deployment: KV transfer, pool balance, fallbacks.

A request is handed off when its `prefill_instance` and `decode_instance` are both named and
differ; a fallback when both are named and equal (its prefill ran on the decode instance, as
Mooncake, Dynamo and llm-d do when a transfer fails or the prefill pool is busy).

TTFT under disaggregation is the first token the client can see. vLLM's P/D proxy and Dynamo
stream the response from the decode instance, so the first token reaches the client once the KV
has arrived there: `ttft = max(first_token_s, decode_start_s) − arrival_s` (a trace whose
first_token_s is the client's already has the transfer in it; one whose first_token_s is the
prefill worker's gets it from decode_start_s).

Per request (s): prefill_wait = scheduled_s − arrival_s (the prefill pool's queue);
transfer = kv_transfer_s, else decode_start_s − first_token_s (then it includes waiting for a
decode slot), else α + p · kv_bytes_per_token / B_eff (`--link-gbps` × link_efficiency, α =
transfer_latency_s); decode_wait = decode_start_s − first_token_s − kv_transfer_s (the decode
pool's queue, clipped at 0). Shares are sums over the handed-off requests divided by Σ ttft.

Pool load (`_pool_busy`): from the step log; else the prefill pool from the union of the
requests' prefill intervals and the decode pool from the metrics export's per-instance
`kv_cache_usage_perc` and `num_requests_running` (against `--max-num-seqs`); else the decode
pool's load is unknown. The union of decode intervals is never its load: a decode instance
holds some request most of the time, full or nearly empty (that union is ≈ 1 while anything
decodes), so the load is left None and `busy_source` names what would measure it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.axes.base import AxisInput, ratio
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.instance_join import join_instance
from yaotu_trace.data.metric_names import GAUGES
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.steplog import KV_USAGE_COLUMNS, kv_usage
from yaotu_trace.data.steplog import column as step_column

# Outcomes that count as a failed transfer when a request prefilled but never decoded.
_FAILED = ("error", "aborted", "timeout")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementMetrics:
    """The placement measures (None when their inputs are absent; see the module docstring)."""

    disaggregated_requests: int
    fallback_requests: int
    transfer_failures: int
    failure_share: float | None
    prefill_instances: int
    decode_instances: int
    transfer_source: str
    kv_transfer_s: Distribution
    kv_transfer_seconds_total: float
    ttft_seconds_total: float | None
    transfer_ttft_share: float | None
    prefill_wait_share: float | None
    decode_wait_share: float | None
    busy_source: str | None
    prefill_busy_share: float | None
    decode_busy_share: float | None


def _floats(inp: AxisInput, column: str) -> np.ndarray:
    """`AxisInput.floats`, NaN for every request when no request has a value."""
    found = inp.floats(column)
    return np.full(inp.num_requests, np.nan) if found is None else found


def _names(inp: AxisInput, column: str) -> np.ndarray:
    if not inp.has(column):
        return np.full(inp.num_requests, "", dtype=object)
    return inp.requests[column].fillna("").astype(str).to_numpy(dtype=object)


def split_rows(inp: AxisInput) -> np.ndarray:
    """Per request, whether it was handed off: prefilled and decoded on different instances."""
    pf, dec = _names(inp, "prefill_instance"), _names(inp, "decode_instance")
    return np.asarray((pf != "") & (dec != "") & (pf != dec), dtype=bool)


def pools(inp: AxisInput) -> tuple[set[str], set[str]]:
    """(prefill pool, decode pool): the instances handed-off requests prefilled and decoded on
    (an instance in both is counted in the prefill pool only)."""
    split = split_rows(inp)
    prefill = set(_names(inp, "prefill_instance")[split])
    return prefill, set(_names(inp, "decode_instance")[split]) - prefill


def transfer_seconds(inp: AxisInput, t: Thresholds) -> tuple[np.ndarray, str]:
    """Per request, the KV transfer (s; NaN where unknown) and where it comes from."""
    observed = _floats(inp, "kv_transfer_s")
    if np.isfinite(observed).any():
        return observed, "kv_transfer_s (observed)"
    gap = _floats(inp, "decode_start_s") - _floats(inp, "first_token_s")
    if np.isfinite(gap).any():
        return np.where(gap >= 0, gap, np.nan), "decode_start_s − first_token_s (observed)"
    kv_b = inp.settings.kv_bytes_per_token
    b_eff = inp.settings.link_gbps * 1e9 / 8.0 * t.link_efficiency
    if kv_b is None or b_eff <= 0:
        return np.full(inp.num_requests, np.nan), "unknown: pass --model for KV bytes per token"
    prompt = inp.requests["prompt_len"].to_numpy(dtype=np.float64)
    return (t.transfer_latency_s + prompt * kv_b / b_eff,
            f"estimated: α + p · kv_b / B_eff on {inp.settings.link_gbps:g} Gb/s")


def _interval_busy(start: np.ndarray, end: np.ndarray, who: np.ndarray) -> float:
    """Σ over instances of the union of [start, end) intervals (s)."""
    total = 0.0
    ok = np.isfinite(start) & np.isfinite(end) & (end > start)
    for name in np.unique(who[ok]):
        sel = ok & (who == name)
        order = np.argsort(start[sel], kind="stable")
        s, e = start[sel][order], np.maximum.accumulate(end[sel][order])
        # A new run starts where an interval begins after every earlier one has ended.
        fresh = np.concatenate([[True], s[1:] > e[:-1]])
        run_end = np.maximum.reduceat(e, np.flatnonzero(fresh))
        total += float((run_end - s[fresh]).sum())
    return total


class _PoolLoad:
    """One pool's load from the step log: Σ step seconds (weighted by how full the step's batch
    was, for the decode pool) over its instances × the span of its own steps."""

    def __init__(self, names: set[str]) -> None:
        self.names = list(names)
        self.seconds = 0.0
        self.first, self.last = np.inf, -np.inf

    def add(self, who: np.ndarray, start: np.ndarray, end: np.ndarray,
            weight: np.ndarray) -> None:
        sel = np.isin(who, self.names)
        if sel.any():
            self.seconds += float(((end - start) * weight)[sel].sum())
            self.first = min(self.first, float(start[sel].min()))
            self.last = max(self.last, float(end[sel].max()))

    def share(self) -> float | None:
        return ratio(self.seconds, len(self.names) * (self.last - self.first))


def _busy_from_steps(inp: AxisInput, prefill: set[str],
                     decode: set[str]) -> tuple[str, float | None, float | None] | None:
    """(source, prefill-pool busy share, decode-pool load) from the step log's instances.

    A decode instance runs a step whenever one request decodes, so its GPU time says little;
    its load is the time-weighted fill of what bounds its batch when the log has it: KV usage
    (kv_blocks_used / kv_blocks_total, else kv_usage), or num_running / max_num_seqs when
    `--max-num-seqs` is given and fills up first.
    """
    steps = inp.steps
    if steps is None or not steps.has("instance"):
        return None
    kv = steps.has_kv_usage()
    seats = inp.settings.max_num_seqs if steps.has("num_running") else None
    pools = _PoolLoad(prefill), _PoolLoad(decode)
    for b in steps.batches(("instance", *KV_USAGE_COLUMNS, "num_running")):
        start, end = step_column(b, "start_s"), step_column(b, "end_s")
        who = b["instance"].fillna("").astype(str).to_numpy(dtype=object)
        fill = np.nan_to_num(kv_usage(b), nan=0.0) if kv else np.zeros(start.size)
        if seats:
            fill = np.fmax(fill, step_column(b, "num_running", 0.0) / seats)
        pools[0].add(who, start, end, np.ones(start.size))
        pools[1].add(who, start, end, fill if kv or seats else np.ones(start.size))
    if not any(np.isfinite(p.first) for p in pools):
        return None
    bounds = [name for name, on in (("KV usage", kv), ("seats", bool(seats))) if on]
    source = f"step log (decode pool: {' and '.join(bounds)})" if bounds else "step log"
    return source, pools[0].share(), pools[1].share()


def _gauge_by_instance(inp: AxisInput, key: str, names: set[str]) -> dict[str, np.ndarray]:
    """Each named instance's samples of gauge `key` (engines of one instance summed per
    scrape), from the metrics' instance/pod/engine labels (`data.instance_join`)."""
    m = inp.metrics
    if m is None:
        return {}
    metric = next((n for n in GAUGES[key] if n in m.names), None)
    if metric is None:
        return {}
    rows = m.frame[m.frame["metric"] == metric]
    inst = rows["labels"].map({lb: join_instance(str(lb), names)
                               for lb in rows["labels"].unique()})
    rows = rows.assign(inst=inst)[inst.isin(names).to_numpy()]
    how = "max" if key == "kv_usage" else "sum"
    out: dict[str, np.ndarray] = {}
    for name, g in rows.groupby("inst", sort=True):
        per = g.groupby("time_s", sort=True)["value"]
        out[str(name)] = (per.max() if how == "max" else per.sum()).to_numpy(dtype=np.float64)
    return out


def _decode_load_from_metrics(inp: AxisInput, decode: set[str]) -> tuple[str, float] | None:
    """(source, decode-pool load) from the metrics export: per decode instance, the mean over
    its scrapes of KV usage, or of running / max_num_seqs when `--max-num-seqs` is given and
    fills up first; the pool's load is the mean over its instances that export either."""
    kv = _gauge_by_instance(inp, "kv_usage", decode)
    seats = inp.settings.max_num_seqs
    running = _gauge_by_instance(inp, "num_running", decode) if seats else {}
    loads: list[float] = []
    for name in sorted(decode):
        parts = [float(kv[name].mean())] if name in kv and kv[name].size else []
        if seats and name in running and running[name].size:
            parts.append(float(running[name].mean()) / seats)
        if parts:
            loads.append(max(parts))
    if not loads:
        return None
    bounds = [w for w, on in (("KV usage", bool(kv)), ("seats", bool(running))) if on]
    peak = max(float(v.max()) for v in kv.values()) if kv else None
    at_peak = "" if peak is None else f", KV usage at most {100 * peak:.0f} %"
    return (f"metrics (decode pool: {' and '.join(bounds)} of {len(loads)} of "
            f"{len(decode)} instance(s){at_peak})", float(np.mean(loads)))


# What `busy_source` says when nothing measures the decode pool's load.
DECODE_LOAD_UNKNOWN = ("decode pool load unknown: the requests' decode intervals only say "
                       "when some request decodes, not how full the batch is; add --metrics "
                       "with kv_cache_usage_perc and num_requests_running per instance, or a "
                       "step log (--steps) with kv_blocks_used")


def _pool_busy(inp: AxisInput) -> tuple[str | None, float | None, float | None]:
    """(source, prefill-pool busy share, decode-pool load): from the step log (see
    `_busy_from_steps`); else the prefill pool from the union of the requests' prefill
    [scheduled_s, first_token_s) intervals over instances × the trace's span, and the decode
    pool from the metrics export (`_decode_load_from_metrics`), else unknown (None)."""
    prefill, decode = pools(inp)
    n_p = len(prefill)
    pf = _names(inp, "prefill_instance")
    from_steps = _busy_from_steps(inp, prefill, decode)
    if from_steps is not None:
        return from_steps
    sched, first = _floats(inp, "scheduled_s"), _floats(inp, "first_token_s")
    dstart, finish = _floats(inp, "decode_start_s"), _floats(inp, "finish_s")
    times = np.concatenate([_floats(inp, "arrival_s"), finish])
    times = times[np.isfinite(times)]
    span = float(times.max() - times.min()) if times.size else 0.0
    p_busy = _interval_busy(sched, np.fmin(first, dstart), pf)
    p_share = ratio(p_busy, n_p * span) if p_busy else None
    from_metrics = _decode_load_from_metrics(inp, decode)
    d_share = None if from_metrics is None else from_metrics[1]
    p_words = "prefill pool: request intervals (upper bound)"
    if from_metrics is not None:
        return f"{p_words}; {from_metrics[0]}", p_share, d_share
    if p_share is None:
        return DECODE_LOAD_UNKNOWN, None, None
    return f"{p_words}; {DECODE_LOAD_UNKNOWN}", p_share, None


def _failures(inp: AxisInput, pf: np.ndarray, dec: np.ndarray) -> int:
    """Requests that finished their prefill (a kv_transfer_s, or a prefill_instance and a first
    token), failed and never started decoding: the transfer or the handoff failed."""
    if not inp.has("status"):
        return 0
    status = inp.requests["status"].fillna("ok").astype(str).to_numpy(dtype=object)
    never_decoded = (dec == "") if not inp.has("decode_start_s") else ~np.isfinite(
        _floats(inp, "decode_start_s"))
    prefilled = (np.isfinite(_floats(inp, "kv_transfer_s"))
                 | ((pf != "") & np.isfinite(_floats(inp, "first_token_s"))))
    return int((np.isin(status, _FAILED) & prefilled & never_decoded).sum())


def _sum(values: np.ndarray) -> float:
    return float(values[np.isfinite(values)].sum())


def placement_of(inp: AxisInput, t: Thresholds) -> PlacementMetrics | None:
    """The placement measures, or None when no request was disaggregated."""
    if not split_rows(inp).any():
        return None
    pf, dec = _names(inp, "prefill_instance"), _names(inp, "decode_instance")
    split = split_rows(inp)
    fallback = int(((pf != "") & (pf == dec)).sum())
    failures = _failures(inp, pf, dec)
    arrival, first = _floats(inp, "arrival_s"), _floats(inp, "first_token_s")
    dstart = _floats(inp, "decode_start_s")
    ttft = np.fmax(first, dstart) - arrival
    xfer, source = transfer_seconds(inp, t)
    ok = split & np.isfinite(ttft) & (ttft > 0) & np.isfinite(xfer)
    ttft_total = float(ttft[ok].sum()) if ok.any() else None
    wait_p = np.clip(_floats(inp, "scheduled_s") - arrival, 0.0, None)
    wait_d = np.clip(dstart - first - _floats(inp, "kv_transfer_s"), 0.0, None)
    busy_source, p_busy, d_busy = _pool_busy(inp)
    prefill, decode = pools(inp)
    return PlacementMetrics(
        disaggregated_requests=int(split.sum()),
        fallback_requests=fallback,
        transfer_failures=failures,
        failure_share=ratio(fallback + failures, int(split.sum()) + fallback + failures),
        prefill_instances=len(prefill),
        decode_instances=len(decode),
        transfer_source=source,
        kv_transfer_s=Distribution.of(xfer[split]),
        kv_transfer_seconds_total=_sum(xfer[split]),
        ttft_seconds_total=ttft_total,
        transfer_ttft_share=ratio(_sum(xfer[ok]), ttft_total),
        prefill_wait_share=(ratio(_sum(wait_p[ok]), ttft_total)
                            if np.isfinite(wait_p[ok]).any() else None),
        decode_wait_share=(ratio(_sum(wait_d[ok]), ttft_total)
                           if np.isfinite(wait_d[ok]).any() else None),
        busy_source=busy_source,
        prefill_busy_share=p_busy,
        decode_busy_share=d_busy,
    )


def colocation_stall_inputs(inp: AxisInput) -> tuple[float, float] | None:
    """(prefill-pool step seconds, mean decodes per decode-pool step) from the step log: what
    co-locating would put side by side, for the ledger's interference estimate. None without a
    step log naming instances and decode_tokens."""
    steps = inp.steps
    if steps is None or not (steps.has("instance") and steps.has("decode_tokens")):
        return None
    prefill_pool, decode_pool = pools(inp)
    prefill, decode = sorted(prefill_pool), sorted(decode_pool)
    prefill_s = decode_s = decodes_s = 0.0
    for b in steps.batches(("instance", "decode_tokens")):
        who = b["instance"].fillna("").astype(str).to_numpy(dtype=object)
        dur = step_column(b, "end_s") - step_column(b, "start_s")
        on_d = np.isin(who, decode)
        prefill_s += float(dur[np.isin(who, prefill)].sum())
        decode_s += float(dur[on_d].sum())
        decodes_s += float((dur * step_column(b, "decode_tokens", 0.0))[on_d].sum())
    mean_decodes = ratio(decodes_s, decode_s)
    if not prefill_s or mean_decodes is None:
        return None
    return prefill_s, mean_decodes
