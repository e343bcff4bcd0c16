"""Prefix replay: exact prefix-cache hits of a trace under explicit rules (replay-spec.md).

`replay_trace(trace, rules)` (in `prefix.trace`) is the public entry point. The package itself
imports nothing heavy: its names are loaded on first use, so that `yaotu_trace.prefix.rules`
(the choices of `--preset`, `--scope`, ...) costs no numba.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

# Every name the package offers → the module that defines it.
__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "HIT_SHARE_BUCKETS": "trace",
    "PRESETS": "rules",
    "SERIAL": "partition",
    "STEPS": "waterfall",
    "BlockChains": "kernels.chains",
    "GroupStats": "trace",
    "HitLengthDistribution": "trace",
    "HotPrefix": "hot",
    "ObservedComparison": "observed",
    "Parallelism": "partition",
    "PreparedTrace": "prepare",
    "Preset": "rules",
    "ReplayResult": "kernels.result",
    "ReplayRules": "rules",
    "ReplaySummary": "trace",
    "RequestTable": "trace",
    "Waterfall": "waterfall",
    "WaterfallStep": "waterfall",
    "build_block_chains": "kernels.blocks",
    "cache_replays": "waterfall",
    "compare_observed": "observed",
    "compute_waterfall": "waterfall",
    "effective_rules": "rules",
    "hot_prefixes": "hot",
    "open_runner": "partition",
    "replay": "kernels.engine",
    "replay_trace": "trace",
    "replay_trace_with_requests": "trace",
    "rules_for": "rules",
})

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.prefix.hot import HotPrefix, hot_prefixes
    from yaotu_trace.prefix.kernels.blocks import build_block_chains
    from yaotu_trace.prefix.kernels.chains import BlockChains
    from yaotu_trace.prefix.kernels.engine import replay
    from yaotu_trace.prefix.kernels.result import ReplayResult
    from yaotu_trace.prefix.observed import ObservedComparison, compare_observed
    from yaotu_trace.prefix.partition import SERIAL, Parallelism, open_runner
    from yaotu_trace.prefix.prepare import PreparedTrace
    from yaotu_trace.prefix.rules import PRESETS, Preset, ReplayRules, effective_rules, rules_for
    from yaotu_trace.prefix.trace import (
        HIT_SHARE_BUCKETS,
        GroupStats,
        HitLengthDistribution,
        ReplaySummary,
        RequestTable,
        replay_trace,
        replay_trace_with_requests,
    )
    from yaotu_trace.prefix.waterfall import (
        STEPS,
        Waterfall,
        WaterfallStep,
        cache_replays,
        compute_waterfall,
    )
