"""The data behind the workload pictures, as frozen builtins: arrivals and tokens over time,
interarrival times against Poisson, length distributions, tenants and sessions, prefix reuse
over time (computed by `profile/workload_figures.py`, whose docstring defines each number). The
HTML page, the terminal charts and `--format json` show these same numbers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A stretch of the trace clock and the arrivals in it."""

    start_s: float
    end_s: float
    requests: int
    rate_rps: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalSeries:
    """Requests and tokens per second in bins of `bin_s` starting at `t_s` (trace clock)."""

    bin_s: float
    t_s: tuple[float, ...]
    requests_per_s: tuple[float, ...]
    prompt_tokens_per_s: tuple[float, ...]
    output_tokens_per_s: tuple[float, ...]
    mean_rate_rps: float
    peak_rate_rps: float
    busiest: tuple[Window, ...]
    bursts: tuple[Window, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class InterarrivalCdf:
    """The empirical CDF of the positive gaps between arrivals, and Poisson's at the same mean."""

    gap_s: tuple[float, ...]
    share: tuple[float, ...]
    poisson_share: tuple[float, ...]
    mean_gap_s: float
    cv: float | None
    zero_gap_share: float
    ks_distance: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthDistribution:
    """A histogram (log-spaced bins when `log_x`) and the CDF of one length, in tokens."""

    label: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    log_x: bool
    cdf_tokens: tuple[float, ...]
    cdf_share: tuple[float, ...]
    total: int
    p50: float
    p90: float
    p99: float
    overflow: int = 0  # values above the last edge, left off the histogram (not the CDF)


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantShare:
    """One tenant's share of the requests and prompt tokens ("other": the rest summed)."""

    label: str
    requests: int
    prompt_tokens: int
    request_share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionShape:
    """Sessions by depth (turns; the last bar counts `depths[-1]` turns or more) and the
    think time between consecutive turns."""

    sessions: int
    depths: tuple[int, ...]
    sessions_by_depth: tuple[int, ...]
    think_time: LengthDistribution | None
    think_time_from: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReuseOverTime:
    """Prefix-hit tokens over prompt tokens per bin of arrivals, under the replay's preset."""

    bin_s: float
    t_s: tuple[float, ...]
    hit_ratio: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    overall_hit_ratio: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadFigures:
    """Every workload picture; None = not measurable on this trace, why in `unavailable`."""

    arrivals: ArrivalSeries | None
    interarrival: InterarrivalCdf | None
    prompt_len: LengthDistribution | None
    output_len: LengthDistribution | None
    tenants: tuple[TenantShare, ...] | None
    sessions: SessionShape | None
    reuse_over_time: ReuseOverTime | None
    unavailable: dict[str, str]
