"""The replay rules: one frozen value that says how a prefix cache is modelled (spec §2–§5).

`ReplayRules` is validated on construction (a bad combination is a `ConfigError` with a
one-line message); `PRESETS` holds the engine presets of spec §5 and `rules_for` applies
explicit overrides on top of one, and `effective_rules` the choice a run makes for a trace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.data.schema import Trace


class TouchOrder(StrEnum):
    """Order in which a request touches its blocks after the lookup (spec §4)."""

    TAIL_FIRST = "tail-first"  # last block first, so block 1 is the most recently used
    HEAD_FIRST = "head-first"  # block 1 first: a flat LRU (the Mooncake FAST'25 figure)


class Eviction(StrEnum):
    """Which block leaves a full cache."""

    LRU = "lru"
    FIFO = "fifo"
    LFU = "lfu"  # ties broken by recency (least recently used of the least frequent)
    OPTIMAL = "optimal"  # Belady: the farthest next use goes first (offline, an upper bound)


class Scope(StrEnum):
    """One shared cache, or one cache per serving instance."""

    GLOBAL = "global"
    INSTANCE = "instance"


class Route(StrEnum):
    """How requests are assigned to instances when the trace does not say."""

    ROUND_ROBIN = "round-robin"
    RANDOM = "random"
    LEAST_LOADED = "least-loaded"
    PREFIX_AFFINITY = "prefix-affinity"


class Accounting(StrEnum):
    """Whose bookkeeping a finite cache follows (spec §5, engine-exact accounting).

    `clean` is the spec's model (one list of cached full blocks), the one the waterfall and the
    one-pass curve explain. `vllm` and `sglang` reproduce their engine's pool request by request.
    At unlimited capacity all three give the same hits.
    """

    CLEAN = "clean"
    VLLM = "vllm"  # block pool: null block, partial blocks from the free queue, duplicate copies
    SGLANG = "sglang"  # radix tree: whole-leaf eviction, a split node's remainder refreshed


class Preset(StrEnum):
    """Engine presets of spec §5."""

    VLLM = "vllm"
    SGLANG = "sglang"
    LMCACHE = "lmcache"
    MOONCAKE = "mooncake"
    NONE = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRules:
    """Everything that decides a replay's hits; the report prints it as the effective rules.

    `capacity_blocks=None` means unlimited. `tenant_isolation` only has an effect when the
    trace carries a tenant column. `route=None` with `scope=instance` takes the instance from
    the trace's `instance` column (round-robin over `instances` when the trace has none).
    `affinity_threshold` is the share of the prompt the best instance must already hold for
    `prefix-affinity` to follow it (sgl-router's `cache_threshold`, 0.3 in its CLI).
    `capacity_per_tenant` gives every tenant its own cache of `capacity_blocks` (per instance
    with scope instance) instead of one cache the tenants compete for; it needs tenant
    isolation, and its caches are independent, so the replay partitions (`partition.py`).
    """

    block_size_tokens: int = 16
    last_token_rule: bool = True
    tenant_isolation: bool = True
    touch_order: TouchOrder = TouchOrder.TAIL_FIRST
    cache_partial_blocks: bool = False
    cache_outputs: bool = False
    capacity_blocks: int | None = None
    eviction: Eviction = Eviction.LRU
    scope: Scope = Scope.GLOBAL
    route: Route | None = None
    instances: int = 1
    seed: int = 0
    affinity_threshold: float = 0.3
    capacity_per_tenant: bool = False
    accounting: Accounting = Accounting.CLEAN

    def __post_init__(self) -> None:
        for name, enum in (("touch_order", TouchOrder), ("eviction", Eviction), ("scope", Scope),
                           ("accounting", Accounting)):
            object.__setattr__(self, name, _choice(name, getattr(self, name), enum))
        if self.route is not None:
            object.__setattr__(self, "route", _choice("route", self.route, Route))
        if isinstance(self.block_size_tokens, bool) or not isinstance(self.block_size_tokens, int):
            raise ConfigError(f"block size {self.block_size_tokens!r} is not a whole number of "
                              "tokens; pass e.g. --block-size 16")
        if self.block_size_tokens < 1:
            raise ConfigError(f"block size {self.block_size_tokens} must be at least 1 token")
        if self.capacity_blocks is not None and (
            isinstance(self.capacity_blocks, bool)
            or not isinstance(self.capacity_blocks, int)
            or self.capacity_blocks < 1
        ):
            raise ConfigError(f"capacity {self.capacity_blocks!r} must be at least 1 block "
                              "(omit --capacity for an unlimited cache)")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or (
            self.instances < 1
        ):
            raise ConfigError(f"instances {self.instances!r} must be a whole number >= 1")
        if self.route is not None and self.scope is Scope.GLOBAL:
            raise ConfigError(f"--route {self.route} assigns requests to per-instance caches; "
                              "add --scope instance")
        if self.capacity_per_tenant and not self.tenant_isolation:
            raise ConfigError("--capacity-per-tenant gives each tenant its own cache, which "
                              "only makes sense with --tenant-isolation; add it")
        if self.eviction is Eviction.OPTIMAL and self.route is Route.PREFIX_AFFINITY:
            raise ConfigError("--eviction optimal needs every cache's future requests, but "
                              "prefix-affinity routes by what the caches hold; use another "
                              "--route (or the trace's instance column)")
        if not 0.0 <= float(self.affinity_threshold) <= 1.0:
            raise ConfigError(f"affinity threshold {self.affinity_threshold} must be in [0, 1]")
        clash = self.exact_accounting_clash()
        if clash:
            raise ConfigError(f"--accounting {self.accounting} replays {self.accounting}'s own "
                              f"pool, which does not allow {clash}; drop that rule (the "
                              f"{self.accounting} preset has none of them), or use "
                              "--accounting clean for the clean model")

    def exact_accounting_clash(self, accounting: Accounting | None = None) -> str | None:
        """The first rule `accounting` (default: the rules' own) cannot honour, or None."""
        if (accounting or self.accounting) is Accounting.CLEAN:
            return None
        checks = (
            (not self.last_token_rule, "turning the last-token rule off (--no-last-token-rule)"),
            (self.touch_order is not TouchOrder.TAIL_FIRST,
             f"a {self.touch_order} touch order (--touch-order)"),
            (self.cache_partial_blocks, "caching partial blocks (--cache-partial-blocks)"),
            (self.cache_outputs, "caching outputs (--cache-outputs)"),
            (self.eviction is not Eviction.LRU, f"{self.eviction} eviction (--eviction)"),
            # sgl-router's cache-aware policy reads the caches, which the engine pools would
            # have to share with the router's model: routed on the clean caches only.
            (self.route is Route.PREFIX_AFFINITY,
             "prefix-affinity routing (--route prefix-affinity)"),
        )
        return next((flag for bad, flag in checks if bad), None)

    def check_source_block_size(self, source_block_size: int | None) -> None:
        """Block ids cannot be split: B must be a whole number of source blocks S (spec §2)."""
        if source_block_size is None:
            return
        if self.block_size_tokens % source_block_size:
            raise ConfigError(
                f"block size {self.block_size_tokens} is not a multiple of the trace's "
                f"{source_block_size}-token block ids: a block id of {source_block_size} tokens "
                "cannot be split; use --block-size "
                f"{_round_up(self.block_size_tokens, source_block_size)} (or another multiple)"
            )

    @property
    def unlimited(self) -> bool:
        """Whether the cache never evicts."""
        return self.capacity_blocks is None

    def with_(self, **changes: Any) -> ReplayRules:
        """A copy with some rules changed (validated again); a change the engine-exact
        accounting cannot honour makes the copy clean (see `rules_for`)."""
        return _changed(self, changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready builtins: enums as their CLI spelling."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, StrEnum):
                out[key] = str(value)
        return out


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _choice(name: str, value: object, enum: type[StrEnum]) -> StrEnum:
    if isinstance(value, enum):
        return value
    try:
        return enum(str(value))
    except ValueError:
        choices = ", ".join(m.value for m in enum)
        raise ConfigError(f"{name.replace('_', ' ')} {value!r} is not one of: {choices}") from None


PRESETS: Final[dict[Preset, ReplayRules]] = {
    Preset.VLLM: ReplayRules(block_size_tokens=16, last_token_rule=True, tenant_isolation=True,
                             touch_order=TouchOrder.TAIL_FIRST, cache_partial_blocks=False,
                             accounting=Accounting.VLLM),
    Preset.SGLANG: ReplayRules(block_size_tokens=1, last_token_rule=True, tenant_isolation=True,
                               touch_order=TouchOrder.TAIL_FIRST, cache_partial_blocks=False,
                               accounting=Accounting.SGLANG),
    Preset.LMCACHE: ReplayRules(block_size_tokens=256, last_token_rule=True,
                                tenant_isolation=True, touch_order=TouchOrder.TAIL_FIRST,
                                cache_partial_blocks=False),
    Preset.MOONCAKE: ReplayRules(block_size_tokens=512, last_token_rule=False,
                                 tenant_isolation=False, touch_order=TouchOrder.HEAD_FIRST,
                                 cache_partial_blocks=True),
    Preset.NONE: ReplayRules(block_size_tokens=16, last_token_rule=False, tenant_isolation=False,
                             touch_order=TouchOrder.TAIL_FIRST, cache_partial_blocks=False),
}


def rules_for(preset: Preset | str | None = None, **overrides: Any) -> ReplayRules:
    """The rules of `preset` (default vllm) with explicit overrides; `None` overrides are ignored.

    Overrides use the field names of `ReplayRules`; passing `capacity_blocks=None` explicitly
    is the same as not passing it (unlimited is the presets' default anyway). An override that
    the preset's engine-exact accounting cannot honour (`--eviction fifo` under `vllm`, say)
    turns it into the clean model, unless `accounting` is given too (then it is an error).
    """
    key = _choice("preset", preset or Preset.VLLM, Preset)
    base = PRESETS[Preset(key)]
    known = set(base.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown replay rule(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    return _changed(base, {k: v for k, v in overrides.items() if v is not None})


def _changed(base: ReplayRules, changes: dict[str, Any]) -> ReplayRules:
    if "accounting" not in changes and base.accounting is not Accounting.CLEAN:
        trial = replace(base, **changes, accounting=Accounting.CLEAN)
        return trial if trial.exact_accounting_clash(base.accounting) else replace(base, **changes)
    return replace(base, **changes)


# Formats whose source names the engine's own rules: Mooncake's publishers, SGLang's captures.
FORMAT_PRESETS: Final[dict[str, str]] = {"mooncake": "mooncake", "sglang-log": "sglang",
                                         "sglang-metrics": "sglang"}


def effective_rules(
    trace: Trace, preset: Preset | str | None = None, **overrides: Any
) -> tuple[ReplayRules, str, tuple[str, ...]]:
    """The rules a run uses on `trace`: (rules, preset name, notes about the choice).

    Without an explicit preset, Mooncake-format traces use the `mooncake` preset (the
    publishers' own rules), SGLang's request logs and exports `sglang` (the engine that wrote
    their cached tokens) and other traces `vllm`. Without an explicit block size, a preset
    block size that would split the trace's block ids is rounded up to a multiple of them.
    """
    notes: list[str] = []
    source = trace.source_block_size if trace.content_column == "prompt_block_ids" else None
    name = str(preset) if preset else FORMAT_PRESETS.get(trace.format_name, "vllm")
    rules = rules_for(name, **overrides)
    if (source and overrides.get("block_size_tokens") is None
            and rules.block_size_tokens % source):
        rounded = -(-rules.block_size_tokens // source) * source
        notes.append(f"block size {rules.block_size_tokens} cannot split the trace's "
                     f"{source}-token block ids; using {rounded}")
        rules = rules.with_(block_size_tokens=rounded)
    rules.check_source_block_size(source)
    return rules, name, tuple(notes)
