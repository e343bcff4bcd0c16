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

from yaotu_trace.data.observed_hits import HitWindow, Reason, Reconciliation, RequestGap

WINDOWS = 10  # time windows of equal width over the arrivals
SHORTFALL_POINTS = 0.02  # ≥ 2 percentage points of the window's prompt tokens ...
SHORTFALL_RELATIVE = 0.10  # ... and ≥ 10 % of its replayed hits
SHOWN_REQUESTS = 10
AGREE_SHARE = 0.95  # before a reset, at least this share of requests agree exactly
# Another replay agrees with the engine when it leaves no shortfall stretch at the margins and
# removes at least this share of the token difference the replay under the rules leaves.
EXPLAINED_SHARE = 0.5
# Captures whose cached_tokens are the serving engine's own per-request counts: the replay is
# reconciled with them (other traces keep the totals of `observed.py` only).
ENGINE_COUNTED = frozenset({"sglang-log", "sglang-metrics", "dynamo", "litellm", "baseten",
                            "gateway", "vllm-vcr"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """The hits of another replay of the same requests, one condition changed: the cause it
    tests (capacity, tenant-salt, routing), what it is (`the replay at 2,048 blocks
    (--kv-capacity)`) and its per-request hit tokens."""

    cause: str
    label: str
    hit_tokens: np.ndarray


@dataclass(frozen=True, slots=True)
class _Counts:
    """The requests that report cached tokens, as arrays in arrival order."""

    t: np.ndarray
    obs: np.ndarray
    rep: np.ndarray
    prompt: np.ndarray
    ids: np.ndarray


def reconcile(arrival_s: np.ndarray, request_id: np.ndarray, cached_tokens: np.ndarray,
              hit_tokens: np.ndarray, prompt_tokens: np.ndarray, *,
              capacity_blocks: int | None = None, instances: int = 1,
              alternatives: tuple[Alternative, ...] = (), points: float = SHORTFALL_POINTS,
              relative: float = SHORTFALL_RELATIVE) -> Reconciliation | None:
    """Compare the requests that report `cached_tokens` (NaN: unknown); None when none do.
    `capacity_blocks` is the replay's cache (None: unlimited); `instances` how many serving
    instances the trace names when the replay shared one cache among them; `alternatives`
    the other replays that test a cause each."""
    known = ~np.isnan(cached_tokens)
    if not known.any():
        return None
    idx = np.flatnonzero(known)
    c = _Counts(t=arrival_s[idx], obs=cached_tokens[idx].astype(np.int64),
                rep=hit_tokens[idx].astype(np.int64), prompt=prompt_tokens[idx].astype(np.int64),
                ids=request_id[idx])
    windows = _windows(c.t, c.obs, c.rep, c.prompt)
    diff = c.obs - c.rep
    order = np.argsort(-np.abs(diff), kind="stable")[:SHOWN_REQUESTS]
    largest = tuple(RequestGap(request_id=str(c.ids[k]), arrival_s=float(c.t[k]),
                               prompt_tokens=int(c.prompt[k]), observed_hit_tokens=int(c.obs[k]),
                               replayed_hit_tokens=int(c.rep[k]))
                    for k in order if diff[k] != 0)
    shortfall = _shortfall(windows, points, relative, c.t, c.obs, c.rep, c.prompt)
    # A tenant or routing replay that hits the same as the rules' own says nothing about
    # this trace (its tenants or instances share no prefix); the pool's does: it did not bind.
    shown = (_known_only(alt, idx) for alt in alternatives)
    tested = tuple(_tested(c, shortfall, alt, points, relative) for alt in shown
                   if alt.cause == "capacity" or not np.array_equal(alt.hit_tokens, c.rep))
    return Reconciliation(
        points=points, relative=relative, windows=windows,
        differing_requests=int(np.count_nonzero(diff)),
        below_tokens=int(-diff[diff < 0].sum()), above_tokens=int(diff[diff > 0].sum()),
        largest_differences=largest, shortfall=shortfall,
        reasons=_reasons(c, capacity_blocks, instances, tested,
                         frozenset(alt.cause for alt in alternatives)))


def _known_only(alt: Alternative, idx: np.ndarray) -> Alternative:
    """`alt` over the requests that report cached tokens only."""
    return Alternative(cause=alt.cause, label=alt.label,
                       hit_tokens=alt.hit_tokens[idx].astype(np.int64))


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


def _in(stretch: HitWindow, t: np.ndarray) -> np.ndarray:
    return (t >= stretch.start_s) & (t <= stretch.end_s)


def _tested(c: _Counts, shortfall: HitWindow | None, alt: Alternative, points: float,
            relative: float) -> Reason:
    """Whether `alt` agrees with the engine's counts where the rules' replay does not: it
    leaves no shortfall stretch and removes most of the token difference."""
    base_gap = int(np.abs(c.obs - c.rep).sum())
    alt_gap = int(np.abs(c.obs - alt.hit_tokens).sum())
    alt_windows = _windows(c.t, c.obs, alt.hit_tokens, c.prompt)
    alt_short = _shortfall(alt_windows, points, relative, c.t, c.obs, alt.hit_tokens, c.prompt)
    agrees = (base_gap > 0 and alt_short is None
              and alt_gap <= (1 - EXPLAINED_SHARE) * base_gap)
    basis = (f"{alt.label} differs from the engine's counts by {alt_gap:,} tokens on "
             f"{int(np.count_nonzero(c.obs != alt.hit_tokens))} requests, the replay under the "
             f"rules by {base_gap:,} tokens on {int(np.count_nonzero(c.obs != c.rep))}")
    if shortfall is not None:
        m = _in(shortfall, c.t)
        basis += (f"; from {shortfall.start_s:.1f} s to {shortfall.end_s:.1f} s the engine hit "
                  f"{int(c.obs[m].sum()):,} tokens, {alt.label} {int(alt.hit_tokens[m].sum()):,}"
                  f", the replay under the rules {int(c.rep[m].sum()):,}")
    what = {"capacity": "the deployment's KV pool evicts what the unlimited replay keeps",
            "tenant-salt": _salt_text(c, alt),
            "routing": "each instance has its own cache, and the replay shared one"}[alt.cause]
    if agrees:
        return Reason(cause=alt.cause, text=f"{alt.cause}: {alt.label} agrees: {what}",
                      basis=basis, tested="agrees")
    return Reason(cause=alt.cause, text=f"not {alt.cause} alone: {alt.label} does not agree "
                  "with the engine either", basis=basis, tested="ruled out")


def _salt_text(c: _Counts, alt: Alternative) -> str:
    """Salting tenants apart gives fewer hits, sharing more: which way `alt` went."""
    if int(alt.hit_tokens.sum()) <= int(c.rep.sum()):
        return ("the engine's hits stop at tenant boundaries (a cache_salt per tenant, or a "
                "cache per tenant), and the replay shared blocks across tenants")
    return ("the engine shares blocks across tenants (no cache_salt), and the replay kept "
            "tenants apart")


def _reasons(c: _Counts, capacity_blocks: int | None, instances: int,
             tested: tuple[Reason, ...], causes: frozenset[str]) -> tuple[Reason, ...]:
    """The causes another replay agrees with, then the causes read from the counts alone (a
    reset first; none that another replay tested, `causes`), and last the causes another
    replay ruled out."""
    t, obs, rep, ids = c.t, c.obs, c.rep, c.ids
    first_reasons: list[Reason] = []
    untested: list[Reason] = []
    below = obs < rep
    if below.any():
        first = int(np.flatnonzero(below)[0])
        before = slice(0, first)
        agree_before = float((obs[before] == rep[before]).mean()) if first else 1.0
        if first >= 2 and agree_before >= AGREE_SHARE:
            first_reasons.append(Reason(
                cause="reset",
                text=f"a cache reset or engine restart at {t[first]:.1f} s: from request "
                     f"{ids[first]} on, the engine hit less than its rules give",
                basis=f"before it {int((obs[before] == rep[before]).sum())} of {first} "
                      f"requests agree exactly; from it {int(below[first:].sum())} requests "
                      f"hit {int((rep - obs)[below].sum()):,} tokens fewer"))
        elif capacity_blocks is None and "capacity" not in causes:
            untested.append(Reason(
                cause="capacity",
                text="capacity: the replay keeps every block, the engine's pool does not; "
                     "give the pool size (--kv-capacity, or --metrics with the engine's "
                     "pool) and the replay at it is compared too",
                basis=f"{int(below.sum())} requests spread over {t[below].min():.1f}–"
                      f"{t[below].max():.1f} s hit {int((rep - obs)[below].sum()):,} tokens "
                      "fewer than the unlimited replay"))
        if instances > 1 and "routing" not in causes:
            untested.append(Reason(
                cause="routing",
                text=f"routing: the trace names {instances} instances, each with its own "
                     "cache, and the replay shares one; replay with --scope instance",
                basis=f"{int(below.sum())} requests below the shared-cache replay"))
    above = obs > rep
    if above.any():
        untested.append(Reason(
            cause="counting",
            text="counting: the engine reports more hits than its rules give (vLLM counts "
                 "hits again for a request retried after an allocation failure, SGLang after "
                 "a retraction; or the cache was warm before the trace began)",
            basis=f"{int(above.sum())} requests above the replay by "
                  f"{int((obs - rep)[above].sum()):,} tokens"))
    agreeing = [r for r in tested if r.tested == "agrees"]
    ruled_out = [r for r in tested if r.tested != "agrees"]
    if not below.any() and not above.any():
        return ()
    return (*agreeing, *first_reasons, *untested, *ruled_out)
