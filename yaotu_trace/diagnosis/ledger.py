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
  check (rules D003/D004, `axes/pd_interference/network.py`) passes when the peak rate ≤
  network_share_max of the link and mean transfer ≤ transfer_ttft_share of mean TTFT. The
  entry is `recommended=False` while preemption, host dispatch or prefix recompute is found or
  cannot be ruled out for lack of data (cost-model §7: those come first).
- cache_aware_routing saves what prefix-affinity routing over the same instances hits beyond
  the trace's own routing (two prefix replays; else the routing loss of the waterfall) in
  tokens and FLOPs; adds
  load imbalance on hot prefixes and router state.
- tenant_salt_review saves the cache-key loss of the waterfall; adds isolation risk.
- fix_cache_keys (prefix recomputed with no routing or tenant-key loss to blame: caching off
  or keys that never match) saves the recomputed reusable tokens (without observed hits, the
  waterfall's key and routing losses only: capacity's are larger_kv_pool's and kv_tier's);
  adds the KV that holds each shared prefix once (distinct shared prompt blocks · block ·
  kv_bytes_per_token).
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
- move_instances (one pool queues while the other idles, D009, D011) moves one instance from
  the idle pool to the queued one (adds one when the idle pool has only one): saves the queued
  pool's wait, adds the donor's load (busy × n / (n − 1)) and wait, from an FCFS fluid queue
  per pool (`diagnosis/pool_move.py`).
- route_by_load and route_by_cache_and_load (load imbalance, Q010) save the
  queue seconds that vanish under least-loaded and prefix-affinity routing; they add the prefix
  hits lost against the current routing (prefix replay, one cache per instance).

Which remedies are candidates is declared by the rules (`Rule.remedies`): an entry is priced
when a rule that names it fired, and `triggered_by` lists those rules; the ledger never names a
rule itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Final

import numpy as np

from yaotu_trace.axes.base import AxisInput, AxisName, AxisResult, Cause, Status, metrics_of, ratio
from yaotu_trace.axes.failures import measure_failures
from yaotu_trace.axes.kv_memory.metrics import KvMetrics, shared_prefix_tokens
from yaotu_trace.axes.kv_memory.rules.shared import recompute_is_material
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.pd_interference.network import Network, network_check
from yaotu_trace.axes.pd_interference.placement import colocation_stall_inputs, split_rows
from yaotu_trace.axes.prefix_reuse.metrics import PrefixMetrics
from yaotu_trace.axes.queueing.imbalance import modelled_queue_s_for
from yaotu_trace.axes.queueing.metrics import QueueingMetrics
from yaotu_trace.axes.rule import Mark, Remedy, Rule
from yaotu_trace.axes.rules import causes_found, fired_rules, rules_naming
from yaotu_trace.axes.thresholds import Thresholds
from yaotu_trace.data.report import to_builtins
from yaotu_trace.diagnosis.pool_move import PoolModel, pool_move
from yaotu_trace.diagnosis.route_cost import RouteHits, route_hits

# A smaller tier than the one replayed is named when the curve says it wins back this share of
# the capacity loss [proposed default].
SMALLER_TIER_SHOWN: Final = 0.25


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


