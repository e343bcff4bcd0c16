"""Prefill/decode interference axis: decode time lost to other requests' prefill (§3.1, D1–D5).

Metrics (units in the names):

- inter-token gaps (s): consecutive differences of each request's token_times_s (the first
  token onwards); decode_seconds_total = Σ gaps over all requests.
- median_decode_step_s: the median duration (end_s − start_s) of decode-only steps
  (prefill_tokens = 0) in the step log, else the median inter-token gap.
- stall: a gap > stall_factor × median_decode_step_s (the `k` of cost-model §3.1).
- a stall coincides with prefill when, on the same instance, a step with prefill_tokens > 0
  overlaps the gap (step log), or else another request's first token (first_token_s, or its
  first entry of token_times_s) falls inside the gap — its prefill ran then. Without an
  instance column all requests are taken as co-located.
- prefill_coincidence = stalls coinciding with prefill / stalls (ratio).
- decode_seconds_lost = Σ over coinciding stalls of (gap − median_decode_step_s) (s): each
  decoding request loses the excess of its gap, so this is Σ_k stall_k · B_k of §3.1.
- interference_share = decode_seconds_lost / decode_seconds_total (ratio); the axis score.
- tbt_s: distribution of the gaps; tbt_p25_s their 25th percentile.
- metrics_itl_mean_s: mean of vllm:inter_token_latency_seconds (or SGLang's) over the export (s);
  context only — a mean cannot show stalls or their coincidence with prefill.
- placement: when some request prefilled on one instance and decoded on another, the KV
  transfer, the two pools' waits and loads, fallbacks and failed transfers (`placement`
  module); each handed-off request's first gap (its transfer) is then not a stall.
- the P/D network check (`network` module, rules D003/D004), asked once interference is
  material: what moving each prompt's KV between instances would cost on `--link-gbps`.
"""

from __future__ import annotations

from yaotu_trace.axes.pd_interference.analyze import analyze_pd_interference
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics

__all__ = ["InterferenceMetrics", "analyze_pd_interference"]
