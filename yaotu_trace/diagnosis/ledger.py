"""The remedy ledger (cost-model §8): for each candidate change, the work it saves and adds.

Every entry is estimated from the trace where the inputs allow, in tokens, seconds and bytes;
a quantity whose input is missing is kept with `value=None` and a basis that says what to pass
(for example `--model` for KV bytes per token). Formulas:

- larger_kv_pool saves recomputed_tokens of the kv_memory axis (FLOPs = 2 · N_active · tokens;
  GPU-seconds = FLOPs / (bf16 peak of `--gpu` × MFU 0.5)) and, when queueing waits for KV, the
  queue seconds; adds extra_kv_blocks = ceil((peak demand − capacity) / block) and
  extra_kv_bytes = extra_kv_blocks · block · kv_bytes_per_token; FP8 KV doubles the tokens.
- concurrency_cap (max_num_seqs near n_safe_p95) saves the same preemptions; adds queueing.
- chunked_prefill (budget τ = chunk_tokens) saves decode_seconds_lost; adds extra_steps =
  Σ_{p>τ} (ceil(p/τ) − 1), each paying at most one median decode step, and prefix-KV re-reads
  Σ_{p>τ} kv_bytes_per_token · p² / (2τ) bytes; prompts longer than τ see a higher TTFT.
- pd_disaggregation saves decode_seconds_lost (all interference); adds network bytes Σ p ·
  kv_bytes_per_token, transfer time per request α + p · kv_bytes_per_token / B_eff with α =
  transfer_latency_s and B_eff = link_gbps · 1e9 / 8 · link_efficiency, the peak KV rate
  (prefill tokens/s in the busiest window · kv_bytes_per_token) against the link, routing and
  failure fallback, and the mean rate Σ p · kv_bytes_per_token / arrival span. The network
  check (rule D3) passes when the peak rate ≤ network_share_max of the link and mean transfer ≤
  transfer_ttft_share of mean TTFT. The entry is `recommended=False` while preemption, host
  dispatch or prefix recompute is found or cannot be ruled out for lack of data (cost-model §7:
  those come first).
- cache_aware_routing saves the routing loss of the prefix waterfall (tokens, FLOPs); adds
  load imbalance on hot prefixes and router state.
- tenant_salt_review saves the cache-key loss of the waterfall; adds isolation risk.
- fix_cache_keys (prefix recomputed with no routing or tenant-key loss to blame: caching off
  or keys that never match) saves the recomputed reusable tokens; adds the KV that holds each
  shared prefix once (distinct shared prompt blocks · block · kv_bytes_per_token).
- capacity_admission saves the queue seconds of requests that arrived in overloaded windows
  and, when requests failed under load (rule Q007), those failed requests (capacity serves
  them; admission control at least fails them early and cheaply); adds capacity (peak_rho − 1
  of the service rate; ceil(peak_rho × instances) replicas) idle outside bursts
  (1 − mean_rho).
- overlap_scheduling saves idle_while_waiting_s; batch_budget saves underfilled step capacity.
- colocate_chunked_prefill (a disaggregated deployment with a placement finding, D007–D010)
  saves the transfers (bytes Σ p · kv_bytes_per_token over handed-off requests, their seconds
  and share of TTFT) and the second KV copy (the same bytes, held on both instances); adds
  interference, at most Σ prefill-pool step seconds × mean decodes per decode-pool step, and
  the chunked-prefill extra steps. The disaggregation entry and its network check use the
  observed transfer (kv_transfer_s, or decode_start_s − first_token_s) when the trace has it.
- route_by_load and route_by_cache_and_load (load imbalance, Q010) save the
  queue seconds that vanish under least-loaded and prefix-affinity routing; they add the prefix
  hits lost against the current routing (prefix replay, one cache per instance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace.axes.base import (
    AxisInput,
    AxisName,
    AxisResult,
    RuleHit,
    Status,
    check,
    fact,
    ratio,
)
from yaotu_trace.axes.failures import measure_failures
from yaotu_trace.axes.pd_interference.placement import (
    colocation_stall_inputs,
    split_rows,
    transfer_seconds,
)
from yaotu_trace.axes.thresholds import Thresholds

if TYPE_CHECKING:
    from yaotu_trace.diagnosis.route_cost import RouteHits


class Remedy(StrEnum):
    """Candidate changes, in ledger order."""

    LARGER_KV_POOL = "larger_kv_pool"
    CONCURRENCY_CAP = "concurrency_cap"
    OVERLAP_SCHEDULING = "overlap_scheduling"
    BATCH_BUDGET = "batch_budget"
    CAPACITY_ADMISSION = "capacity_admission"
    ROUTE_BY_LOAD = "route_by_load"
    ROUTE_BY_CACHE_AND_LOAD = "route_by_cache_and_load"
    CACHE_AWARE_ROUTING = "cache_aware_routing"
    TENANT_SALT_REVIEW = "tenant_salt_review"
    FIX_CACHE_KEYS = "fix_cache_keys"
    CHUNKED_PREFILL = "chunked_prefill"
    PD_DISAGGREGATION = "pd_disaggregation"
    COLOCATE_CHUNKED = "colocate_chunked_prefill"


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantity:
    """One estimated amount of work; `value` is None when an input is missing (see `basis`)."""

    name: str
    value: float | None
    unit: str
    basis: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry:
    """One remedy: the findings that make it a candidate, the work it saves and adds.

    `recommended` is False for a remedy that applies but waits on another axis (P/D
    disaggregation before preemption, dispatch and prefix recompute are ruled out);
    `withheld_because` says which.
    """

    remedy: Remedy
    axis: AxisName
    triggered_by: tuple[str, ...]
    saves: tuple[Quantity, ...]
    adds: tuple[Quantity, ...]
    caveats: tuple[str, ...] = ()
    recommended: bool = True
    withheld_because: tuple[str, ...] = ()


def _flops(tokens: float | None, inp: AxisInput) -> Quantity:
    n = inp.settings.active_params
    value = None if tokens is None or n is None else 2.0 * n * tokens
    return Quantity(name="prefill_flops", value=value, unit="FLOP",
                    basis="2 · N_active · tokens (linear layers)" if n else
                    "pass --model for the active parameter count")


def _gpu_seconds(tokens: float | None, inp: AxisInput) -> Quantity:
    """Prefill FLOPs as GPU-seconds on the `--gpu` (bf16 peak × MFU)."""
    n, f = inp.settings.active_params, inp.settings.gpu_flops_per_s
    value = None if tokens is None or n is None or f is None else 2.0 * n * tokens / f
    if n is not None and f is not None:
        basis = f"prefill_flops / ({inp.settings.gpu} bf16 peak × MFU 0.5)"
    else:
        basis = "pass --model and --gpu for GPU-seconds"
    return Quantity(name="prefill_gpu_seconds", value=value, unit="s", basis=basis)


def _kv_b(inp: AxisInput) -> int | None:
    return inp.settings.kv_bytes_per_token


def _missing_kv_basis(formula: str, inp: AxisInput) -> str:
    return formula if _kv_b(inp) is not None else "pass --model or --kv-bytes-per-token"


def _ids(result: AxisResult) -> set[str]:
    return set(result.rule_ids)


# The KV rules a larger pool or a concurrency cap answers, and the interference rules that
# make chunked prefill and disaggregation candidates.
KV_PREEMPTION = frozenset({"K001", "K002", "K003", "K004", "K005"})
INTERFERENCE = frozenset({"D001", "D002"})
# The placement rules of a disaggregated deployment, which make co-location a candidate.
PLACEMENT = frozenset({"D007", "D008", "D009", "D010"})


@dataclass(frozen=True)
class LedgerInput:
    """What every remedy reads: the four axes, the input they were judged on, the thresholds,
    and the per-request prompt and work (prompt + output) lengths in tokens."""

    axes: dict[AxisName, AxisResult]
    inp: AxisInput
    t: Thresholds
    prompt: np.ndarray
    work: np.ndarray

    @classmethod
    def of(cls, axes: dict[AxisName, AxisResult], inp: AxisInput, t: Thresholds) -> LedgerInput:
        """The ledger's input for one diagnosis."""
        prompt = inp.requests["prompt_len"].to_numpy(dtype=np.float64)
        work = prompt + inp.requests["output_len"].to_numpy(dtype=np.float64)
        return cls(axes=axes, inp=inp, t=t, prompt=prompt, work=work)

    def axis(self, name: AxisName) -> AxisResult:
        """One axis' result."""
        return self.axes[name]

    def ids(self, name: AxisName) -> set[str]:
        """The ids of the rules that fired on one axis."""
        return _ids(self.axes[name])

    @property
    def kv_b(self) -> int | None:
        """KV bytes per token (`--model` or `--kv-bytes-per-token`), None when unknown."""
        return _kv_b(self.inp)

    @cached_property
    def route_hits(self) -> RouteHits | None:
        """Prefix hits under other routings (replayed once, only when Q010 fired)."""
        from yaotu_trace.diagnosis.route_cost import route_hits

        return route_hits(self.inp)

    @cached_property
    def network(self) -> Network:
        """The P/D disaggregation network check's numbers, computed once."""
        return _network(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Network:
    """KV transfer of a P/D split on `--link-gbps`: bytes, per-request transfer seconds, the
    peak KV rate, the transfer's share of TTFT and whether the network check passes (D003)."""

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


def _larger_kv_pool(c: LedgerInput) -> LedgerEntry | None:
    """A larger KV pool (or FP8 KV): for preemption, queueing behind KV (Q005) or prefix hits
    lost to capacity (P004)."""
    kv, q, pr = c.axis(AxisName.KV_MEMORY), c.axis(AxisName.QUEUEING), c.axis(AxisName.PREFIX_REUSE)
    inp, kv_b = c.inp, c.kv_b
    kv_ids = c.ids(AxisName.KV_MEMORY) & KV_PREEMPTION
    kv_admission = "Q005" in c.ids(AxisName.QUEUEING)
    prefix_capacity = "P004" in c.ids(AxisName.PREFIX_REUSE)
    if not (kv_ids or kv_admission or prefix_capacity):
        return None
    km, qm = kv.metrics, q.metrics
    recomputed = getattr(km, "recomputed_tokens", None)
    saves = [
        Quantity(name="recomputed_prefill_tokens", value=recomputed, unit="tokens",
                 basis=str(getattr(km, "recompute_basis", None) or "kv_memory axis")),
        _flops(recomputed, inp),
        _gpu_seconds(recomputed, inp),
        Quantity(name="preemptions", value=getattr(km, "preemptions_total", None),
                 unit="preemptions", basis="kv_memory axis"),
    ]
    if prefix_capacity:
        pm = pr.metrics
        lost = (None if pm.capacity_loss_share is None or pm.prompt_tokens is None
                else pm.capacity_loss_share * pm.prompt_tokens)
        saves.append(Quantity(name="prefix_hits_lost_to_capacity", value=lost,
                              unit="tokens", basis="capacity step of the prefix waterfall "
                              "(C3); a CPU/SSD tier fetches them at tokens · kv_b bytes"))
    if kv_admission:
        saves.append(Quantity(name="kv_blocked_queue_seconds",
                              value=getattr(qm, "queue_seconds_total", None), unit="s",
                              basis="Σ queue_time_s while admission waits for KV (A5)"))
    extra_tokens = getattr(km, "extra_kv_tokens", None)
    block = int(inp.settings.block_size_tokens)
    extra_blocks = None if extra_tokens is None else float(np.ceil(extra_tokens / block))
    capacity = getattr(km, "kv_capacity_tokens", None)
    peak = getattr(km, "peak_demand_tokens", None)
    adds = [
        Quantity(name="extra_kv_tokens", value=extra_tokens, unit="tokens",
                 basis="peak demand − capacity per instance" if extra_tokens is not None
                 else "pass --kv-capacity and a trace with scheduled_s/finish_s"),
        Quantity(name="extra_kv_blocks", value=extra_blocks, unit="blocks",
                 basis=f"ceil(extra_kv_tokens / {block}-token block)"),
        Quantity(name="extra_kv_bytes",
                 value=None if extra_blocks is None or kv_b is None
                 else extra_blocks * block * kv_b,
                 unit="bytes", basis=_missing_kv_basis(
                     "(peak demand − capacity) in blocks × block bytes", inp)),
        Quantity(name="fp8_kv_capacity_tokens",
                 value=None if capacity is None else 2.0 * capacity, unit="tokens",
                 basis=("FP8 KV holds twice the tokens in the same bytes; "
                        + ("enough for the peak" if peak is not None and capacity is not None
                           and 2.0 * capacity >= peak else "compare with the peak demand"))
                 if capacity is not None else "pass --kv-capacity (or a step log with "
                 "kv_blocks_total)"),
    ]
    return LedgerEntry(
        remedy=Remedy.LARGER_KV_POOL, axis=AxisName.KV_MEMORY,
        triggered_by=tuple(sorted(kv_ids | ({"Q005"} if kv_admission else set())
                                  | ({"P004"} if prefix_capacity else set()))),
        saves=tuple(saves), adds=tuple(adds),
        caveats=("more TP adds two all-reduces per layer and replicates KV heads when "
                 "TP > kv heads", "FP8 KV halves bytes per token at an accuracy risk",
                 "a higher gpu_memory_utilization leaves less activation headroom",
                 "CPU offload adds PCIe traffic of 2 · kv_bytes_per_token per swapped "
                 "token"),
    )


def _concurrency_cap(c: LedgerInput) -> LedgerEntry | None:
    """A concurrency cap (max_num_seqs near n_safe_p95): the same preemptions, traded for
    queueing."""
    kv = c.axis(AxisName.KV_MEMORY)
    kv_ids = c.ids(AxisName.KV_MEMORY) & KV_PREEMPTION
    if not kv_ids:
        return None
    km = kv.metrics
    recomputed = getattr(km, "recomputed_tokens", None)
    n_safe = getattr(km, "n_safe_p95", None)
    return LedgerEntry(
        remedy=Remedy.CONCURRENCY_CAP, axis=AxisName.KV_MEMORY,
        triggered_by=tuple(sorted(kv_ids)),
        saves=(Quantity(name="preemptions", value=getattr(km, "preemptions_total", None),
                        unit="preemptions", basis="preemptions avoided if demand stays "
                        "under capacity"),
               Quantity(name="recomputed_prefill_tokens", value=recomputed, unit="tokens",
                        basis="kv_memory axis")),
        adds=(Quantity(name="max_num_seqs_suggested", value=n_safe, unit="requests",
                       basis="kv_capacity_tokens / P95(prompt_len + output_len)"
                       if n_safe is not None else "pass --kv-capacity"),
              Quantity(name="queueing", value=None, unit="s",
                       basis="fewer seats trade preemption for queue time (axis A)")),
    )


def _overlap_scheduling(c: LedgerInput) -> LedgerEntry | None:
    """Overlap (async) scheduling for a GPU idle while requests wait (Q003)."""
    qm = c.axis(AxisName.QUEUEING).metrics
    if "Q003" not in c.ids(AxisName.QUEUEING):
        return None
    return LedgerEntry(
        remedy=Remedy.OVERLAP_SCHEDULING, axis=AxisName.QUEUEING, triggered_by=("Q003",),
        saves=(Quantity(name="idle_while_waiting_s",
                        value=getattr(qm, "idle_while_waiting_s", None), unit="s",
                        basis="Σ idle gaps between steps while requests waited"),),
        adds=(Quantity(name="scheduling_lookahead_steps", value=1.0, unit="steps",
                       basis="the CPU prepares step k+1 while the GPU runs step k"),),
        caveats=("async output processing and a separate API process add host threads "
                 "and memory", "CUDA graphs add capture time and memory per batch size"),
    )


def _batch_budget(c: LedgerInput) -> LedgerEntry | None:
    """A larger batch budget for steps limited by policy (Q004)."""
    qm = c.axis(AxisName.QUEUEING).metrics
    if "Q004" not in c.ids(AxisName.QUEUEING):
        return None
    budget = getattr(qm, "token_budget_tokens", None)
    tokens = getattr(qm, "tokens_per_step", None)
    p50 = tokens.p50 if tokens is not None else None
    return LedgerEntry(
        remedy=Remedy.BATCH_BUDGET, axis=AxisName.QUEUEING, triggered_by=("Q004",),
        saves=(Quantity(name="unused_step_budget_share",
                        value=None if budget is None or p50 is None else 1 - p50 / budget,
                        unit="ratio", basis="1 − median tokens_per_step / token budget"),),
        adds=(Quantity(name="activation_memory", value=None, unit="bytes",
                       basis="a larger max_num_batched_tokens raises peak activations and "
                       "shrinks the KV pool"),
              Quantity(name="step_time", value=None, unit="s",
                       basis="bigger steps lengthen every decode's inter-token gap")),
    )


def _failed_under_load(c: LedgerInput) -> tuple[Quantity, ...]:
    """The requests that failed under load (Q007), as work capacity would have served."""
    if "Q007" not in c.ids(AxisName.QUEUEING):
        return ()
    fm = measure_failures(c.inp, float(c.t.window_s))
    load = None if fm is None else fm.under_load
    return (Quantity(name="failed_requests_under_load",
                     value=None if load is None else float(load.failures_under_load),
                     unit="requests",
                     basis="failed requests that arrived when the backlog was above its "
                     "median (Q007, axes/failures.py)"),)


def _capacity_admission(c: LedgerInput) -> LedgerEntry | None:
    """Capacity or admission control for arrival bursts (Q001, Q002) and failures under load
    (Q007)."""
    qm, work = c.axis(AxisName.QUEUEING).metrics, c.work
    burst = c.ids(AxisName.QUEUEING) & {"Q001", "Q002", "Q007"}
    inp = c.inp
    instances = (int(inp.requests["instance"].nunique()) if inp.has("instance") else 1) or 1
    if not burst:
        return None
    peak, mean = getattr(qm, "peak_rho", None), getattr(qm, "mean_rho", None)
    entry = LedgerEntry(
        remedy=Remedy.CAPACITY_ADMISSION, axis=AxisName.QUEUEING,
        triggered_by=tuple(sorted(burst)),
        saves=(Quantity(name="queue_seconds_in_overload",
                        value=getattr(qm, "queue_seconds_in_overload", None), unit="s",
                        basis="Σ queue_time_s of requests arriving in windows with rho ≥ "
                        "overload_rho"), *_failed_under_load(c)),
        adds=(Quantity(name="extra_capacity_share",
                       value=None if peak is None else max(0.0, peak - 1.0), unit="ratio",
                       basis="peak_rho − 1: capacity to add to serve the peak window"),
              Quantity(name="replicas_for_peak",
                       value=None if peak is None else float(np.ceil(max(peak, 1.0)
                                                                     * instances)),
                       unit="replicas",
                       basis=f"ceil(peak_rho × {instances} instance(s) seen): replicas "
                       "that serve the busiest window without a queue"),
              Quantity(name="idle_capacity_outside_bursts",
                       value=None if mean is None or peak is None
                       else max(0.0, 1.0 - mean / max(peak, 1.0)), unit="ratio",
                       basis="1 − mean_rho / max(peak_rho, 1) when sized for the peak"),
              Quantity(name="rejected_or_deferred_requests",
                       value=ratio(getattr(qm, "excess_offered_tokens", None),
                                   float(np.mean(work)) if work.size else None),
                       unit="requests",
                       basis="excess_offered_tokens / mean (prompt_len + output_len): what "
                       "admission control sheds or defers instead of queueing")),
    )
    if "Q010" in c.ids(AxisName.QUEUEING):
        why = ("load imbalance (Q010) comes first: another instance has free seats, so route "
               "by load before adding capacity")
        entry = replace(entry, recommended=False, withheld_because=(why,),
                        caveats=(*entry.caveats, f"withheld: {why}"))
    return entry


def _hits_lost(c: LedgerInput, hits: int | None, route: str) -> Quantity:
    """Prefix hit tokens a routing gives up against the current one (negative: it gains)."""
    rh = c.route_hits
    return Quantity(name="prefix_hits_lost", unit="tokens",
                    value=None if rh is None or hits is None else float(rh.current - hits),
                    basis=f"hit tokens as routed − under {route} ({rh.basis})" if rh is not None
                    else "needs prompt content (token or block ids) and the instance column "
                    "for the prefix replay")


def _route_by_load(c: LedgerInput) -> LedgerEntry | None:
    """Least-loaded routing for a queue on one instance next to free seats (Q010)."""
    lb = getattr(c.axis(AxisName.QUEUEING).metrics, "load_balance", None)
    if "Q010" not in c.ids(AxisName.QUEUEING) or lb is None:
        return None
    rh = c.route_hits
    return LedgerEntry(
        remedy=Remedy.ROUTE_BY_LOAD, axis=AxisName.QUEUEING, triggered_by=("Q010",),
        saves=(Quantity(name="queue_seconds_vanish", value=lb.queue_seconds_vanish_least_loaded,
                        unit="s", basis="least-loaded: " + lb.basis),
               Quantity(name="queue_seconds_vanish_even", value=lb.queue_seconds_vanish_even,
                        unit="s", basis="round-robin, the same model")),
        adds=(_hits_lost(c, None if rh is None else rh.least_loaded, "least-loaded"),
              _flops(None if rh is None else float(rh.current - rh.least_loaded), c.inp)),
        caveats=("a load-only router scatters requests that share a prefix over the caches",),
    )


def _route_by_cache_and_load(c: LedgerInput) -> LedgerEntry | None:
    """Prefix-affinity routing with a load check (sgl-router cache_aware, Dynamo kv-aware) for
    the same imbalance (Q010): its queue priced on the replay's own routes."""
    lb = getattr(c.axis(AxisName.QUEUEING).metrics, "load_balance", None)
    if "Q010" not in c.ids(AxisName.QUEUEING) or lb is None:
        return None
    rh = c.route_hits
    saved = None
    if (rh is not None and rh.affinity_instance is not None and lb.modelled_queue_seconds
            and lb.service_rate_tokens_per_s and lb.queue_seconds_total is not None):
        from yaotu_trace.axes.queueing.imbalance import modelled_queue_s_for

        arrival = c.inp.requests["arrival_s"].to_numpy(dtype=np.float64)
        queue = modelled_queue_s_for(arrival, c.work, lb.service_rate_tokens_per_s,
                                     rh.affinity_instance.astype(np.int64), len(lb.instances))
        share = min(1.0, max(0.0, 1.0 - queue / lb.modelled_queue_seconds))
        saved = share * lb.queue_seconds_total
    return LedgerEntry(
        remedy=Remedy.ROUTE_BY_CACHE_AND_LOAD, axis=AxisName.QUEUEING, triggered_by=("Q010",),
        saves=(Quantity(name="queue_seconds_vanish", value=saved, unit="s",
                        basis="the replay's prefix-affinity routes in the same FCFS model"
                        if saved is not None else "needs the prefix replay's routes"),),
        adds=(_hits_lost(c, None if rh is None else rh.prefix_affinity, "prefix-affinity"),
              Quantity(name="router_state", value=None, unit="",
                       basis="a prefix tree per instance in the router")),
        caveats=("the replay's prefix-affinity has no load override: sgl-router's cache_aware "
                 "sends to the least-loaded instance when max − min load > 64 and > 1.5×",),
    )


def _cache_aware_routing(c: LedgerInput) -> LedgerEntry | None:
    """Cache-aware routing for reuse lost to routing (P003)."""
    pm, inp, kv_b, prompt = c.axis(AxisName.PREFIX_REUSE).metrics, c.inp, c.kv_b, c.prompt
    prompt_total = getattr(pm, "prompt_tokens", None)
    routing_share = getattr(pm, "routing_loss_share", None)
    if "P003" not in c.ids(AxisName.PREFIX_REUSE):
        return None
    tokens = None if routing_share is None or prompt_total is None else \
        routing_share * prompt_total
    hot = getattr(pm, "hot_prefixes", ()) or ()
    top_share = ratio(hot[0].get("times"), len(prompt)) if hot else None
    return LedgerEntry(
        remedy=Remedy.CACHE_AWARE_ROUTING, axis=AxisName.PREFIX_REUSE,
        triggered_by=("P003",),
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens",
                        basis="reuse the waterfall loses to scope and routing"),
               _flops(tokens, inp), _gpu_seconds(tokens, inp)),
        adds=(Quantity(name="hot_prefix_request_share", value=top_share, unit="ratio",
                       basis="requests of the hottest lost prefix that would pile onto "
                       "one replica"),
              Quantity(name="remote_fetch_bytes",
                       value=None if tokens is None or kv_b is None else tokens * kv_b,
                       unit="bytes",
                       basis=_missing_kv_basis("tokens · kv_bytes_per_token if fetched "
                                               "from a global cache (Mooncake Eq. 2)", inp))),
        caveats=("router state and CPU per request", "queueing at replicas owning hot "
                 "prefixes"),
    )