@dataclass(frozen=True)
class LedgerInput:
    """What every remedy reads: the four axes, the input they were judged on, the thresholds,
    and the per-request prompt and work (prompt + output) lengths in tokens; the rules that
    make each remedy a candidate (`candidates`), and each axis' metrics by its own type."""

    axes: dict[AxisName, AxisResult]
    inp: AxisInput
    t: Thresholds
    prompt: np.ndarray
    work: np.ndarray

    @classmethod
    def of(cls, axes: dict[AxisName, AxisResult], inp: AxisInput, t: Thresholds) -> LedgerInput:
        """The ledger's input for one diagnosis."""
        prompt = inp.trace.array("prompt_len", np.float64)
        work = prompt + inp.trace.array("output_len", np.float64)
        return cls(axes=axes, inp=inp, t=t, prompt=prompt, work=work)

    def candidates(self, remedy: Remedy, axis: AxisName | None = None) -> tuple[Rule[Any], ...]:
        """The rules that fired (on `axis`, else on any) and name `remedy`, by id."""
        names = list(self.axes) if axis is None else [axis]
        return tuple(sorted((r for name in names for r in fired_rules(self.axes[name])
                             if remedy in r.remedies), key=lambda r: r.id))

    def triggered_by(self, remedy: Remedy) -> tuple[str, ...]:
        """The ids of the rules that make `remedy` a candidate (none: it is not one)."""
        return tuple(r.id for r in self.candidates(remedy))

    def causes(self, name: AxisName) -> frozenset[Cause]:
        """The causes the rules that fired on one axis name."""
        return causes_found(self.axes[name])

    @property
    def kv_b(self) -> int | None:
        """KV bytes per token (`--model` or `--kv-bytes-per-token`), None when unknown."""
        return _kv_b(self.inp)

    @cached_property
    def queueing(self) -> QueueingMetrics:
        """The queueing axis' metrics."""
        return metrics_of(self.axes[AxisName.QUEUEING], QueueingMetrics)

    @cached_property
    def kv_memory(self) -> KvMetrics:
        """The kv_memory axis' metrics."""
        return metrics_of(self.axes[AxisName.KV_MEMORY], KvMetrics)

    @cached_property
    def prefix_reuse(self) -> PrefixMetrics:
        """The prefix_reuse axis' metrics."""
        return metrics_of(self.axes[AxisName.PREFIX_REUSE], PrefixMetrics)

    @cached_property
    def pd_interference(self) -> InterferenceMetrics:
        """The pd_interference axis' metrics."""
        return metrics_of(self.axes[AxisName.PD_INTERFERENCE], InterferenceMetrics)

    @cached_property
    def route_hits(self) -> RouteHits | None:
        """Prefix hits under other routings (replayed once, only for a load imbalance)."""
        return route_hits(self.inp)

    @cached_property
    def network(self) -> Network:
        """The P/D disaggregation network check's numbers: those rules D003/D004 judged, on the
        same input (the pd_interference axis reads the ledger's)."""
        return network_check(self.inp, self.t)


def _larger_kv_pool(c: LedgerInput) -> LedgerEntry | None:
    """A larger KV pool (or FP8 KV): for preemption, queueing behind KV (admission) or prefix
    hits lost to capacity; each axis that makes it a candidate adds what it saves there."""
    inp, kv_b = c.inp, c.kv_b
    triggered_by = c.triggered_by(Remedy.LARGER_KV_POOL)
    if not triggered_by:
        return None
    kv_admission = bool(c.candidates(Remedy.LARGER_KV_POOL, AxisName.QUEUEING))
    prefix_capacity = bool(c.candidates(Remedy.LARGER_KV_POOL, AxisName.PREFIX_REUSE))
    km, qm = c.kv_memory, c.queueing
    recomputed = km.recomputed_tokens
    saves = [
        Quantity(name="recomputed_prefill_tokens", value=recomputed, unit="tokens",
                 basis=str(km.recompute_basis or "kv_memory axis")),
        _flops(recomputed, inp),
        _gpu_seconds(recomputed, inp),
        Quantity(name="preemptions", value=km.preemptions_total,
                 unit="preemptions", basis="kv_memory axis"),
    ]
    if prefix_capacity:
        pm = c.prefix_reuse
        lost = (None if pm.capacity_loss_share is None or pm.prompt_tokens is None
                else pm.capacity_loss_share * pm.prompt_tokens)
        saves.append(Quantity(name="prefix_hits_lost_to_capacity", value=lost,
                              unit="tokens", basis="capacity step of the prefix waterfall "
                              "(C3); a CPU/SSD tier fetches them at tokens · kv_b bytes"))
    if kv_admission:
        saves.append(Quantity(name="kv_blocked_queue_seconds",
                              value=qm.queue_seconds_total, unit="s",
                              basis="Σ queue_time_s while admission waits for KV (A5)"))
    extra_tokens = km.extra_kv_tokens
    block = int(inp.settings.block_size_tokens)
    extra_blocks = None if extra_tokens is None else float(np.ceil(extra_tokens / block))
    capacity = km.kv_capacity_tokens
    peak = km.peak_demand_tokens
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
        remedy=Remedy.LARGER_KV_POOL, axis=AxisName.KV_MEMORY, triggered_by=triggered_by,
        saves=tuple(saves), adds=tuple(adds),
        caveats=("more TP adds two all-reduces per layer and replicates KV heads when "
                 "TP > kv heads", "FP8 KV halves bytes per token at an accuracy risk",
                 "a higher gpu_memory_utilization leaves less activation headroom",
                 "CPU offload adds PCIe traffic of 2 · kv_bytes_per_token per swapped "
                 "token"),
    )


