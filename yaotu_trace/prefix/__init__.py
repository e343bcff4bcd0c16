"""Prefix replay: exact prefix-cache hits of a trace under explicit rules (replay-spec.md).

`replay_trace(trace, rules)` (in `prefix.trace`) is the public entry point. The package itself
imports nothing heavy: its names are loaded on first use, so that `yaotu_trace.prefix.rules`
(the choices of `--preset`, `--scope`, ...) costs no numba.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers, defined in (or re-exported by) `prefix.trace`.
__all__ = [
    "HIT_SHARE_BUCKETS",
    "PRESETS",
    "SERIAL",
    "STEPS",
    "BlockChains",
    "GroupStats",
    "HitLengthDistribution",
    "HotPrefix",
    "ObservedComparison",
    "Parallelism",
    "PreparedTrace",
    "Preset",
    "ReplayResult",
    "ReplayRules",
    "ReplaySummary",
    "RequestTable",
    "Trace",
    "Waterfall",
    "WaterfallStep",
    "build_block_chains",
    "cache_replays",
    "compare_observed",
    "compute_waterfall",
    "effective_rules",
    "hot_prefixes",
    "open_runner",
    "prepare",
    "replay",
    "replay_trace",
    "replay_trace_with_requests",
    "rules_for",
]

__getattr__, __dir__ = lazy_names(__name__, "trace", __all__)

if TYPE_CHECKING:
    from yaotu_trace.prefix.trace import (
        HIT_SHARE_BUCKETS,
        PRESETS,
        SERIAL,
        STEPS,
        BlockChains,
        GroupStats,
        HitLengthDistribution,
        HotPrefix,
        ObservedComparison,
        Parallelism,
        PreparedTrace,
        Preset,
        ReplayResult,
        ReplayRules,
        ReplaySummary,
        RequestTable,
        Trace,
        Waterfall,
        WaterfallStep,
        build_block_chains,
        cache_replays,
        compare_observed,
        compute_waterfall,
        effective_rules,
        hot_prefixes,
        open_runner,
        prepare,
        replay,
        replay_trace,
        replay_trace_with_requests,
        rules_for,
    )