def _tenant_salt_review(c: LedgerInput) -> LedgerEntry | None:
    """A review of tenant salts and namespaces for reuse lost to cache keys (P005)."""
    pm, inp = c.axis(AxisName.PREFIX_REUSE).metrics, c.inp
    prompt_total = getattr(pm, "prompt_tokens", None)
    key_share = getattr(pm, "key_loss_share", None)
    if "P005" not in c.ids(AxisName.PREFIX_REUSE):
        return None
    tokens = None if key_share is None or prompt_total is None else key_share * prompt_total
    return LedgerEntry(
        remedy=Remedy.TENANT_SALT_REVIEW, axis=AxisName.PREFIX_REUSE,
        triggered_by=("P005",),
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens",
                        basis="reuse lost to tenant isolation and model/adapter "
                        "namespaces"), _flops(tokens, inp), _gpu_seconds(tokens, inp)),
        adds=(Quantity(name="isolation_risk", value=None, unit="",
                       basis="sharing across tenants exposes cache-timing side channels; "
                       "share only public prefixes (system prompts, tools)"),),
    )


def _fix_cache_keys(c: LedgerInput) -> LedgerEntry | None:
    """Fix the cache keys: prefix recompute (P001, P002) with no routing or key loss to blame."""
    pm, inp, kv_b = c.axis(AxisName.PREFIX_REUSE).metrics, c.inp, c.kv_b
    recompute_ids = c.ids(AxisName.PREFIX_REUSE) & {"P001", "P002"}
    if not (recompute_ids and not c.ids(AxisName.PREFIX_REUSE) & {"P003", "P005"}):
        return None
    tokens = getattr(pm, "recomputed_reusable_tokens", None)
    from yaotu_trace.axes.kv_memory import shared_prefix_tokens

    prefix_tokens = shared_prefix_tokens(inp, int(inp.settings.block_size_tokens))
    return LedgerEntry(
        remedy=Remedy.FIX_CACHE_KEYS, axis=AxisName.PREFIX_REUSE,
        triggered_by=tuple(sorted(recompute_ids)),
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens",
                        basis=str(getattr(pm, "recomputed_basis", None)
                                  or "prefix_reuse axis")),
               _flops(tokens, inp), _gpu_seconds(tokens, inp)),
        adds=(Quantity(name="cached_prefix_tokens", value=prefix_tokens, unit="tokens",
                       basis="distinct prompt blocks shared by more than one request × "
                       "block size: KV that holds each shared prefix once"),
              Quantity(name="cached_prefix_bytes",
                       value=None if prefix_tokens is None or kv_b is None
                       else prefix_tokens * kv_b, unit="bytes",
                       basis=_missing_kv_basis("cached_prefix_tokens · kv_bytes_per_token",
                                               inp))),
        caveats=("turn prefix caching on and keep the bytes before the shared prefix "
                 "identical: no per-request salt, timestamp or request id ahead of the "
                 "system prompt",),
    )