def _kv_tier(c: LedgerInput) -> LedgerEntry | None:
    """A CPU tier below the GPU pool (P004): the size the prefix axis replayed under the
    engine's tier rules (`axes/prefix_reuse/tier.py`), the hits it wins back and the prefill
    they save, against the host memory, the loads and the PCIe bandwidth it adds."""
    triggered_by = c.triggered_by(Remedy.KV_TIER)
    if not triggered_by:
        return None
    tier = c.prefix_reuse.tier_candidate
    if tier is None:
        return LedgerEntry(
            remedy=Remedy.KV_TIER, axis=AxisName.PREFIX_REUSE, triggered_by=triggered_by,
            saves=(Quantity(name="tier_hit_tokens", value=None, unit="tokens",
                            basis="a tier replay needs one global GPU pool of finite size "
                                  "(--kv-capacity) and a preset with a tier policy"),),
            adds=(), caveats=("replay a tier with `trace replay --tier cpu=SIZE` to size it",))
    span = tier["span_s"]
    day = None if not span else 86_400.0 / span
    gpu_s = tier["gpu_seconds_saved"]
    peak = tier["peak_bytes_per_s"]
    size = tier["size_bytes"]
    headline = (f"add {_size_text(size, tier['size_tokens'])} CPU tier: "
                f"+{100 * tier['hit_gain_share']:.1f} % hits"
                + ("" if gpu_s is None or day is None
                   else f", −{gpu_s * day / 3600:.2f} GPU-h/day")
                + ("" if peak is None else f", +{peak / 1e9:.2f} GB/s PCIe at peak")
                + ("" if tier["ttft_change_share"] is None
                   else f", TTFT {_signed(100 * tier['ttft_change_share'])} %"))
    saves = (
        Quantity(name="tier_hit_tokens", value=float(tier["hit_tokens_gained"]), unit="tokens",
                 basis=f"{tier['policy']} tier replay of {tier['size_tokens']:,} tokens "
                       f"({100 * tier['recovered_share']:.0f} % of the capacity loss)"),
        Quantity(name="prefill_gpu_seconds_net", value=gpu_s, unit="s",
                 basis="prefill saved − loads added (sim/fetch.py)" if gpu_s is not None
                 else "pass --model and --gpu for GPU-seconds"),
        Quantity(name="prefill_gpu_hours_per_day",
                 value=None if gpu_s is None or day is None else gpu_s * day / 3600,
                 unit="GPU-h", basis="per day of the trace's traffic"),
    )
    adds = (
        Quantity(name="host_memory_bytes", value=None if size is None else float(size),
                 unit="bytes", basis=_missing_kv_basis("tier tokens × kv_bytes_per_token",
                                                       c.inp)),
        Quantity(name="load_seconds", value=tier["load_s"], unit="s",
                 basis="Σ per request: tokens × kv_b / PCIe (63 GB/s, docs/tiers.md)"),
        Quantity(name="peak_pcie_bytes_per_s", value=peak, unit="bytes/s",
                 basis="loads in the busiest minute of arrivals"),
        Quantity(name="ttft_change_share", value=tier["ttft_change_share"], unit="ratio",
                 basis="Σ (load − prefill saved) / Σ prefill after the GPU hit"),
    )
    caveats = [headline, "loads are not overlapped with the prefill (an upper bound on the "
               "time they add)"]
    # The smaller sizes tried, for a host that cannot hold this one (the one-pass curve's
    # estimate; the size above is the tier replay's).
    smaller = [p for p in tier.get("smaller_sizes", ())
               if p["recovered_share_estimate"] >= SMALLER_TIER_SHOWN][-3:]
    if smaller:
        caveats.append("smaller tiers win back, by the one-pass LRU curve (an estimate, not "
                       "the tier replay): " + ", ".join(
                           f"{_size_text(p['size_bytes'], p['size_tokens'])} "
                           f"~{100 * p['recovered_share_estimate']:.0f} %" for p in smaller)
                       + " of the capacity loss")
    return LedgerEntry(remedy=Remedy.KV_TIER, axis=AxisName.PREFIX_REUSE,
                       triggered_by=triggered_by, saves=saves, adds=adds,
                       caveats=tuple(caveats))


