"""The P/D disaggregation network check (cost-model D3/D4): what moving each prompt's KV from a
prefill to a decode instance would cost on `--link-gbps`.

network_bytes = Σ prompt_len · kv_bytes_per_token; per request, transfer_s = α + p ·
kv_bytes_per_token / B_eff with α = transfer_latency_s and B_eff = link_gbps · 1e9 / 8 ·
link_efficiency (the observed transfer, kv_transfer_s or decode_start_s − first_token_s, when
the trace has it); the peak KV rate = prefill tokens/s in the busiest `window_s` of arrivals ·
kv_bytes_per_token; mean rate = network_bytes / arrival span. The check passes when the peak
rate ≤ network_share_max of the link and the mean transfer ≤ transfer_ttft_share of mean TTFT
(rules D003 and D004 judge it; the ledger prices disaggregation with the same numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.axes.base import AxisInput, ratio
from yaotu_trace.axes.pd_interference.placement import split_rows, transfer_seconds
from yaotu_trace.axes.thresholds import Thresholds


@dataclass(frozen=True, slots=True, kw_only=True)
class Network:
    """KV transfer of a P/D split on `--link-gbps`: bytes, per-request transfer seconds, the
    peak KV rate, the transfer's share of TTFT and whether the network check passes.
    `kv_bytes_per_token` is None when unknown (`--model`): the check cannot pass."""

    link_gbps: float
    kv_bytes_per_token: int | None
    link_bytes_s: float
    b_eff: float
    network_bytes: float | None
    per_request: np.ndarray | None
    transfer: float | None
    mean_rate: float | None
    window: float
    peak_rate: float | None
    ttft_mean: float | None
    xfer_share: float | None
    passes: bool
    observed: str | None = None


def busiest_window_sum(times_s: np.ndarray, values: np.ndarray, window_s: float) -> float:
    """The largest Σ values over the windows of `window_s` from the first time (0 without
    any): only the windows that hold a time are counted, so memory follows the rows, not
    the span of the clock."""
    if not times_s.size:
        return 0.0
    idx = np.floor((times_s - times_s.min()) / window_s).astype(np.int64)
    _, window = np.unique(idx, return_inverse=True)
    return float(np.bincount(window, weights=values).max())


def network_check(inp: AxisInput, t: Thresholds) -> Network:
    """The network check's numbers (see the module docstring)."""
    s = inp.settings
    kv_b = s.kv_bytes_per_token
    prompt = inp.requests["prompt_len"].to_numpy(dtype=np.float64)
    link_bytes_s = s.link_gbps * 1e9 / 8.0
    b_eff = link_bytes_s * t.link_efficiency
    network_bytes = transfer = mean_rate = None
    per_request = None
    arrival = inp.requests["arrival_s"].to_numpy(dtype=np.float64)
    span_s = float(arrival.max() - arrival.min()) if arrival.size else 0.0
    if kv_b is not None:
        network_bytes = float((prompt * kv_b).sum())
        per_request = t.transfer_latency_s + prompt * kv_b / b_eff
        transfer = float(per_request.sum())
        mean_rate = ratio(network_bytes, span_s)
    observed = _observed_transfer(inp, t)
    if observed is not None:
        per_request, transfer = observed[0], float(observed[0].sum())
    # Prefill tokens per second in the busiest window of arrivals (or of prefill steps).
    window = float(t.window_s)
    peak_prefill = busiest_window_sum(arrival, prompt, window) / window
    peak_rate = None if kv_b is None else peak_prefill * kv_b
    ttft_mean = None
    if inp.has("first_token_s"):
        first = inp.requests["first_token_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        if inp.has("decode_start_s"):  # disaggregated: the client sees token 1 after the KV
            first = np.fmax(first, inp.requests["decode_start_s"].to_numpy(
                dtype=np.float64, na_value=np.nan))
        ttft = first - arrival
        ttft = ttft[np.isfinite(ttft) & (ttft >= 0)]
        ttft_mean = float(ttft.mean()) if ttft.size else None
    xfer_share = None if per_request is None else ratio(float(per_request.mean()), ttft_mean)
    rate_ok = None if peak_rate is None else peak_rate <= t.network_share_max * link_bytes_s
    share_ok = None if xfer_share is None else xfer_share <= t.transfer_ttft_share
    passes = rate_ok is True and share_ok is not False
    return Network(link_gbps=s.link_gbps, kv_bytes_per_token=kv_b, link_bytes_s=link_bytes_s,
                   b_eff=b_eff, network_bytes=network_bytes, per_request=per_request,
                   transfer=transfer, mean_rate=mean_rate, window=window, peak_rate=peak_rate,
                   ttft_mean=ttft_mean, xfer_share=xfer_share, passes=passes,
                   observed=None if observed is None else observed[1])


def _observed_transfer(inp: AxisInput, t: Thresholds) -> tuple[np.ndarray, str] | None:
    """The handed-off requests' measured transfer seconds and their column, when the trace
    records them (kv_transfer_s or decode_start_s); None otherwise."""
    if not (inp.has("kv_transfer_s") or inp.has("decode_start_s")):
        return None
    seconds, source = transfer_seconds(inp, t)
    sel = split_rows(inp) & np.isfinite(seconds)
    if "observed" not in source or not sel.any():
        return None
    return seconds[sel], source