def _chunked_prefill(c: LedgerInput) -> LedgerEntry | None:
    """Chunked prefill for material interference (D001, D002)."""
    im, inp, kv_b, prompt = c.axis(AxisName.PD_INTERFERENCE).metrics, c.inp, c.kv_b, c.prompt
    t: Thresholds = c.t
    pd_ids = c.ids(AxisName.PD_INTERFERENCE) & INTERFERENCE
    if not pd_ids:
        return None
    lost = getattr(im, "decode_seconds_lost", None)
    tau = float(t.chunk_tokens)
    long = prompt[prompt > tau]
    extra_steps = float((np.ceil(long / tau) - 1).sum())
    step_s = getattr(im, "median_decode_step_s", None)
    reread = None if kv_b is None else float((kv_b * long**2 / (2 * tau)).sum())
    return LedgerEntry(
        remedy=Remedy.CHUNKED_PREFILL, axis=AxisName.PD_INTERFERENCE,
        triggered_by=tuple(sorted(pd_ids)),
        saves=(Quantity(name="decode_seconds_lost", value=lost, unit="s",
                        basis="Σ (stall − median decode step) over stalls during prefill"),),
        adds=(Quantity(name="extra_steps", value=extra_steps, unit="steps",
                       basis=f"Σ_(p > τ) (ceil(p/τ) − 1), τ = {tau:g} tokens"),
              Quantity(name="extra_step_seconds_max",
                       value=None if step_s is None else extra_steps * step_s, unit="s",
                       basis="extra_steps · median decode step (upper bound of the fixed "
                       "per-step cost)"),
              Quantity(name="prefix_kv_reread_bytes", value=reread, unit="bytes",
                       basis=_missing_kv_basis("Σ_(p > τ) kv_bytes_per_token · p² / (2τ)",
                                               inp)),
              Quantity(name="prompts_with_higher_ttft", value=float(long.size),
                       unit="requests", basis="prompts longer than τ share every chunk's "
                       "step with decodes")),
        caveats=("chunks below about 2 × the ridge point (≈300–600 tokens) lose prefill "
                 "MFU",),
    )


