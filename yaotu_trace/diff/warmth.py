"""Whether a run started with a warm prefix cache: the replay's observed-versus-replayed check.

A replay starts cold. When the engine's own `cached_tokens` on the first tenth of the requests
beat the replay's hits by more than 5 % of their prompt tokens, the engine's cache was warm
when the run began (`prefix.observed`, as `trace replay` reports it). A run that starts warm
looks faster on its first requests for a reason no change made.
"""

from __future__ import annotations

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.data.run_diff import Condition, ConditionStatus
from yaotu_trace.data.schema import Trace


def warm_start(trace: Trace, settings: EngineSettings) -> tuple[bool | None, str]:
    """(warm, how it was judged); warm is None when the run cannot say."""
    if not trace.has("cached_tokens"):
        return None, "no cached_tokens column"
    if trace.content_column is None:
        return None, "cached_tokens without prompt content to replay"
    from yaotu_trace.prefix.trace import replay_trace

    rules, _, _ = settings.replay_rules(trace)
    observed = replay_trace(trace, rules, waterfall=False).observed
    if observed is None:
        return None, "no request reports cached_tokens"
    return observed.warm_start, (f"early excess {observed.early_excess_tokens:,} tokens "
                                 "(observed minus replayed hits)")


def warmth_condition(before: Trace, after: Trace, settings: EngineSettings) -> Condition:
    """`same` when both runs started cold, `differs` when one started warm."""
    warm_b, how_b = warm_start(before, settings)
    warm_a, how_a = warm_start(after, settings)
    detail = ("observed cached_tokens against a cold replay on the first 10 % of requests "
              f"(warm when they beat it by > 5 % of the prompt tokens): before {how_b}; "
              f"after {how_a}")
    side_b = None if warm_b is None else ("warm" if warm_b else "cold")
    side_a = None if warm_a is None else ("warm" if warm_a else "cold")
    status: ConditionStatus
    if warm_b is None or warm_a is None:
        status = "unknown"
    elif warm_b != warm_a:
        status = "differs"
    else:
        status = "same" if not warm_b else "unknown"
        if warm_b:
            detail += "; both started warm, by amounts this check does not compare"
    return Condition(name="cache_warmth", status=status, before=side_b, after=side_a,
                     detail=detail)
