"""Named thresholds of `trace diagnose`, each with its default and a one-line rationale.

Every number that is engineering judgement lives here (cost-model.md §7 marks them "proposed
default"); `--threshold name=value` overrides one, and reports print the values they used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from yaotu_trace.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class Threshold:
    """One threshold: its name, default value, unit and why it has that value."""

    name: str
    default: float
    unit: str
    rationale: str


# Name → definition. Order is the documentation order (by axis).
THRESHOLDS: Final[dict[str, Threshold]] = {
    t.name: t
    for t in (
        # Queueing and scheduling (cost-model §4, rules A0–A5).
        Threshold(name="window_s", default=5.0, unit="s",
                  rationale="5 s windows resolve bursts yet hold enough arrivals to rate (§4.2)"),
        Threshold(name="growth_min_requests", default=3.0, unit="requests",
                  rationale="a queue grows when it rises ≥3 requests in a window, above Poisson "
                  "noise at a step boundary"),
        Threshold(name="growth_min_share", default=0.1, unit="ratio",
                  rationale="…and by ≥10 % of the window's arrivals (a tenth not admitted), at "
                  "any request rate"),
        Threshold(name="burst_rate_ratio", default=1.5, unit="ratio",
                  rationale="arrivals in the growing windows ≥1.5 × the rest of the span is a "
                  "burst, not a steady overload (A1)"),
        Threshold(name="little_mismatch", default=0.10, unit="ratio",
                  rationale="Little's law holds exactly; >10 % apart means lost rows or skew (A0)"),
        Threshold(name="queue_share_of_ttft", default=0.5, unit="ratio",
                  rationale="queueing is the bottleneck when it is most of the wait for token 1"),
        Threshold(name="queue_share_warn", default=0.2, unit="ratio",
                  rationale="a fifth of TTFT in the queue is worth a look even without a cause"),
        Threshold(name="overload_rho", default=1.0, unit="ratio",
                  rationale="offered work at or above the peak sustained rate cannot drain (A1)"),
        Threshold(name="gpu_busy_saturated", default=0.9, unit="ratio",
                  rationale="a GPU busy >90 % of wall time has no slack to absorb a burst (A1)"),
        Threshold(name="idle_waiting_saturated", default=0.05, unit="ratio",
                  rationale="<5 % idle while requests wait means the GPU is not starved (A1)"),
        Threshold(name="idle_waiting_dispatch", default=0.15, unit="ratio",
                  rationale="≥15 % idle with a queue is host-side starvation (A3; vLLM blog 38 %)"),
        Threshold(name="batch_at_limit", default=0.9, unit="ratio",
                  rationale="P75 batch ≥ 0.9 × cap means the cap binds (Vidur's saturated batch)"),
        Threshold(name="batch_underfilled", default=0.7, unit="ratio",
                  rationale="running < 0.7 × max_num_seqs leaves a fifth+ of seats empty (A4)"),
        Threshold(name="underfill_tokens", default=256.0, unit="tokens",
                  rationale="below the ridge (≈150–300 tok/step A100–H100) steps cost the same"),
        Threshold(name="kv_admission_usage", default=0.9, unit="ratio",
                  rationale="KV ≥ 90 % with a queue and empty seats means memory blocks admission"),
        Threshold(name="kv_blocked_share", default=0.5, unit="ratio",
                  rationale="the queue's head short of KV blocks in half the waiting steps: KV "
                  "blocks admission"),
        Threshold(name="kv_low_usage", default=0.7, unit="ratio",
                  rationale="KV < 70 % is not what limits the batch (A4, Vidur C1.2)"),
        Threshold(name="waiting_share", default=0.25, unit="ratio",
                  rationale="requests waiting in a quarter of steps is a standing queue"),
        Threshold(name="burst_cv", default=1.5, unit="ratio",
                  rationale="inter-arrival CV > 1.5 is well beyond Poisson (CV 1) (A2)"),
        Threshold(name="burst_mean_rho", default=0.7, unit="ratio",
                  rationale="mean load < 0.7 leaves headroom, so queues come from bursts (A2)"),
        Threshold(name="burst_p99_to_mean", default=5.0, unit="ratio",
                  rationale="P99 queue ≥ 5 × mean queue is the 'P99 ≫ mean' of rule A2"),
        # KV memory (cost-model §5, rules B1–B4).
        Threshold(name="kv_preempt_usage", default=0.95, unit="ratio",
                  rationale="preemption at ≥95 % KV usage is capacity-bound (B1, vLLM docs)"),
        Threshold(name="recompute_material", default=0.02, unit="ratio",
                  rationale="recomputing >2 % of all tokens is measurable throughput (B2)"),
        Threshold(name="preempted_material", default=0.01, unit="ratio",
                  rationale=">1 % of requests preempted shows in their tail latency (B2)"),
        Threshold(name="recompute_dominant", default=0.10, unit="ratio",
                  rationale=">10 % of work redone dominates other losses (B2)"),
        Threshold(name="block_waste", default=0.05, unit="ratio",
                  rationale="PagedAttention waste is <4 %; more means blocks too big for lengths"),
        # Prefix reuse (cost-model §6, rules C1–C3).
        Threshold(name="reuse_gap", default=0.10, unit="ratio",
                  rationale="10 pp between achievable and observed hits is material (C1)"),
        Threshold(name="recompute_waste", default=0.05, unit="ratio",
                  rationale="reusable tokens >5 % of prefill are worth a cache-key review (C1)"),
        Threshold(name="reuse_dominant", default=0.25, unit="ratio",
                  rationale="a quarter of prefill redone is the largest single saving (C1)"),
        Threshold(name="routing_gap", default=0.10, unit="ratio",
                  rationale="10 pp lost to routing makes cache-aware routing a candidate (C2)"),
        Threshold(name="capacity_gap", default=0.10, unit="ratio",
                  rationale="10 pp lost to capacity makes a larger or tiered pool a candidate"),
        # Prefill/decode interference (cost-model §3, rules D1–D5).
        Threshold(name="stall_factor", default=5.0, unit="ratio",
                  rationale="a gap > 5 × the median decode step is a stall (cost-model §3.1)"),
        Threshold(name="prefill_coincidence", default=0.8, unit="ratio",
                  rationale="≥80 % of stalls during prefill pins them on interference (D1)"),
        Threshold(name="interference_material", default=0.05, unit="ratio",
                  rationale="<5 % of decode time lost is not an interference problem (D5)"),
        Threshold(name="interference_dominant", default=0.15, unit="ratio",
                  rationale="losing >15 % of decode time costs as much as a missing replica"),
        # Remedy ledger (cost-model §3.2–§3.3, §8).
        Threshold(name="chunk_tokens", default=512.0, unit="tokens",
                  rationale="vLLM's first chunked-prefill budget, best ITL on A100 (PR #4580)"),
        Threshold(name="transfer_latency_s", default=0.00057, unit="s",
                  rationale="fixed cost per KV transfer, Mooncake fit 0.57 ms + bytes/B (§3.3)"),
        Threshold(name="link_efficiency", default=0.7, unit="ratio",
                  rationale="Mooncake moved KV at 71 % of line rate (142 of 200 GB/s, §3.3)"),
        Threshold(name="network_share_max", default=0.5, unit="ratio",
                  rationale="KV traffic above half the link leaves no room for bursts (D3)"),
        Threshold(name="transfer_ttft_share", default=0.10, unit="ratio",
                  rationale="a transfer adding >10 % to TTFT erodes what splitting gains (D3)"),
        # Failed requests (queueing rules Q007–Q008, axes/failures.py).
        Threshold(name="failure_share", default=0.01, unit="ratio",
                  rationale="1 % of requests failing is a user-visible error rate (a 99 % SLO)"),
        Threshold(name="failure_min_requests", default=5.0, unit="requests",
                  rationale="fewer failures than 5 are anecdotes, not a pattern to place"),
        Threshold(name="failure_load_share", default=0.8, unit="ratio",
                  rationale="80 % of failures in the busier half of arrivals is load, not luck"),
        Threshold(name="instance_failure_share", default=0.5, unit="ratio",
                  rationale="one instance holding half of all failures is where to look first"),
        Threshold(name="instance_failure_lift", default=2.0, unit="ratio",
                  rationale="failing twice as often as the trace sets it apart from its peers"),
        # Disaggregated serving: the placement rules D007–D010.
        Threshold(name="kv_transfer_dominant", default=0.5, unit="ratio",
                  rationale="half of TTFT moving KV: the link, not prefill, sets TTFT (D008)"),
        Threshold(name="pool_wait_share", default=0.2, unit="ratio",
                  rationale="a fifth of TTFT queued for one pool is a pool short of instances"),
        Threshold(name="pool_idle_busy", default=0.5, unit="ratio",
                  rationale="a pool busy under half the time can give instances away (D009)"),
        Threshold(name="transfer_failure_share", default=0.01, unit="ratio",
                  rationale="1 % of requests failing or falling back re-prefills visibly (D010)"),
        # Many instances (rule Q010).
        Threshold(name="imbalance_vanish_share", default=0.5, unit="ratio",
                  rationale="routing that would remove half the queue, not capacity, is the cause"),
        Threshold(name="imbalance_work_lift", default=1.25, unit="ratio",
                  rationale="1.25 × an even share of the work is uneven routing; least-loaded "
                  "stays near 1 (Q010)"),
    )
}

_FIELDS = tuple(THRESHOLDS)
# Thresholds used as divisors or lengths must be strictly positive.
_POSITIVE: Final = frozenset({"window_s", "chunk_tokens", "link_efficiency"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """The thresholds in force for one run (defaults plus `--threshold` overrides)."""

    values: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {name: t.default for name, t in THRESHOLDS.items()}
    )

    def __getattr__(self, name: str) -> float:
        # NOTE: slots dataclass: regular attributes resolve first; this serves threshold names.
        try:
            return float(self.values[name])
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str) -> float:
        """The value of one threshold; an unknown name is a one-line `ConfigError`."""
        if name not in self.values:
            raise ConfigError(unknown_message(name))
        return float(self.values[name])

    def only(self, names: Iterable[str]) -> Thresholds:
        """These thresholds alone: a rule's check sees just the ones it declares, so reading
        another is an AttributeError rather than a hidden dependency."""
        return Thresholds(values={name: self.values[name] for name in names})

    def overridden(self) -> dict[str, float]:
        """The thresholds whose value differs from the default."""
        return {k: float(v) for k, v in self.values.items() if v != THRESHOLDS[k].default}


def unknown_message(name: str) -> str:
    """The one-line error for a threshold name that does not exist."""
    return f"unknown threshold {name!r}; valid names: {', '.join(_FIELDS)}"


def make_thresholds(overrides: Mapping[str, float] | None = None) -> Thresholds:
    """Defaults with `overrides` applied; unknown names and negative values are `ConfigError`s."""
    values = {name: t.default for name, t in THRESHOLDS.items()}
    for name, value in (overrides or {}).items():
        if name not in values:
            raise ConfigError(unknown_message(name))
        if not 0 <= float(value) < math.inf:
            raise ConfigError(f"threshold {name}={value} must be a finite number >= 0")
        if name in _POSITIVE and not float(value) > 0:
            raise ConfigError(f"threshold {name}={value} must be greater than 0")
        values[name] = float(value)
    return Thresholds(values=values)


def parse_threshold_options(pairs: Iterable[str]) -> Thresholds:
    """Parse repeated `--threshold name=value` options into `Thresholds`."""
    overrides: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(
                f"--threshold {pair!r}: write it as name=value, e.g. --threshold stall_factor=4"
            )
        if name not in THRESHOLDS:
            raise ConfigError(unknown_message(name))
        try:
            overrides[name] = float(text)
        except ValueError:
            raise ConfigError(
                f"--threshold {pair!r}: {text.strip()!r} is not a number; e.g. {name}="
                f"{THRESHOLDS[name].default:g}"
            ) from None
    return make_thresholds(overrides)