def _busiest_window_sum(times_s: np.ndarray, values: np.ndarray, window_s: float) -> float:
    """The largest Σ values over the windows of `window_s` from the first time (0 without
    any): only the windows that hold a time are counted, so memory follows the rows, not
    the span of the clock."""
    if not times_s.size:
        return 0.0
    idx = np.floor((times_s - times_s.min()) / window_s).astype(np.int64)
    _, window = np.unique(idx, return_inverse=True)
    return float(np.bincount(window, weights=values).max())


def _network(c: LedgerInput) -> Network:
    """The network check's numbers (see the module docstring)."""
    t: Thresholds = c.t
    inp, prompt, kv_b = c.inp, c.prompt, c.kv_b
    s = inp.settings
    link_bytes_s = s.link_gbps * 1e9 / 8.0
    b_eff = link_bytes_s * t.link_efficiency
    network_bytes = transfer = mean_rate = None
    per_request = None
    arrival_all = inp.requests["arrival_s"].to_numpy(dtype=np.float64)
    span_s = float(arrival_all.max() - arrival_all.min()) if arrival_all.size else 0.0
    if kv_b is not None:
        network_bytes = float((prompt * kv_b).sum())
        per_request = t.transfer_latency_s + prompt * kv_b / b_eff
        transfer = float(per_request.sum())
        mean_rate = ratio(network_bytes, span_s)
    observed = _observed_transfer(c)
    if observed is not None:
        per_request, transfer = observed[0], float(observed[0].sum())
    # Prefill tokens per second in the busiest window of arrivals (or of prefill steps).
    window = float(t.window_s)
    arrival = inp.requests["arrival_s"].to_numpy(dtype=np.float64)
    peak_prefill = _busiest_window_sum(arrival, prompt, window) / window
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
    return Network(link_bytes_s=link_bytes_s, b_eff=b_eff, network_bytes=network_bytes,
                   per_request=per_request, transfer=transfer, mean_rate=mean_rate,
                   window=window, peak_rate=peak_rate, ttft_mean=ttft_mean,
                   xfer_share=xfer_share, passes=passes,
                   observed=None if observed is None else observed[1])


