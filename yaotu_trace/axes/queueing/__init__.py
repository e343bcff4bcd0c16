"""Queueing and scheduling axis: is time lost waiting for a seat, and why (cost-model §4, A0–A5).

Metrics (units in the names; requests with inconsistent timing are skipped per metric):

- queue_time_s = scheduled_s − arrival_s, per request (s); ttft_s = first_token_s − arrival_s.
  In a disaggregated trace (`data/handoff.py`) a handed-off request's queue adds its wait for a
  decode slot (decode_start_s − first_token_s − kv_transfer_s) and its TTFT is the client's
  (max(first_token_s, decode_start_s) − arrival_s).
- queue_share_of_ttft = Σ queue_time_s / Σ ttft_s over requests with both (ratio 0–1); from
  metrics, mean(vllm:request_queue_time_seconds) / mean(vllm:time_to_first_token_seconds).
- queue_share_of_latency = Σ queue_time_s / Σ (finish_s − arrival_s) (ratio); the axis score;
  from metrics, mean queue time / mean(vllm:e2e_request_latency_seconds).
- interarrival_cv = std / mean of gaps between arrivals (1 = Poisson); peak_to_mean = busiest
  1 s bin / mean rate.
- Windows of `window_s` seconds from the first arrival (a whole multiple of it when the span
  would need more than `metrics.grid_limit` windows: memory follows the data, not the
  clock). A request's work = prompt_len − cached_tokens (0 when absent) + output_len: what
  the engine computes, as a step log counts it. offered_tokens_per_s[w] = Σ work of
  requests arriving in w / window_s. achieved_tokens_per_s[w] = tokens served in w /
  window_s: from the step log Σ (prefill_tokens + decode_tokens) of steps starting in w,
  else each request's work spread evenly over [scheduled_s, finish_s].
  service_rate_tokens_per_s = max_w achieved (the peak sustained rate). rho[w] = offered /
  service rate; mean_rho = Σ offered / (windows · service rate); overloaded windows have rho ≥
  `overload_rho`; queue_grows = waiting(end of w) > waiting(start of w), with waiting(t) =
  #{arrival ≤ t} − #{scheduled ≤ t}. peak_windows: the 5 windows with the highest rho, in
  time order, with offered and achieved tokens/s and the queue at their start and end.
  excess_offered_tokens = Σ_w max(0, offered − service rate) · window_s (tokens): work beyond
  what the peak rate serves, which must queue, be shed or be served by added capacity.
- From the step log (read in record batches, `yaotu_trace.data.steplog`: only each instance's last
  step is carried from one batch to the next), per instance then summed: wall_s = last end −
  first start; busy_s = Σ (end_s − start_s); gpu_busy_fraction = busy_s / wall_s; idle gaps =
  next start − end; idle_while_waiting_s = Σ gaps after a step whose num_waiting > 0 (else
  requests waiting at the gap's start, from the request table); idle_while_waiting_fraction =
  that / wall_s.
- tokens_per_step = prefill_tokens + decode_tokens (tokens); token_budget_tokens = the engine's
  max_num_batched_tokens when given, else the largest step seen (inferred). step_fill_p75 = P75
  tokens_per_step / budget (without a step log: the metrics' mean step size / the given
  budget). metrics_tokens_per_step_mean = Δsum / Δcount of the
  vllm:iteration_tokens_total histogram (tokens). running_p75 = P75 num_running (or
  vllm:num_requests_running samples); seq_cap = max_num_seqs or the largest num_running seen;
  running_fill_p75 = running_p75 / seq_cap (ratio).
- kv_usage_p75: P75 of kv_blocks_used / kv_blocks_total (else kv_usage) of the steps, or
  vllm:kv_cache_usage_perc / sglang:token_usage (metrics) (ratio).
- The causes (rules Q001, Q003–Q005) are judged in the windows where the queue is
  (`yaotu_trace.axes.queueing.windows`): growing windows (the queue rises by
  growth_min_requests and growth_min_share of the window's arrivals) and queued ones (growing,
  or requests waiting at both edges), the queue counted by the step log, else the metrics,
  else the request table, through one function (`growth_windows`). A queue to explain (Q004,
  Q005): some window is queued; without any count of the queue, queue_share_of_ttft ≥
  queue_share_warn or waiting_share ≥ its threshold. Q006 (cause `unidentified`): the queue's
  share of latency (else of TTFT) ≥ queue_share_warn and no cause found.
- waiting_share: share of steps (or metric samples) with num_waiting > 0 (ratio);
  waiting_mean: duration-weighted mean of num_waiting over the step log (requests).
- Little's law (rule A0). Observed: waiting_mean = Σ over instances of ∫ num_waiting dt / the
  cluster's span (first step start to last step end): the per-instance rows of a cluster are
  summed at each instant, not averaged. Expected, from requests arriving in that span:
  little_expected_waiting = Σ queue_time_s / span (λ·W̄q, waiting counted continuously) and
  little_expected_sampled = Σ max(0, scheduled_s − first step start ≥ arrival_s on the
  request's instance) / span (waiting as a log sampled after admission at each step start sees
  it, as vLLM logs it: a request arriving mid-step is invisible until the next step). The
  observed mean must lie between the two (±little_mismatch); little_mismatch = the relative
  distance of waiting_mean outside [low, high] of the two expectations (0 inside) (ratio).
  Engines count preempted requests as waiting again, which queue_time_s does not hold, so with
  preemptions in the trace only the low end is checked.
"""

from __future__ import annotations

from yaotu_trace.axes.queueing.analyze import analyze_queueing
from yaotu_trace.axes.queueing.metrics import (
    PeakWindow,
    QueueingMetrics,
    Windows,
    spread_work,
    waiting_at,
)
from yaotu_trace.axes.queueing.steps import step_stats

__all__ = ["PeakWindow", "QueueingMetrics", "Windows", "analyze_queueing", "spread_work",
           "step_stats", "waiting_at"]