def _signed(value: float) -> str:
    return f"{'−' if value < 0 else '+'}{abs(value):.1f}"


def _size_text(size_bytes: float | None, tokens: int) -> str:
    if size_bytes is None:
        return f"{tokens:,}-token"
    return f"{size_bytes / 2**30:,.0f} GiB"


def _concurrency_cap(c: LedgerInput) -> LedgerEntry | None:
    """A concurrency cap (max_num_seqs near n_safe_p95): the same preemptions, traded for
    queueing."""
    triggered_by = c.triggered_by(Remedy.CONCURRENCY_CAP)
    if not triggered_by:
        return None
    km = c.kv_memory
    recomputed = km.recomputed_tokens
    n_safe = km.n_safe_p95
    return LedgerEntry(
        remedy=Remedy.CONCURRENCY_CAP, axis=AxisName.KV_MEMORY, triggered_by=triggered_by,
        saves=(Quantity(name="preemptions", value=km.preemptions_total,
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
    """Overlap (async) scheduling for a GPU idle while requests wait (host dispatch)."""
    triggered_by = c.triggered_by(Remedy.OVERLAP_SCHEDULING)
    if not triggered_by:
        return None
    return LedgerEntry(
        remedy=Remedy.OVERLAP_SCHEDULING, axis=AxisName.QUEUEING, triggered_by=triggered_by,
        saves=(Quantity(name="idle_while_waiting_s",
                        value=c.queueing.idle_while_waiting_s, unit="s",
                        basis="Σ idle gaps between steps while requests waited"),),
        adds=(Quantity(name="scheduling_lookahead_steps", value=1.0, unit="steps",
                       basis="the CPU prepares step k+1 while the GPU runs step k"),),
        caveats=("async output processing and a separate API process add host threads "
                 "and memory", "CUDA graphs add capture time and memory per batch size"),
    )


def _batch_budget(c: LedgerInput) -> LedgerEntry | None:
    """A larger batch budget for steps limited by policy (batch shape)."""
    triggered_by = c.triggered_by(Remedy.BATCH_BUDGET)
    if not triggered_by:
        return None
    budget = c.queueing.token_budget_tokens
    tokens = c.queueing.tokens_per_step
    p50 = tokens.p50 if tokens is not None else None
    return LedgerEntry(
        remedy=Remedy.BATCH_BUDGET, axis=AxisName.QUEUEING, triggered_by=triggered_by,
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
    """The requests that failed under load (a failure rule that makes capacity a candidate),
    as work capacity would have served."""
    if not any(Mark.FAILURES in r.marks for r in c.candidates(Remedy.CAPACITY_ADMISSION)):
        return ()
    fm = measure_failures(c.inp, float(c.t.window_s))
    load = None if fm is None else fm.under_load
    return (Quantity(name="failed_requests_under_load",
                     value=None if load is None else float(load.failures_under_load),
                     unit="requests",
                     basis="failed requests that arrived when the backlog was above its "
                     f"median ({_ids_marked(c, Remedy.CAPACITY_ADMISSION, Mark.FAILURES)}, "
                     "axes/failures.py)"),)


def _ids_marked(c: LedgerInput, remedy: Remedy, mark: Mark) -> str:
    """The ids of the rules with `mark` that make `remedy` a candidate, for its words."""
    return ", ".join(r.id for r in c.candidates(remedy) if mark in r.marks)


def _capacity_admission(c: LedgerInput) -> LedgerEntry | None:
    """Capacity or admission control for arrival bursts and failures under load; withheld for
    a load imbalance, which routing fixes first."""
    qm, work = c.queueing, c.work
    triggered_by = c.triggered_by(Remedy.CAPACITY_ADMISSION)
    inp = c.inp
    instances = (int(inp.requests["instance"].nunique()) if inp.has("instance") else 1) or 1
    if not triggered_by:
        return None
    peak, mean = qm.peak_rho, qm.mean_rho
    entry = LedgerEntry(
        remedy=Remedy.CAPACITY_ADMISSION, axis=AxisName.QUEUEING, triggered_by=triggered_by,
        saves=(Quantity(name="queue_seconds_in_overload",
                        value=qm.queue_seconds_in_overload, unit="s",
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
                       value=ratio(qm.excess_offered_tokens,
                                   float(np.mean(work)) if work.size else None),
                       unit="requests",
                       basis="excess_offered_tokens / mean (prompt_len + output_len): what "
                       "admission control sheds or defers instead of queueing")),
    )
    if Cause.LOAD_IMBALANCE in c.causes(AxisName.QUEUEING):
        why = (f"load imbalance ({rules_naming(Cause.LOAD_IMBALANCE)}) comes first: another "
               "instance has free seats, so route by load before adding capacity")
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
    """Least-loaded routing for a queue on one instance next to free seats (load imbalance)."""
    lb = c.queueing.load_balance
    triggered_by = c.triggered_by(Remedy.ROUTE_BY_LOAD)
    if not triggered_by or lb is None:
        return None
    rh = c.route_hits
    return LedgerEntry(
        remedy=Remedy.ROUTE_BY_LOAD, axis=AxisName.QUEUEING, triggered_by=triggered_by,
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
    the same load imbalance: its queue priced on the replay's own routes."""
    lb = c.queueing.load_balance
    triggered_by = c.triggered_by(Remedy.ROUTE_BY_CACHE_AND_LOAD)
    if not triggered_by or lb is None:
        return None
    rh = c.route_hits
    saved = None
    if (rh is not None and rh.affinity_instance is not None and lb.modelled_queue_seconds
            and lb.service_rate_tokens_per_s and lb.queue_seconds_total is not None):
        arrival = c.inp.requests["arrival_s"].to_numpy(dtype=np.float64)
        queue = modelled_queue_s_for(arrival, c.work, lb.service_rate_tokens_per_s,
                                     rh.affinity_instance.astype(np.int64), len(lb.instances))
        share = min(1.0, max(0.0, 1.0 - queue / lb.modelled_queue_seconds))
        saved = share * lb.queue_seconds_total
    return LedgerEntry(
        remedy=Remedy.ROUTE_BY_CACHE_AND_LOAD, axis=AxisName.QUEUEING,
        triggered_by=triggered_by,
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
    """Cache-aware routing for reuse lost to routing."""
    pm, inp, kv_b, prompt = c.prefix_reuse, c.inp, c.kv_b, c.prompt
    prompt_total = pm.prompt_tokens
    triggered_by = c.triggered_by(Remedy.CACHE_AWARE_ROUTING)
    if not triggered_by:
        return None
    routing_share, basis = pm.affinity_gain_share, ("prefix-affinity routing over the same "
                                                    "instances against the trace's routing "
                                                    "(prefix replay of both)")
    if routing_share is None:
        routing_share, basis = pm.routing_loss_share, "reuse the waterfall loses to routing"
    tokens = None if routing_share is None or prompt_total is None else \
        routing_share * prompt_total
    hot = pm.hot_prefixes or ()
    top_share = ratio(hot[0].get("times"), len(prompt)) if hot else None
    return LedgerEntry(
        remedy=Remedy.CACHE_AWARE_ROUTING, axis=AxisName.PREFIX_REUSE,
        triggered_by=triggered_by,
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens", basis=basis),
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
    """A review of tenant salts and namespaces for reuse lost to cache keys."""
    pm, inp = c.prefix_reuse, c.inp
    prompt_total = pm.prompt_tokens
    key_share = pm.key_loss_share
    triggered_by = c.triggered_by(Remedy.TENANT_SALT_REVIEW)
    if not triggered_by:
        return None
    tokens = None if key_share is None or prompt_total is None else key_share * prompt_total
    return LedgerEntry(
        remedy=Remedy.TENANT_SALT_REVIEW, axis=AxisName.PREFIX_REUSE,
        triggered_by=triggered_by,
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens",
                        basis="reuse lost to tenant isolation and model/adapter "
                        "namespaces"), _flops(tokens, inp), _gpu_seconds(tokens, inp)),
        adds=(Quantity(name="isolation_risk", value=None, unit="",
                       basis="sharing across tenants exposes cache-timing side channels; "
                       "share only public prefixes (system prompts, tools)"),),
    )


def _fix_cache_keys(c: LedgerInput) -> LedgerEntry | None:
    """Fix the cache keys: prefix recompute with no routing or key loss to blame (neither
    cache-aware routing nor a salt review is a candidate)."""
    pm, inp, kv_b = c.prefix_reuse, c.inp, c.kv_b
    triggered_by = c.triggered_by(Remedy.FIX_CACHE_KEYS)
    if not triggered_by or c.triggered_by(Remedy.CACHE_AWARE_ROUTING) \
            or c.triggered_by(Remedy.TENANT_SALT_REVIEW):
        return None
    tokens = pm.recomputed_reusable_tokens
    basis = str(pm.recomputed_basis or "prefix_reuse axis")
    if pm.observed_hit_rate is None and pm.waterfall and pm.prompt_tokens:
        # Without the engine's hits the recomputed tokens are the waterfall's losses; the
        # capacity's are won back by a larger pool or a tier (larger_kv_pool, kv_tier), not by
        # the keys, so they are not this entry's to claim.
        tokens = ((pm.key_loss_share or 0.0) + (pm.routing_loss_share or 0.0)) * pm.prompt_tokens
        if tokens <= 0:
            return None
        basis = ("waterfall losses to cache keys and routing (no observed hits; the capacity's "
                 "are the pool's and a tier's)")
    prefix_tokens = shared_prefix_tokens(inp, int(inp.settings.block_size_tokens))
    return LedgerEntry(
        remedy=Remedy.FIX_CACHE_KEYS, axis=AxisName.PREFIX_REUSE, triggered_by=triggered_by,
        saves=(Quantity(name="prefill_tokens", value=tokens, unit="tokens", basis=basis),
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
    """Chunked prefill for material interference."""
    im, inp, kv_b, prompt = c.pd_interference, c.inp, c.kv_b, c.prompt
    t: Thresholds = c.t
    triggered_by = c.triggered_by(Remedy.CHUNKED_PREFILL)
    if not triggered_by:
        return None
    lost = im.decode_seconds_lost
    tau = float(t.chunk_tokens)
    long = prompt[prompt > tau]
    extra_steps = float((np.ceil(long / tau) - 1).sum())
    step_s = im.median_decode_step_s
    reread = None if kv_b is None else float((kv_b * long**2 / (2 * tau)).sum())
    return LedgerEntry(
        remedy=Remedy.CHUNKED_PREFILL, axis=AxisName.PD_INTERFERENCE, triggered_by=triggered_by,
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
    triggered_by = c.triggered_by(Remedy.PD_DISAGGREGATION)
    if not triggered_by:
        return None
    lost = c.pd_interference.decode_seconds_lost
    passes = c.network.passes
    entry = LedgerEntry(
        remedy=Remedy.PD_DISAGGREGATION, axis=AxisName.PD_INTERFERENCE,
        triggered_by=triggered_by,
        saves=(Quantity(name="decode_seconds_lost", value=lost, unit="s",
                        basis="all interference (D1 metric)"),),
        adds=_disaggregation_adds(c),
        caveats=("disaggregation does not raise peak throughput (vLLM docs)",
                 "network check " + ("passes (D003)" if passes else "fails or is unknown "
                                     "(D004): prefer chunked prefill")),
    )
    if c.pd_interference.placement is not None:
        entry = replace(entry, caveats=(*entry.caveats, "already disaggregated: the stalls come "
                                        "from prefill on decode instances (fallbacks)"))
    withheld = withheld_by(c.axes)
    if withheld:
        entry = replace(entry, recommended=False, withheld_because=withheld,
                        caveats=(*entry.caveats, "withheld: " + "; ".join(withheld)))
    return entry


def _colocate_chunked(c: LedgerInput) -> LedgerEntry | None:
    """Back to co-located serving with chunked prefill, for a disaggregated deployment whose
    placement is at fault: no transfers and no second KV copy, but prefill shares steps with
    decodes again."""
    pm = c.pd_interference.placement
    triggered_by = c.triggered_by(Remedy.COLOCATE_CHUNKED)
    if pm is None or not triggered_by:
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
        triggered_by=triggered_by,
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


def _pct_change(before: float | None, after: float | None) -> str:
    if before is None or after is None or before <= 0:
        return "–"
    return f"{100 * (after - before) / before:+.0f} %"


def _move_instances(c: LedgerInput) -> LedgerEntry | None:
    """One instance moved from the pool that idles to the one that queues (D009, D011): the
    queued pool's wait falls, the donor's load rises (`diagnosis/pool_move.py`)."""
    pm = c.pd_interference.placement
    triggered_by = c.triggered_by(Remedy.MOVE_INSTANCES)
    if pm is None or not triggered_by:
        return None
    taker = "prefill" if (pm.prefill_wait_share or 0.0) >= (pm.decode_wait_share or 0.0) \
        else "decode"
    move = pool_move(c.inp, pm, taker)
    if move is None:
        return None
    take, give = move.taker, move.donor
    action = (f"move 1 instance from {give.pool} to {taker}" if move.moved else
              f"add 1 {taker} instance (the {give.pool} pool has only one)")
    model = (f"FCFS fluid queue per pool: {take.pool} {take.instances} → "
             f"{take.instances + 1} instances at {_fmt_rate(take)} each; measured wait × "
             "modelled after / modelled now")
    saved = (None if take.wait_s is None or take.wait_after_s is None
             else take.wait_s - take.wait_after_s)
    ttft = move.ttft_seconds_total
    give_n = give.instances - 1 if move.moved else give.instances
    return LedgerEntry(
        remedy=Remedy.MOVE_INSTANCES, axis=AxisName.PD_INTERFERENCE, triggered_by=triggered_by,
        saves=(Quantity(name=f"{taker}_wait_seconds", value=saved, unit="s",
                        basis=f"{action}: {take.pool} wait {_secs(take.wait_s)} → "
                        f"{_secs(take.wait_after_s)} "
                        f"({_pct_change(take.wait_s, take.wait_after_s)}); {model}"),
               Quantity(name="ttft_share_saved", value=ratio(saved, ttft), unit="ratio",
                        basis="the wait saved / Σ client TTFT of handed-off requests")),
        adds=(Quantity(name=f"{give.pool}_busy_after", value=give.busy_after if move.moved
                       else None, unit="ratio",
                       basis=f"{give.pool} busy {_pct_of(give.busy_share)} → "
                       f"{_pct_of(give.busy_after)} "
                       f"({_pct_change(give.busy_share, give.busy_after)}): the same work on "
                       f"{give_n} instance(s) ({pm.busy_source or 'load not measured'})"
                       if move.moved else "no instance leaves the other pool"),
              Quantity(name=f"{give.pool}_wait_seconds_after", value=give.wait_after_s
                       if move.moved else None, unit="s",
                       basis=f"{give.pool} wait {_secs(give.wait_s)} → "
                       f"{_secs(give.wait_after_s)}, the same model with {give_n} "
                       "instance(s)" if move.moved else "no instance leaves the other pool"),
              Quantity(name="instances_added", value=0.0 if move.moved else 1.0,
                       unit="instances", basis="a move keeps the GPUs; adding one buys one")),
        caveats=(f"{action}; the pool's instances taken as identical, each pool one FCFS "
                 "fluid server (the model's bias cancels in the ratio)",
                 "re-run `trace simulate --pd` at the new ratio to confirm on the step model"),
    )


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f} s"


def _pct_of(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _fmt_rate(pool: PoolModel) -> str:
    return ("an unmeasured rate" if pool.rate_per_instance is None
            else f"{pool.rate_per_instance:,.4g} {pool.rate_unit}")


# How each remedy is priced, in ledger order (`Remedy`'s): a function that returns the entry
# when the rules that fired make it a candidate (they name it in `Rule.remedies`), else None.
# A new remedy is a `Remedy` value, a function above and a line here.
REMEDIES: Final[Mapping[Remedy, Callable[[LedgerInput], LedgerEntry | None]]] = {
    Remedy.LARGER_KV_POOL: _larger_kv_pool,
    Remedy.KV_TIER: _kv_tier,
    Remedy.CONCURRENCY_CAP: _concurrency_cap,
    Remedy.OVERLAP_SCHEDULING: _overlap_scheduling,
    Remedy.BATCH_BUDGET: _batch_budget,
    Remedy.CAPACITY_ADMISSION: _capacity_admission,
    Remedy.ROUTE_BY_LOAD: _route_by_load,
    Remedy.ROUTE_BY_CACHE_AND_LOAD: _route_by_cache_and_load,
    Remedy.CACHE_AWARE_ROUTING: _cache_aware_routing,
    Remedy.TENANT_SALT_REVIEW: _tenant_salt_review,
    Remedy.FIX_CACHE_KEYS: _fix_cache_keys,
    Remedy.CHUNKED_PREFILL: _chunked_prefill,
    Remedy.PD_DISAGGREGATION: _pd_disaggregation,
    Remedy.MOVE_INSTANCES: _move_instances,
    Remedy.COLOCATE_CHUNKED: _colocate_chunked,
}


def build_ledger(
    axes: dict[AxisName, AxisResult], inp: AxisInput, t: Thresholds
) -> tuple[LedgerEntry, ...]:
    """The ledger for the fired rules: each remedy they make a candidate, priced."""
    c = LedgerInput.of(axes, inp, t)
    return tuple(entry for remedy in Remedy if (entry := REMEDIES[remedy](c)) is not None)


def withheld_by(axes: dict[AxisName, AxisResult]) -> tuple[str, ...]:
    """Why P/D disaggregation must wait: preemption, dispatch or prefix recompute not yet ruled
    out (cost-model §7: those come before the choice between chunking and splitting)."""
    out: list[str] = []
    q = axes[AxisName.QUEUEING]
    kv = axes[AxisName.KV_MEMORY]
    if causes_found(kv) and recompute_is_material(kv):
        out.append("KV preemption (kv_memory) comes first: re-prefills after preemption stall "
                   "decodes too")
    elif causes_found(kv):
        out.append("KV memory (kv_memory) comes first: its capacity and concurrency before "
                   "splitting the cluster")
    if q.cause == Cause.DISPATCH_OVERHEAD:
        out.append(f"host dispatch gaps (queueing, {rules_naming(Cause.DISPATCH_OVERHEAD)}) "
                   "come first: splitting does not remove them")
    if q.cause == Cause.LOAD_IMBALANCE:
        out.append(f"load imbalance (queueing, {rules_naming(Cause.LOAD_IMBALANCE)}) comes "
                   "first: one instance queues while another has free seats, which routing "
                   "fixes")
    if Cause.PREFIX_RECOMPUTE in causes_found(axes[AxisName.PREFIX_REUSE]):
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
    out: list[dict[str, Any]] = to_builtins(list(entries))
    return out