def _observed_transfer(c: LedgerInput) -> tuple[np.ndarray, str] | None:
    """The handed-off requests' measured transfer seconds and their column, when the trace
    records them (kv_transfer_s or decode_start_s); None otherwise."""
    if not (c.inp.has("kv_transfer_s") or c.inp.has("decode_start_s")):
        return None
    seconds, source = transfer_seconds(c.inp, c.t)
    sel = split_rows(c.inp) & np.isfinite(seconds)
    if "observed" not in source or not sel.any():
        return None
    return seconds[sel], source


def network_hit(c: LedgerInput) -> RuleHit | None:
    """The D003/D004 hit of the disaggregation network check, when interference is material."""
    if not c.ids(AxisName.PD_INTERFERENCE) & INTERFERENCE:
        return None
    t: Thresholds = c.t
    net, s, kv_b = c.network, c.inp.settings, c.kv_b
    link_bytes_s, peak_rate, xfer_share, passes = (net.link_bytes_s, net.peak_rate,
                                                   net.xfer_share, net.passes)
    evidence = (
        check("kv_bytes_per_s_peak", peak_rate, "<=", "network_share_max × link",
              t.network_share_max * link_bytes_s, "bytes/s"),
        check("transfer_ttft_share", xfer_share, "<=", "transfer_ttft_share",
              t.transfer_ttft_share),
        fact("link_gbps", s.link_gbps, "Gb/s"),
    )
    hit = RuleHit(rule_id="D003" if passes else "D004", evidence=evidence,
                  detail="" if kv_b is not None else "KV bytes per token unknown (--model): "
                  "the network check cannot pass")
    return hit


