"""Tiers below the GPU pool (CPU memory, disk, a remote store), replayed as vLLM's native
offload, LMCache and SGLang HiCache run them (kv-tiers.md; docs/replay.md, "Tiers below the
GPU").

The API: a `TierSpec` per tier (name, capacity in chunks, chunk tokens), a `TierPolicy` (whose
rules), and `replay_tiers(chains, rules, tiers, policy)` returning a `TieredResult` with
per-request `gpu_hit_tokens`, `tier_hit_tokens` (one array per tier, in order), `hit_tokens`
(their sum) and `recompute_tokens`, each tier's `counters` and `evictions` (`TierEvictions`:
every chunk it evicted, the request whose store evicted it and the one that used it last).
`parse_tier` / `resolve_tiers` turn `--tier cpu=64GiB` into specs; `tier_policy_for` checks a
policy against the preset's engine; `tier_curve` replays every GPU size × tier size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace._lazy import lazy_names

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "PRESET_POLICIES": "spec",
    "TierCounters": "result",
    "TierCurve": "curve",
    "TierEvictions": "result",
    "TierName": "spec",
    "TierPolicy": "spec",
    "TierRequest": "spec",
    "TierSetup": "spec",
    "TierSpec": "spec",
    "TieredResult": "result",
    "default_chunk_tokens": "spec",
    "gpu_replay": "replay",
    "parse_tier": "spec",
    "replay_tiers": "replay",
    "tier_curve": "curve",
    "resolve_tiers": "spec",
    "tier_policy_for": "spec",
})

if TYPE_CHECKING:  # the same names, for mypy
    from yaotu_trace.prefix.tiers.curve import TierCurve, tier_curve
    from yaotu_trace.prefix.tiers.replay import gpu_replay, replay_tiers
    from yaotu_trace.prefix.tiers.result import TierCounters, TieredResult, TierEvictions
    from yaotu_trace.prefix.tiers.spec import (
        PRESET_POLICIES,
        TierName,
        TierPolicy,
        TierRequest,
        TierSetup,
        TierSpec,
        default_chunk_tokens,
        parse_tier,
        resolve_tiers,
        tier_policy_for,
    )
