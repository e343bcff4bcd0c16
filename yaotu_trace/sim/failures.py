"""Failures injected into a simulated run (`trace simulate --fail-share`), so that failing runs
can be made and diagnosed like any other.

A failing request fails mid-stream: it streams `k` of its output tokens (1 ≤ k < its output
length, drawn uniformly) and then ends with an error, so its status is `error` and its `error`
the text below. The engine sees the same: the request leaves its instance after its k-th token
and frees its KV then, so the step log and the other requests' timing are those of the failing
run, not of a clean one relabelled.

Which requests fail (deterministic, from `seed`):

- spread (default): `share` of the requests, drawn uniformly over the run, whatever their load
  or instance;
- on one instance (`instance`): each request with a draw below `share` fails only if it is
  routed to that instance (its prefill or its decode instance under P/D), so that instance
  loses `share` of its requests and the others none.

Requests with fewer than two output tokens cannot fail mid-stream and are never drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from yaotu_trace.errors import ConfigError

FAILED_STATUS: Final = "error"
FAILED_ERROR: Final = ("the simulated engine aborted the request mid-stream (injected failure, "
                       "--fail-share)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Failures:
    """The failures to inject: `share` of the requests (of `instance`'s when given) fail
    mid-stream, drawn with `seed`."""

    share: float
    instance: str | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FailurePlan:
    """Which requests may fail and after how many tokens: `fail_at` per request (−1: never),
    and the instance code they fail on (−1: any)."""

    fail_at: np.ndarray
    instance: int


def check_fail_share(share: float) -> float:
    """`--fail-share` as a share in [0, 1)."""
    if not (0.0 <= share < 1.0):
        raise ConfigError(f"--fail-share {share!r}: give the share of requests that fail, "
                          "at least 0 and below 1, e.g. 0.12")
    return share


def failure_plan(output_tokens: np.ndarray, failures: Failures,
                 labels: tuple[str, ...]) -> FailurePlan:
    """The draw for `output_tokens` (one per request, in arrival order; `labels` the
    instances): each request that can fail mid-stream fails with probability `share` (exactly
    round(share × n) of them when spread), after a uniform number of tokens below its output
    length."""
    share, instance = check_fail_share(failures.share), failures.instance
    n = len(output_tokens)
    out = np.asarray(output_tokens, dtype=np.int64)
    rng = np.random.default_rng(failures.seed)
    draw = rng.random(n)
    able = out >= 2
    code = -1
    if instance is not None:
        if instance not in labels:
            raise ConfigError(f"--fail-instance {instance!r}: the simulated instances are "
                              f"{', '.join(labels)}; name one of them")
        code = labels.index(instance)
        chosen = able & (draw < share)
    else:
        # exactly round(share × n) of those that can fail: the smallest draws
        count = min(round(share * n), int(able.sum()))
        order = np.argsort(np.where(able, draw, np.inf), kind="stable")
        chosen = np.zeros(n, dtype=bool)
        chosen[order[:count]] = True
    after = 1 + np.floor(rng.random(n) * np.maximum(out - 1, 1)).astype(np.int64)
    fail_at = np.where(chosen, np.minimum(after, out - 1), -1).astype(np.int64)
    return FailurePlan(fail_at=np.ascontiguousarray(fail_at), instance=code)


def failed_requests(plan: FailurePlan, instance: np.ndarray, prefill_instance: np.ndarray,
                    ran: np.ndarray) -> np.ndarray:
    """Per request, whether its injected failure happened: drawn, run, and (tied to one
    instance) routed there."""
    drawn = (plan.fail_at >= 0) & ran
    if plan.instance < 0:
        return drawn
    return drawn & ((instance == plan.instance) | (prefill_instance == plan.instance))