def _disaggregation_adds(c: LedgerInput) -> tuple[Quantity, ...]:
    """What P/D disaggregation adds: network bytes and rates, transfer time, routing, fallback."""
    t: Thresholds = c.t
    net, s, inp = c.network, c.inp.settings, c.inp
    per_request, xfer_share, ttft_mean, window = (net.per_request, net.xfer_share,
                                                  net.ttft_mean, net.window)
    network_bytes, mean_rate, transfer, b_eff, peak_rate = (
        net.network_bytes, net.mean_rate, net.transfer, net.b_eff, net.peak_rate)
    adds = [
        Quantity(name="network_bytes", value=network_bytes, unit="bytes",
                 basis=_missing_kv_basis("Σ prompt_len · kv_bytes_per_token", inp)),
        Quantity(name="kv_bytes_per_s_mean", value=mean_rate, unit="bytes/s",
                 basis=_missing_kv_basis("network_bytes / arrival span: the link rate at this "
                                         "trace's prefill rate", inp)),
        Quantity(name="transfer_s_mean",
                 value=None if per_request is None else float(per_request.mean()), unit="s",
                 basis=f"mean per handed-off request, {net.observed}" if net.observed else
                 _missing_kv_basis(f"mean per request on {s.link_gbps:g} Gb/s "
                                   "(--link-gbps)", inp)),
        Quantity(name="transfer_seconds_total", value=transfer, unit="s",
                 basis=f"Σ over handed-off requests, {net.observed}" if net.observed else
                 _missing_kv_basis(f"Σ (α + p · kv_b / B_eff), α = "
                                   f"{t.transfer_latency_s:g} s, B_eff = "
                                   f"{b_eff / 1e9:.3g} GB/s", inp)),
        Quantity(name="transfer_s_p99",
                 value=None if per_request is None else float(np.percentile(per_request, 99)),
                 unit="s", basis="99th percentile of the per-request transfer time"),
        Quantity(name="transfer_ttft_share", value=xfer_share, unit="ratio",
                 basis="mean transfer / mean TTFT" if ttft_mean is not None
                 else "needs first_token_s and --model"),
        Quantity(name="kv_bytes_per_s_peak", value=peak_rate, unit="bytes/s",
                 basis=_missing_kv_basis(f"peak prefill tokens/s over {window:g} s windows · "
                                         "kv_bytes_per_token", inp)),
        Quantity(name="routing", value=None, unit="",
                 basis="a P:D ratio to tune and a router that pairs instances; capacity strands "
                 "when the mix shifts"),
        Quantity(name="failure_fallback", value=None, unit="",
                 basis="a lost transfer or decode node must fall back to colocated prefill "
                 "(recompute p tokens)"),
        Quantity(name="weight_memory", value=None, unit="bytes",
                 basis="weights are held in both pools"),
    ]
    return tuple(adds)


