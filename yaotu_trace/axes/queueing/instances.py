"""The queueing axis' per-instance measurements: their types (`imbalance.py` measures them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceQueue:
    """One instance's share of the queue and of the seats (None: not measured)."""

    instance: str
    requests: int | None = None
    work_share: float | None = None
    queue_seconds: float | None = None
    queue_share: float | None = None
    queue_share_of_ttft: float | None = None
    waiting_share: float | None = None
    busy_share: float | None = None
    running_mean: float | None = None
    seat_fill: float | None = None
    preemptions: float | None = None
    preemption_share: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadBalance:
    """The per-instance queue and the routing estimate (see the module docstring)."""

    source: str
    instances: tuple[InstanceQueue, ...]
    seat_cap: float | None
    seat_cap_inferred: bool
    queued_instance: str | None
    idle_instance: str | None
    service_rate_tokens_per_s: float | None
    queue_seconds_total: float | None
    modelled_queue_seconds: float | None
    vanish_share_least_loaded: float | None
    vanish_share_even: float | None
    queue_seconds_vanish_least_loaded: float | None
    queue_seconds_vanish_even: float | None
    routed_by: str | None
    basis: str

    def row(self, name: str | None) -> InstanceQueue | None:
        """The instance called `name`."""
        return next((r for r in self.instances if r.instance == name), None)
