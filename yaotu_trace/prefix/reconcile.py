"""Observed against replayed over time: where the engine's own `cached_tokens` fall short of
(or exceed) what the engine's rules give on the same request chain, and the likely reason.

Engine counters are not ground truth either (vLLM counts a request's hits again when it is
retried after an allocation failure; SGLang's after a retraction), so each reason comes with
the numbers it rests on. A shortfall is a stretch of consecutive time windows in which the
observed hits are below the replayed ones by at least `points` of the window's prompt tokens
and by at least `relative` of the replayed hits; `trace check --fail-on observed-shortfall`
gates on it (docs/replay.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOWS = 10  # time windows of equal width over the arrivals
SHORTFALL_POINTS = 0.02  # ≥ 2 percentage points of the window's prompt tokens ...
SHORTFALL_RELATIVE = 0.10  # ... and ≥ 10 % of its replayed hits
SHOWN_REQUESTS = 10
AGREE_SHARE = 0.95  # before a reset, at least this share of requests agree exactly
# Captures whose cached_tokens are the serving engine's own per-request counts: the replay is
# reconciled with them (other traces keep the totals of `observed.py` only).
ENGINE_COUNTED = frozenset({"sglang-log", "sglang-metrics", "dynamo", "litellm", "baseten",
                            "gateway"})


@dataclass(frozen=True, slots=True, kw_only=True)
class HitWindow:
    """Observed and replayed hits of the requests arriving in [start_s, end_s)."""

    start_s: float
    end_s: float
    requests: int
    prompt_tokens: int
    observed_hit_tokens: int
    replayed_hit_tokens: int

    @property
    def gap_points(self) -> float:
        """(replayed − observed) / prompt tokens: how far the engine fell short, in ratio."""
        return ((self.replayed_hit_tokens - self.observed_hit_tokens) / self.prompt_tokens
                if self.prompt_tokens else 0.0)

    @property
    def gap_relative(self) -> float:
        """(replayed − observed) / replayed."""
        return ((self.replayed_hit_tokens - self.observed_hit_tokens) / self.replayed_hit_tokens
                if self.replayed_hit_tokens else 0.0)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"start_s": self.start_s, "end_s": self.end_s, "requests": self.requests,
                "prompt_tokens": self.prompt_tokens,
                "observed_hit_tokens": self.observed_hit_tokens,
                "replayed_hit_tokens": self.replayed_hit_tokens,
                "gap_points": self.gap_points, "gap_relative": self.gap_relative}


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestGap:
    """One request whose observed hits differ from the replay's."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    observed_hit_tokens: int
    replayed_hit_tokens: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"request_id": self.request_id, "arrival_s": self.arrival_s,
                "prompt_tokens": self.prompt_tokens,
                "observed_hit_tokens": self.observed_hit_tokens,
                "replayed_hit_tokens": self.replayed_hit_tokens}


@dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    """A likely cause of the difference and the numbers it rests on."""

    cause: str  # capacity, routing, tenant-salt, reset, counting
    text: str
    basis: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"cause": self.cause, "text": self.text, "basis": self.basis}


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconciliation:
    """Observed and replayed hits side by side: per window, per request, the shortfall
    stretch (None when there is none at the margins) and the likely reasons."""

    points: float
    relative: float
    windows: tuple[HitWindow, ...]
    differing_requests: int
    below_tokens: int  # Σ (replayed − observed) where observed is below
    above_tokens: int  # Σ (observed − replayed) where observed is above
    largest: tuple[RequestGap, ...]
    shortfall: HitWindow | None  # the stretch, as one window over its requests
    reasons: tuple[Reason, ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {"margins": {"points": self.points, "relative": self.relative},
                "windows": [w.to_dict() for w in self.windows],
                "differing_requests": self.differing_requests,
                "below_tokens": self.below_tokens, "above_tokens": self.above_tokens,
                "largest_differences": [g.to_dict() for g in self.largest],
                "shortfall": None if self.shortfall is None else self.shortfall.to_dict(),
                "reasons": [r.to_dict() for r in self.reasons]}


def reconcile(arrival_s: np.ndarray, request_id: np.ndarray, cached_tokens: np.ndarray,
              hit_tokens: np.ndarray, prompt_tokens: np.ndarray, *, unlimited: bool,
              instances: int = 1, points: float = SHORTFALL_POINTS,
              relative: float = SHORTFALL_RELATIVE) -> Reconciliation | None:
    """Compare the requests that report `cached_tokens` (NaN: unknown); None when none do.
    `unlimited` says the replay had no capacity limit; `instances` how many serving instances
    the trace names when the replay shared one cache among them."""
    known = ~np.isnan(cached_tokens)
    if not known.any():
        return None
    idx = np.flatnonzero(known)
    t = arrival_s[idx]
    obs = cached_tokens[idx].astype(np.int64)
    rep = hit_tokens[idx].astype(np.int64)
    prompt = prompt_tokens[idx].astype(np.int64)
    windows = _windows(t, obs, rep, prompt)
    diff = obs - rep
    order = np.argsort(-np.abs(diff), kind="stable")[:SHOWN_REQUESTS]
    largest = tuple(RequestGap(request_id=str(request_id[idx[k]]), arrival_s=float(t[k]),
                               prompt_tokens=int(prompt[k]), observed_hit_tokens=int(obs[k]),
                               replayed_hit_tokens=int(rep[k]))
                    for k in order if diff[k] != 0)
    shortfall = _shortfall(windows, points, relative, t, obs, rep, prompt)
    return Reconciliation(
        points=points, relative=relative, windows=windows,
        differing_requests=int(np.count_nonzero(diff)),
        below_tokens=int(-diff[diff < 0].sum()), above_tokens=int(diff[diff > 0].sum()),
        largest=largest, shortfall=shortfall,
        reasons=_reasons(t, obs, rep, request_id[idx], unlimited, instances))


def _windows(t: np.ndarray, obs: np.ndarray, rep: np.ndarray, prompt: np.ndarray
             ) -> tuple[HitWindow, ...]:
    lo, hi = float(t.min()), float(t.max())
    width = (hi - lo) / WINDOWS if hi > lo else 1.0
    which = np.minimum(((t - lo) // width).astype(np.int64), WINDOWS - 1)
    out = []
    for k in range(WINDOWS if hi > lo else 1):
        m = which == k
        out.append(HitWindow(start_s=lo + k * width, end_s=lo + (k + 1) * width,
                             requests=int(m.sum()), prompt_tokens=int(prompt[m].sum()),
                             observed_hit_tokens=int(obs[m].sum()),
                             replayed_hit_tokens=int(rep[m].sum())))
    return tuple(out)


def _short(w: HitWindow, points: float, relative: float) -> bool:
    return w.requests > 0 and w.gap_points >= points and w.gap_relative >= relative


def _shortfall(windows: tuple[HitWindow, ...], points: float, relative: float, t: np.ndarray,
               obs: np.ndarray, rep: np.ndarray, prompt: np.ndarray) -> HitWindow | None:
    """The longest run of short windows (the earliest of equal runs), as one window."""
    best: tuple[int, int] | None = None
    k = 0
    while k < len(windows):
        if not _short(windows[k], points, relative):
            k += 1
            continue
        end = k
        while end + 1 < len(windows) and (_short(windows[end + 1], points, relative)
                                          or windows[end + 1].requests == 0):
            end += 1
        if best is None or end - k > best[1] - best[0]:
            best = (k, end)
        k = end + 1
    if best is None:
        return None
    start_s, end_s = windows[best[0]].start_s, windows[best[1]].end_s
    m = (t >= start_s) & ((t < end_s) if best[1] < len(windows) - 1 else (t <= end_s))
    return HitWindow(start_s=start_s, end_s=end_s, requests=int(m.sum()),
                     prompt_tokens=int(prompt[m].sum()), observed_hit_tokens=int(obs[m].sum()),
                     replayed_hit_tokens=int(rep[m].sum()))


def _reasons(t: np.ndarray, obs: np.ndarray, rep: np.ndarray, ids: np.ndarray, unlimited: bool,
             instances: int) -> tuple[Reason, ...]:
    out: list[Reason] = []
    below = obs < rep
    if below.any():
        first = int(np.flatnonzero(below)[0])
        before = slice(0, first)
        agree_before = float((obs[before] == rep[before]).mean()) if first else 1.0
        if first >= 2 and agree_before >= AGREE_SHARE:
            out.append(Reason(
                cause="reset",
                text=f"a cache reset or engine restart at {t[first]:.1f} s: from request "
                     f"{ids[first]} on, the engine hit less than its rules give",
                basis=f"before it {int((obs[before] == rep[before]).sum())} of {first} "
                      f"requests agree exactly; from it {int(below[first:].sum())} requests "
                      f"hit {int((rep - obs)[below].sum()):,} tokens fewer"))
        elif unlimited:
            out.append(Reason(
                cause="capacity",
                text="capacity: the replay keeps every block, the engine's pool does not; "
                     "replay with --capacity at the deployment's pool size, and if it "
                     "agrees, the pool is the cause",
                basis=f"{int(below.sum())} requests spread over {t[below].min():.1f}–"
                      f"{t[below].max():.1f} s hit {int((rep - obs)[below].sum()):,} tokens "
                      "fewer than the unlimited replay"))
        if instances > 1:
            out.append(Reason(
                cause="routing",
                text=f"routing: the trace names {instances} instances, each with its own "
                     "cache, and the replay shares one; replay with --scope instance",
                basis=f"{int(below.sum())} requests below the shared-cache replay"))
    above = obs > rep
    if above.any():
        out.append(Reason(
            cause="counting",
            text="counting: the engine reports more hits than its rules give (vLLM counts "
                 "hits again for a request retried after an allocation failure, SGLang after "
                 "a retraction; or the cache was warm before the trace began, or tenants "
                 "were not salted apart)",
            basis=f"{int(above.sum())} requests above the replay by "
                  f"{int((obs - rep)[above].sum()):,} tokens"))
    return tuple(out)