def _pd_disaggregation(c: LedgerInput) -> LedgerEntry | None:
    """P/D disaggregation for material interference, withheld while another axis comes first."""
    pd_ids = c.ids(AxisName.PD_INTERFERENCE) & INTERFERENCE
    if not pd_ids:
        return None
    lost = getattr(c.axis(AxisName.PD_INTERFERENCE).metrics, "decode_seconds_lost", None)
    passes = c.network.passes
    entry = LedgerEntry(
        remedy=Remedy.PD_DISAGGREGATION, axis=AxisName.PD_INTERFERENCE,
        triggered_by=tuple(sorted(pd_ids)),
        saves=(Quantity(name="decode_seconds_lost", value=lost, unit="s",
                        basis="all interference (D1 metric)"),),
        adds=_disaggregation_adds(c),
        caveats=("disaggregation does not raise peak throughput (vLLM docs)",
                 "network check " + ("passes (D003)" if passes else "fails or is unknown "
                                     "(D004): prefer chunked prefill")),
    )
    if getattr(c.axis(AxisName.PD_INTERFERENCE).metrics, "placement", None) is not None:
        entry = replace(entry, caveats=(*entry.caveats, "already disaggregated: the stalls come "
                                        "from prefill on decode instances (fallbacks)"))
    withheld = withheld_by(c.axes)
    if withheld:
        entry = replace(entry, recommended=False, withheld_because=withheld,
                        caveats=(*entry.caveats, "withheld: " + "; ".join(withheld)))
    return entry


