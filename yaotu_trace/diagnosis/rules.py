"""The rule catalog of `trace diagnose`: stable ids, severity, trigger, evidence and fix.

The axis analyzers evaluate the triggers on their metrics and report `RuleHit`s by id; this
module is the one place a rule's words live, and `docs/rules.md` is generated from it (a test
checks they agree). Ids are a letter per axis plus a number and never change meaning:
Q = queueing, K = KV memory, P = prefix reuse, D = prefill/decode interference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from yaotu_trace.axes.base import AxisName, Severity


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One diagnosis rule; `source` points at the cost-model rule it implements."""

    id: str
    axis: AxisName
    severity: Severity
    title: str
    trigger: str
    evidence: str
    fix: str
    source: str = ""


_Q, _K, _P, _D = (AxisName.QUEUEING, AxisName.KV_MEMORY, AxisName.PREFIX_REUSE,
                  AxisName.PD_INTERFERENCE)
_I, _W, _B = Severity.INFO, Severity.WARNING, Severity.BOTTLENECK

RULES: Final[Mapping[str, Rule]] = {
    r.id: r
    for r in (
        Rule(id="Q000", axis=_Q, severity=_W, source="A0",
             title="Little's law mismatch: trace incomplete or clocks inconsistent",
             trigger="mean num_waiting of the step log (a cluster's instances summed at each "
             "instant) lies outside [Σ queue_time_s / span, the waiting a log sampled after "
             "admission shows] by more than little_mismatch (relative); with preemptions only "
             "the low end binds",
             evidence="little_mismatch, waiting_mean, little_expected_waiting, "
             "little_expected_sampled",
             fix="check for dropped or duplicated rows and mixed clocks (monotonic vs wall); "
             "treat the other findings with caution"),
        Rule(id="Q001", axis=_Q, severity=_B, source="A1",
             title="Arrival burst above capacity",
             trigger="queue_share_of_ttft ≥ queue_share_of_ttft and peak_rho ≥ overload_rho in a "
             "window where the queue grows, and (with a step log) gpu_busy_fraction ≥ "
             "gpu_busy_saturated, idle_while_waiting_fraction < idle_waiting_saturated and a "
             "batch limit reached (P75 fill ≥ batch_at_limit)",
             evidence="queue_share_of_ttft, peak_rho, service and offered tokens/s, busy fraction",
             fix="capacity (replicas, faster hardware), admission control or early rejection, "
             "burst smoothing; chunking or disaggregation will not fix it"),
        Rule(id="Q002", axis=_Q, severity=_W, source="A2",
             title="Bursty arrivals, not mean load, make the queue",
             trigger="mean_rho < burst_mean_rho and interarrival_cv > burst_cv and P99 queue "
             "time ≥ burst_p99_to_mean × mean queue time",
             evidence="mean_rho, interarrival_cv, queue P99 / mean",
             fix="keep headroom or autoscale on queue depth"),
        Rule(id="Q003", axis=_Q, severity=_B, source="A3",
             title="GPU idle while requests wait: CPU dispatch overhead",
             trigger="idle_while_waiting_fraction ≥ idle_waiting_dispatch",
             evidence="idle_while_waiting_fraction, idle_while_waiting_s, gpu_busy_fraction",
             fix="overlap/async scheduling, multi-step scheduling, a separate API process, "
             "CUDA graphs"),
        Rule(id="Q004", axis=_Q, severity=_B, source="A4",
             title="Batch shape limited by policy",
             trigger="a standing queue, gpu_busy_fraction ≥ gpu_busy_saturated, median "
             "tokens_per_step < underfill_tokens, running_fill_p75 < batch_underfilled and KV "
             "usage < kv_low_usage",
             evidence="tokens_per_step P50, running_fill_p75, gpu_busy_fraction, kv_usage_p75",
             fix="raise max_num_batched_tokens or max_num_seqs; shortest-prompt-first admission "
             "against head-of-line blocking"),
        Rule(id="Q005", axis=_Q, severity=_B, source="A5",
             title="Admission blocked by KV memory",
             trigger="a standing queue, kv_usage_p75 ≥ kv_admission_usage and running_fill_p75 < "
             "batch_underfilled (when max_num_seqs is known)",
             evidence="kv_usage_p75, running_fill_p75, waiting_share",
             fix="see the kv_memory axis: capacity budget, block organisation and concurrency"),
        Rule(id="Q006", axis=_Q, severity=_W,
             title="Queueing without an identified cause",
             trigger="queue_share_of_ttft ≥ queue_share_warn and no rule Q001–Q005 fired "
             "(with a step log, also waiting_share ≥ waiting_share: the engine itself leaves "
             "requests waiting)",
             evidence="queue_share_of_ttft, peak_rho, gpu_busy_fraction",
             fix="read or add the step log (--steps) and engine metrics (--metrics) to tell "
             "burst, dispatch, batch shape and KV admission apart"),
        Rule(id="K001", axis=_K, severity=_B, source="B1",
             title="Preemption at a full KV cache",
             trigger="preemptions > 0 and KV usage at the preempting steps ≥ kv_preempt_usage",
             evidence="preemptions_total, kv_usage_at_preemption",
             fix="raise gpu_memory_utilization, FP8 KV, more TP, or lower max_num_seqs / "
             "max_num_batched_tokens"),
        Rule(id="K002", axis=_K, severity=_W, source="B2",
             title="Material preemption recompute",
             trigger="recompute_token_fraction > recompute_material or preempted_request_share > "
             "preempted_material",
             evidence="recompute_token_fraction, preempted_request_share, recomputed_tokens",
             fix="size the KV pool or cap concurrency so preemption stays rare"),
        Rule(id="K003", axis=_K, severity=_B, source="B2",
             title="Preemption recompute dominates",
             trigger="recompute_token_fraction > recompute_dominant",
             evidence="recompute_token_fraction, recomputed_tokens",
             fix="capacity budget, block organisation and concurrency first, not splitting "
             "clusters"),
        Rule(id="K004", axis=_K, severity=_W, source="B3",
             title="Peak KV demand above capacity",
             trigger="peak_demand_tokens > kv_capacity_tokens",
             evidence="peak_demand_tokens, kv_capacity_tokens, extra_kv_bytes",
             fix="FP8 KV (÷2), more TP (watch KV-head replication), higher "
             "gpu_memory_utilization, or lower max_num_seqs (trades back to queueing)"),
        Rule(id="K005", axis=_K, severity=_W, source="B4",
             title="Preemption at low average KV usage: spiky demand",
             trigger="preemptions > 0 and mean KV usage < kv_low_usage",
             evidence="kv_usage_mean, preemptions_total, n_safe_p95",
             fix="cap concurrency near n_safe_p95 (capacity / P95 final length)"),
        Rule(id="K006", axis=_K, severity=_I,
             title="Internal block waste above the PagedAttention norm",
             trigger="block_waste_fraction > block_waste",
             evidence="block_waste_fraction, block_size_tokens",
             fix="a smaller block size for short sequences"),
        Rule(id="P001", axis=_P, severity=_W, source="C1",
             title="Prefix recompute is material",
             trigger="achievable − observed hit rate > reuse_gap and recomputed reusable tokens "
             "> recompute_waste of prefill tokens (without cached_tokens: the latter alone)",
             evidence="achievable_hit_rate, observed_hit_rate, recomputed_share_of_prefill",
             fix="check cache keys (salt, adapter, template drift) and routing; attribute the gap"),
        Rule(id="P002", axis=_P, severity=_B, source="C1",
             title="Prefix recompute dominates prefill work",
             trigger="recomputed_share_of_prefill ≥ reuse_dominant",
             evidence="recomputed_share_of_prefill, recomputed_reusable_tokens",
             fix="fix cache keys and routing before adding compute"),
        Rule(id="P003", axis=_P, severity=_W, source="C2",
             title="Reuse lost to routing: cache-aware routing candidate",
             trigger="replicas > 1 and the routing share of the loss waterfall > routing_gap",
             evidence="routing_loss_share",
             fix="cache-aware (prefix-affinity) routing; watch hot-prefix load imbalance"),
        Rule(id="P004", axis=_P, severity=_W, source="C3",
             title="Reuse lost to cache capacity",
             trigger="the capacity share of the loss waterfall > capacity_gap",
             evidence="capacity_loss_share",
             fix="a larger pool or a tiered CPU/SSD cache (check Mooncake Eq. 2 for fetch vs "
             "recompute)"),
        Rule(id="P005", axis=_P, severity=_W,
             title="Reuse lost to cache keys (tenant salt, adapter, template)",
             trigger="the cache-key share of the loss waterfall > reuse_gap",
             evidence="key_loss_share",
             fix="review tenant salts and adapter namespaces; keep templates byte-stable"),
        Rule(id="P006", axis=_P, severity=_I,
             title="Reusable prefixes, observed hits unknown",
             trigger="no observed hits (cached_tokens or prefix-cache metrics) and "
             "achievable_hit_rate > reuse_gap",
             evidence="achievable_hit_rate, achievable_hit_tokens",
             fix="make sure prefix caching is on and export cached_tokens or "
             "vllm:prefix_cache_hits_total to compare"),
        Rule(id="D001", axis=_D, severity=_W, source="D1",
             title="Prefill/decode interference is material",
             trigger="interference_share ≥ interference_material and prefill_coincidence ≥ "
             "prefill_coincidence",
             evidence="interference_share, decode_seconds_lost, prefill_coincidence, stalls",
             fix="compare chunked prefill against P/D disaggregation (see the ledger)"),
        Rule(id="D002", axis=_D, severity=_B, source="D1",
             title="Prefill/decode interference dominates decode time",
             trigger="interference_share ≥ interference_dominant and prefill_coincidence ≥ "
             "prefill_coincidence",
             evidence="interference_share, decode_seconds_lost, prefill_coincidence",
             fix="chunked prefill with a budget from the TBT SLO, or P/D disaggregation when "
             "the network check passes"),
        Rule(id="D003", axis=_D, severity=_I, source="D3",
             title="P/D disaggregation passes the network check",
             trigger="D001 or D002, and prefill KV rate ≤ network_share_max × link and transfer "
             "≤ transfer_ttft_share of TTFT",
             evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
             fix="disaggregation is a candidate; weigh its routing and failure handling"),
        Rule(id="D004", axis=_D, severity=_I, source="D4",
             title="Prefer chunked prefill: disaggregation fails the network check",
             trigger="D001 or D002, and the network check of D003 fails",
             evidence="kv_bytes_per_s_peak, link bytes/s, transfer_ttft_share",
             fix="chunked prefill; disaggregation would add TTFT on this link"),
        Rule(id="D005", axis=_D, severity=_I, source="D5",
             title="Interference below the material level",
             trigger="interference_share < interference_material",
             evidence="interference_share",
             fix="not an interference problem; look at queueing, KV memory and prefix reuse"),
        Rule(id="D006", axis=_D, severity=_I,
             title="Decode stalls not explained by prefill",
             trigger="stalls exist and prefill_coincidence < prefill_coincidence",
             evidence="stalls, prefill_coincidence",
             fix="look for preemption, host stalls or network hiccups around the stalls"),
    )
}

