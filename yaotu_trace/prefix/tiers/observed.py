"""Observed per-tier hits (the engine's telemetry) held against the tiered replay.

The engines count cache hits by the tier that supplied them: vLLM 0.33's
`vllm:prompt_tokens_cached_by_source{source=device|host|disk|p2p|external_unspecified}`
(`vllm/v1/metrics/loggers.py`, `cache_hit_source.py`), SGLang's
`sglang:cached_tokens_total{cache_source=device|host|storage}` (`srt/observability/
metrics_collector.py`), LMCache's per-request "LMCache hit tokens: H, need to load: L" line
(`integration/vllm/vllm_v1_adapter.py`), and vLLM's older split `prompt_tokens_by_source
{source=local_cache_hit|external_kv_transfer}`. Each label names a tier of the replay
(`TIER_OF`) or the tiers below the GPU together (`BELOW_GPU`); a label the replay has no tier
for (`UNCOMPARED`) and a label none of the engines writes are counted and named, never
dropped.

The telemetry gives totals, not requests, so a tier is compared by its share of the prompt
tokens each side counts, with the tolerance the request-level reconciliation uses
(`prefix/reconcile.py`): a tier disagrees when the shares differ by at least `points` of the
prompt tokens and by at least `relative` of the replayed share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from yaotu_trace.data.engine_facts import TierSources
from yaotu_trace.prefix.reconcile import SHORTFALL_POINTS, SHORTFALL_RELATIVE

GPU: Final = "gpu"
# Engine label → the replay's tier it counts. SGLang's `storage` is its L3 backend: the
# replay's disk tier, or its remote one when it has no disk (`storage_tier`).
TIER_OF: Final = {
    "device": GPU, "local_cache_hit": GPU, "engine": GPU,
    "host": "cpu",
    "disk": "disk",
    "storage": "storage",
}
# Labels that count every tier below the GPU together (a connector's loads).
BELOW_GPU: Final = frozenset({"external_kv_transfer", "lmcache"})
# Labels the engines write that no replayed tier stands for, and why.
UNCOMPARED: Final = {
    "p2p": "KV from another vLLM instance: not a tier of this replay",
    "external_unspecified": "a connector that does not say its tier (vLLM counts it so)",
    "total": "SGLang without a hierarchical cache does not split its hits by tier",
}
AGREES: Final = "agrees"
BELOW: Final = "observed below replayed"
ABOVE: Final = "observed above replayed"


@dataclass(frozen=True, slots=True, kw_only=True)
class TierAgreement:
    """One tier: what the engine says it served beside what the replay says, as shares of the
    prompt tokens each counts, and whether they agree within the tolerance."""

    name: str  # the tier: gpu, cpu, disk, remote, or `cpu+disk` for several together
    engine_labels: tuple[str, ...]
    observed_hit_tokens: float
    replayed_hit_tokens: int
    observed_share: float | None
    replayed_share: float | None
    gap_points: float | None  # observed − replayed share
    gap_relative: float | None  # that gap over the replayed share (None when it is 0)
    verdict: str | None  # None when a share is unknown

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        d["engine_labels"] = list(self.engine_labels)
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class TierObservation:
    """The engine's per-tier hits against the replay's, and the labels left uncompared."""

    source: str
    observed_prompt_tokens: float | None
    replayed_prompt_tokens: int
    points: float
    relative: float
    tiers: tuple[TierAgreement, ...]
    uncompared: dict[str, float]  # label → tokens, with `UNCOMPARED`'s reason in notes
    unknown: dict[str, float]  # labels no engine is known to write → tokens
    notes: tuple[str, ...]

    @property
    def disagreeing(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tiers if t.verdict not in (AGREES, None))

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "observed_prompt_tokens": self.observed_prompt_tokens,
                "replayed_prompt_tokens": self.replayed_prompt_tokens,
                "points": self.points, "relative": self.relative,
                "tiers": [t.to_dict() for t in self.tiers],
                "disagreeing": list(self.disagreeing),
                "uncompared_sources": self.uncompared, "unknown_sources": self.unknown,
                "notes": list(self.notes)}


def storage_tier(replayed: tuple[str, ...]) -> str:
    """The replay's tier SGLang's `storage` stands for: disk, else remote, else disk."""
    return next((t for t in ("disk", "remote") if t in replayed), "disk")


def compare_tiers(found: TierSources, tiers: dict[str, Any], *,
                  points: float = SHORTFALL_POINTS,
                  relative: float = SHORTFALL_RELATIVE) -> TierObservation:
    """Hold `found` (the engine's hits by tier) against `tiers` (the replay's `tiers`
    section: `prompt_tokens`, `gpu_hit_tokens`, and a `tiers` list of `name`, `hit_tokens`)."""
    names = tuple(str(t["name"]) for t in tiers["tiers"])
    replayed: dict[str, int] = {GPU: int(tiers["gpu_hit_tokens"])}
    replayed.update({str(t["name"]): int(t["hit_tokens"]) for t in tiers["tiers"]})
    observed: dict[str, float] = {}
    labels: dict[str, list[str]] = {}
    uncompared: dict[str, float] = {}
    unknown: dict[str, float] = {}
    below = "+".join(names)
    for label, tokens in sorted(found.tokens.items()):
        key = label.removeprefix("cache_")
        if key in TIER_OF:
            tier = TIER_OF[key]
            tier = storage_tier(names) if tier == "storage" else tier
        elif key in BELOW_GPU:
            tier = below
        elif key in UNCOMPARED:
            uncompared[label] = tokens
            continue
        else:
            unknown[label] = tokens
            continue
        observed[tier] = observed.get(tier, 0.0) + tokens
        labels.setdefault(tier, []).append(label)
    if below in observed and len(names) > 1:
        replayed[below] = sum(replayed[n] for n in names)
    notes: list[str] = []
    prompt = int(tiers["prompt_tokens"])
    basis = found.prompt_tokens
    if basis is None:
        notes.append(f"{found.source} comes without the prompt tokens it counted: the observed "
                     f"shares are of the replay's {prompt:,} prompt tokens, as if the telemetry "
                     "covered the trace's traffic exactly")
        basis = float(prompt)
    rows: list[TierAgreement] = []
    order = [GPU, *names, *([below] if below in observed and len(names) > 1 else [])]
    for tier in order:
        if tier not in observed and tier != GPU and tier not in replayed:
            continue
        obs = observed.get(tier)
        rows.append(_agreement(tier, tuple(labels.get(tier, ())), obs, replayed.get(tier, 0),
                               basis, prompt, points, relative))
    extra = sorted(t for t in set(observed) - set(order) if observed[t] > 0)
    for tier in extra:  # the engine served from a tier the replay does not have
        rows.append(_agreement(tier, tuple(labels[tier]), observed[tier], 0, basis, prompt,
                               points, relative))
        notes.append(f"the engine served {observed[tier]:,.0f} tokens from {tier}, a tier "
                     "this replay does not have (add --tier to replay it)")
    for label, tokens in sorted(uncompared.items()):
        notes.append(f"{label} ({tokens:,.0f} tokens) is not compared: "
                     f"{UNCOMPARED[label.removeprefix('cache_')]}")
    if unknown:
        shown = ", ".join(f"{label} ({tokens:,.0f} tokens)" for label, tokens in unknown.items())
        notes.append(f"{len(unknown)} source label(s) of {found.source} that no engine is known "
                     f"to write, not compared: {shown}")
    return TierObservation(source=found.source, observed_prompt_tokens=found.prompt_tokens,
                           replayed_prompt_tokens=prompt, points=points, relative=relative,
                           tiers=tuple(rows), uncompared=uncompared, unknown=unknown,
                           notes=tuple(notes))


def _agreement(tier: str, labels: tuple[str, ...], obs: float | None, rep: int, basis: float,
               prompt: int, points: float, relative: float) -> TierAgreement:
    obs_share = None if obs is None or basis <= 0 else obs / basis
    rep_share = rep / prompt if prompt else None
    gap = None if obs_share is None or rep_share is None else obs_share - rep_share
    rel = None if gap is None or not rep_share else gap / rep_share
    verdict = None
    if gap is not None:
        beyond = abs(gap) >= points and (rel is None or abs(rel) >= relative)
        verdict = AGREES if not beyond else (BELOW if gap < 0 else ABOVE)
    return TierAgreement(name=tier, engine_labels=labels,
                         observed_hit_tokens=0.0 if obs is None else float(obs),
                         replayed_hit_tokens=rep, observed_share=obs_share,
                         replayed_share=rep_share, gap_points=gap, gap_relative=rel,
                         verdict=verdict)