def _colocate_chunked(c: LedgerInput) -> LedgerEntry | None:
    """Back to co-located serving with chunked prefill, for a disaggregated deployment whose
    placement is at fault (D007–D010): no transfers and no second KV copy, but prefill shares
    steps with decodes again."""
    pm = getattr(c.axis(AxisName.PD_INTERFERENCE).metrics, "placement", None)
    ids = c.ids(AxisName.PD_INTERFERENCE) & PLACEMENT
    if pm is None or not ids:
        return None
    inp, kv_b, t = c.inp, c.kv_b, c.t
    handed_off = c.prompt[split_rows(inp)]
    moved = None if kv_b is None else float(handed_off.sum() * kv_b)
    tau = float(t.chunk_tokens)
    long = c.prompt[c.prompt > tau]
    extra_steps = float((np.ceil(long / tau) - 1).sum())
    stall = colocation_stall_inputs(inp)
    lost = None if stall is None else stall[0] * stall[1]
    return LedgerEntry(
        remedy=Remedy.COLOCATE_CHUNKED, axis=AxisName.PD_INTERFERENCE,
        triggered_by=tuple(sorted(ids)),
        saves=(Quantity(name="transfer_bytes", value=moved, unit="bytes",
                        basis=_missing_kv_basis("Σ prompt_len · kv_bytes_per_token over "
                                                "handed-off requests", inp)),
               Quantity(name="transfer_seconds_total", value=pm.kv_transfer_seconds_total,
                        unit="s", basis=pm.transfer_source),
               Quantity(name="transfer_ttft_share", value=pm.transfer_ttft_share,
                        unit="ratio", basis="Σ transfer / Σ TTFT of handed-off requests"),
               Quantity(name="second_kv_copy_bytes", value=moved, unit="bytes",
                        basis=_missing_kv_basis("each handed-off prompt's KV is written on "
                                                "its prefill and its decode instance", inp))),
        adds=(Quantity(name="decode_seconds_lost_max", value=lost, unit="s",
                       basis="Σ prefill-pool step seconds × mean decodes per decode step: "
                       "each prefill second beside the decodes stalls them (upper bound; "
                       "chunks bound each stall to one step)" if stall is not None else
                       "needs a step log with instance and decode_tokens per step"),
              Quantity(name="extra_steps", value=extra_steps, unit="steps",
                       basis=f"Σ_(p > τ) (ceil(p/τ) − 1), τ = {tau:g} tokens"),
              Quantity(name="prompts_with_higher_ttft", value=float(long.size),
                       unit="requests", basis="prompts longer than τ share every chunk's "
                       "step with decodes")),
        caveats=("one pool to size instead of two: the P:D ratio and its stranded capacity "
                 "go away", "tail TBT rises with the chunk budget; pick τ from the TBT SLO"),
    )


# The remedies in ledger order: each prices one candidate change, or returns None when no
# finding makes it one. A new remedy is a function above and a line here.
REMEDIES: Final[tuple[Callable[[LedgerInput], LedgerEntry | None], ...]] = (
    _larger_kv_pool,
    _concurrency_cap,
    _overlap_scheduling,
    _batch_budget,
    _capacity_admission,
    _route_by_load,
    _route_by_cache_and_load,
    _cache_aware_routing,
    _tenant_salt_review,
    _fix_cache_keys,
    _chunked_prefill,
    _pd_disaggregation,
    _colocate_chunked,
)


def build_ledger(
    axes: dict[AxisName, AxisResult], inp: AxisInput, t: Thresholds
) -> tuple[tuple[LedgerEntry, ...], list[RuleHit]]:
    """The ledger for the fired rules, plus the D3/D4 hits of the disaggregation network check."""
    c = LedgerInput.of(axes, inp, t)
    entries = tuple(entry for price in REMEDIES if (entry := price(c)) is not None)
    hit = network_hit(c)
    return entries, [] if hit is None else [hit]


def withheld_by(axes: dict[AxisName, AxisResult]) -> tuple[str, ...]:
    """Why P/D disaggregation must wait: preemption, dispatch or prefix recompute not yet ruled
    out (cost-model §7: those come before the choice between chunking and splitting)."""
    out: list[str] = []
    kv, q, pr = axes[AxisName.KV_MEMORY], axes[AxisName.QUEUEING], axes[AxisName.PREFIX_REUSE]
    if _ids(kv) & {"K001", "K002", "K003", "K004", "K005"}:
        out.append("KV preemption (kv_memory) comes first: re-prefills after preemption stall "
                   "decodes too")
    if q.cause == "dispatch_overhead":
        out.append("host dispatch gaps (queueing, Q003) come first: splitting does not remove "
                   "them")
    if q.cause == "load_imbalance":
        out.append("load imbalance (queueing, Q010) comes first: one instance queues while "
                   "another has free seats, which routing fixes")
    if _ids(pr) & {"P001", "P002"}:
        out.append("a reusable prefix is prefilled again and again (prefix_reuse) — fix cache "
                   "keys or routing first, which removes that prefill")
    undecided = {AxisName.KV_MEMORY: "preemption", AxisName.QUEUEING: "host dispatch",
                 AxisName.PREFIX_REUSE: "prefix recompute"}
    for axis, what in undecided.items():
        if axes[axis].status is Status.INSUFFICIENT_DATA:
            out.append(f"{what} is not ruled out: {axis} lacks data ({axes[axis].missing[0]})"
                       if axes[axis].missing else f"{what} is not ruled out: {axis} lacks data")
    return tuple(out)


def ledger_to_builtins(entries: tuple[LedgerEntry, ...]) -> list[dict[str, Any]]:
    """JSON-ready entries (used by tests and renderers that want plain dicts)."""
    from yaotu_trace.data.report import to_builtins

    out: list[dict[str, Any]] = to_builtins(list(entries))
    return out