SEVERITY_OF: Final[Mapping[str, Severity]] = {rid: r.severity for rid, r in RULES.items()}


def rules_markdown() -> str:
    """`docs/rules.md`, generated from the catalog (a test keeps the file equal to this)."""
    lines = [
        "# Diagnosis rules",
        "",
        "Generated from `yaotu_trace/diagnosis/rules.py` (a test keeps this file in sync).",
        "Ids are stable: Q = queueing, K = KV memory, P = prefix reuse, D = prefill/decode",
        "interference. Severity `bottleneck` or `warning` sets the axis status of that name;",
        "`info` findings leave the axis `ok`. Threshold names refer to",
        "`yaotu_trace/diagnosis/thresholds.py` and can be overridden with",
        "`--threshold name=value`; every finding's evidence shows the value it was compared",
        "with. `source` is the rule of cost-model.md §7 it implements.",
        "",
        "| id | severity | axis | title | source |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.id} | {r.severity} | {r.axis} | {r.title} | {r.source or '–'} |"
              for r in RULES.values()]
    for r in RULES.values():
        lines += [
            "",
            f"## {r.id}: {r.title}",
            "",
            f"- severity: {r.severity}",
            f"- axis: {r.axis}",
            f"- trigger: {r.trigger}",
            f"- evidence: {r.evidence}",
            f"- suggested fix: {r.fix}",
        ]
    lines += ["", "## Thresholds", "", "| name | default | unit | rationale |",
              "|---|---:|---|---|"]
    from yaotu_trace.diagnosis.thresholds import THRESHOLDS

    for t in THRESHOLDS.values():
        lines.append(f"| {t.name} | {t.default:g} | {t.unit} | {t.rationale} |")
    return "\n".join(lines) + "\n"
