"""The workload profile section of `trace analyze`: arrivals, lengths, population and observed
timing, as frozen values (computed by `profile/workload.py`, whose docstring defines each
number)."""

from __future__ import annotations

from dataclasses import dataclass

from yaotu_trace.data.report import Distribution


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalProfile:
    """How requests arrive over time."""

    requests: int
    span_s: float
    mean_rate_rps: float | None
    peak_rps: int
    peak_rpm: int
    peak_to_mean: float | None
    interarrival_cv: float | None
    per_second_dispersion: float | None
    median_gap_s: float | None
    longest_gap_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthProfile:
    """Prompt and output lengths in tokens."""

    prompt_len: Distribution
    output_len: Distribution
    prompt_tokens_total: int
    output_tokens_total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Population:
    """Distinct tenants, sessions, instances and models (None when the column is absent).

    `instances` counts every instance a request names (`instance`, `prefill_instance`,
    `decode_instance`); `prefill_instances`/`decode_instances` the two pools of a
    disaggregated trace (None when no request names both)."""

    tenants: int | None
    sessions: int | None
    instances: int | None
    models: int | None
    prefill_instances: int | None = None
    decode_instances: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleBucket:
    """The reported cached tokens of the requests that came after a session idled this long
    (`idle_from_s` ≤ idle < `idle_to_s`, from the session's request before; both None: the
    first request of each session): where a cache's lifetime (a provider's TTL, an engine's
    eviction under other traffic) shows."""

    idle_from_s: float | None
    idle_to_s: float | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cached_share: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingProfile:
    """Observed engine timing, when the trace carries it (each part None when its columns lack)."""

    queue_time_s: Distribution | None
    ttft_s: Distribution | None
    itl_s: Distribution | None
    e2e_s: Distribution | None
    concurrency_mean: float | None
    concurrency_max: int | None
    preempted_requests: int | None
    preemptions_total: int | None
    preempted_request_share: float | None
    cached_tokens_total: int | None
    cached_token_share: float | None
    # Disaggregated traces: TTFT is the client's (`ttft_source` says so) and the inter-token
    # gaps leave out each handed-off request's first gap, the prefill-to-decode hand-off, shown
    # apart (`handoff_s`: KV transfer and the wait for a decode slot).
    ttft_source: str | None = None
    handoff_s: Distribution | None = None
    # Reported cached tokens by how long the request's session had been idle (None without
    # sessions, or when no session has two requests).
    cached_by_idle: tuple[IdleBucket, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """The workload profile section of `trace analyze` (arrivals None: lengths-only table).

    `successful_requests` (None when the trace has no status) of `requests` are the ones the
    lengths and timing describe."""

    requests: int
    successful_requests: int | None
    arrivals: ArrivalProfile | None
    lengths: LengthProfile
    population: Population
    timing: TimingProfile | None
