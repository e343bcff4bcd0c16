"""The success section of `trace analyze`: completed against total requests, by status, group
and window, and the commonest error texts, as frozen values (computed by `profile/success.py`,
whose docstring defines each number)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SuccessCount:
    """Requests and successful requests of one group or window."""

    name: str
    requests: int
    successful: int
    success_rate: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SuccessWindow:
    """The requests that arrived in [start_s, start_s + window_s)."""

    start_s: float
    requests: int
    successful: int
    success_rate: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorText:
    """One error text and how many requests carry it."""

    error: str
    requests: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SuccessProfile:
    """Completed against total requests, and where the failures are.

    `by_status` counts every status value (with `unstated` for a missing one, read as ok);
    `by_tenant` and `by_instance` list at most `profile.success.MAX_GROUPS` groups, most
    failures first, out of `tenants` / `instances` (None when the column is absent); `windows`
    is None for a lengths-only table (no arrival times).
    """

    requests: int
    successful: int
    failed: int
    success_rate: float
    by_status: dict[str, int]
    tenants: int | None
    by_tenant: tuple[SuccessCount, ...]
    instances: int | None
    by_instance: tuple[SuccessCount, ...]
    window_s: float | None
    windows: tuple[SuccessWindow, ...] | None
    error_texts: int
    errors: tuple[ErrorText, ...]
