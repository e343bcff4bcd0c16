"""The replay options: a preset, the rules that override it and the cache's capacity, as
`trace replay` and `trace sweep` take them, in one frozen value.

Each rule override carries the name of the `ReplayRules` field it sets (None keeps the
preset's), so a new rule is one field here and one in `prefix/rules.py`;
`tests/prefix/test_options.py` holds the two lists together. Light on purpose (no NumPy): the
command line builds the value before it loads any analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from yaotu_trace.catalog.models import find_model, model_kv_bytes_per_token
from yaotu_trace.catalog.units import parse_capacity
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.rules import (
    Accounting,
    Eviction,
    Preset,
    ReplayRules,
    Route,
    Scope,
    TouchOrder,
    effective_rules,
    rules_for,
)
from yaotu_trace.prefix.tiers.spec import (
    SGLANG_POLICIES,
    TierSetup,
    parse_tier,
    resolve_tiers,
    tier_policy_for,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import Trace


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """The rules of a prefix replay and the capacity of its caches, as the options give them.

    `preset` names the engine rules (None: mooncake for Mooncake traces, else vllm); every
    rule field after it overrides the preset's when set. `capacity` is per cache, as
    `--capacity` takes it (20000 blocks, 3.2Mtok, 40GiB; None: unlimited); bytes are turned
    into blocks with `kv_bytes_per_token`, else `model`'s (at `kv_dtype`). `warmup` counts the
    hits after that window only (`prefix/window.py`: 50%, 1000req, 600s). `tiers` are the tiers
    below the GPU pool as `--tier NAME=SIZE` gives them, in order (cpu, disk, remote), with
    `tier_chunk_tokens` per chunk (None: the engine's) and `tier_policy`'s rules (None: the
    preset's engine's own; `prefix/tiers/`); `tier_store_threshold` is vLLM's `store_threshold`
    for its CPU tier (None: 0, every offer stored).
    """

    preset: Preset | str | None = None
    block_size_tokens: int | None = None
    last_token_rule: bool | None = None
    tenant_isolation: bool | None = None
    touch_order: TouchOrder | str | None = None
    cache_partial_blocks: bool | None = None
    cache_outputs: bool | None = None
    eviction: Eviction | str | None = None
    scope: Scope | str | None = None
    route: Route | str | None = None
    instances: int | None = None
    seed: int | None = None
    capacity_per_tenant: bool = False
    accounting: Accounting | str | None = None
    capacity: str | None = None
    model: str | None = None
    kv_bytes_per_token: int | None = None
    kv_dtype: str | None = None
    warmup: str | None = None
    # `--residency`: every capacity miss explained, reuse distances, TTL, vLLM's residency
    # histograms (`prefix/residency.py`).
    residency: bool = False
    tiers: tuple[str, ...] = ()
    tier_chunk_tokens: int | None = None
    tier_policy: str | None = None
    tier_store_threshold: int | None = None

    def rule_overrides(self) -> dict[str, Any]:
        """The rules given, by `ReplayRules` field name (a route implies one cache per
        instance); `effective_rules` lays them over the preset."""
        given = {name: getattr(self, name) for name in RULE_FIELDS}
        given["capacity_per_tenant"] = self.capacity_per_tenant or None
        if self.route is not None and self.scope is None:
            given["scope"] = Scope.INSTANCE
        return {name: value for name, value in given.items() if value is not None}

    def effective_rules(self, trace: Trace) -> tuple[ReplayRules, str, tuple[str, ...]]:
        """The rules a replay of `trace` runs under, before the capacity: (rules, preset name,
        notes about the choice)."""
        return effective_rules(trace, self.preset, **self.rule_overrides())

    def capacity_blocks(self, text: str | None, block_size_tokens: int) -> int | None:
        """A capacity (`capacity`, or a `--grid capacity=` value) in whole blocks of
        `block_size_tokens`, bytes at `kv_bytes_per_token`, else `model`'s at `kv_dtype`."""
        return capacity_blocks(text, block_size_tokens, self.model, self.kv_bytes())

    def capacity_unit_note(self, rules: ReplayRules, preset: str,
                           capacities: tuple[str, ...] | None = None,
                           option: str = "--capacity") -> str | None:
        """What a run says when a capacity counts blocks of another size than the preset's
        engine uses: a trace of 512-token block ids runs vLLM's rules in 512-token blocks, so
        an engine's num_gpu_blocks (of 16 tokens) given as is would be 32 times its pool.
        `capacities` are those `option` gave (None: `capacity`, of `--capacity`); the note
        names the ones in blocks. None when none is in blocks, or the block size is the
        preset's or was given."""
        if capacities is None:
            capacities = () if self.capacity is None else (self.capacity,)
        if self.block_size_tokens is not None or preset not in _ENGINE_POOLS:
            return None
        engine_block = rules_for(preset).block_size_tokens
        block = rules.block_size_tokens
        parsed = [(t.strip(), parse_capacity(t.strip())) for t in capacities]
        in_blocks = [text for text, c in parsed if c.unit == "blocks"]
        amounts = [int(c.amount) for _, c in parsed if c.unit == "blocks"]
        if not in_blocks or engine_block == block:
            return None
        first = amounts[0]
        if len(in_blocks) == 1:
            return (f"{option} {in_blocks[0]} counts blocks of {block} tokens, the trace's "
                    f"({first * block:,} tokens); {first:,} of {preset}'s {engine_block}-token "
                    f"{_ENGINE_POOLS[preset]} would be {option} {first * engine_block}tok")
        as_tokens = ",".join(f"{a * engine_block}tok" for a in amounts)
        return (f"{option} {','.join(in_blocks)} count blocks of {block} tokens, the trace's "
                f"({in_blocks[0]} is {first * block:,} tokens); as {preset}'s {engine_block}-token "
                f"{_ENGINE_POOLS[preset]} they would be {option} {as_tokens}")

    def kv_bytes(self) -> int | None:
        """`kv_bytes_per_token`, or `model`'s at `kv_dtype` when a dtype is given (without
        one, a capacity in bytes looks the model up itself); refused when they clash."""
        if self.kv_dtype is None:
            return self.kv_bytes_per_token
        return model_kv_bytes_per_token(self.model, self.kv_dtype, self.kv_bytes_per_token)[1]


    def tier_setup(self, rules: ReplayRules, preset: str) -> TierSetup | None:
        """The tiers in chunks and the policy that runs them, for `rules` under `preset`
        (None without `tiers`); every refusal is one line before any work."""
        if (not self.tiers and self.tier_chunk_tokens is None and self.tier_policy is None
                and self.tier_store_threshold is None):
            return None
        if not self.tiers:
            raise ConfigError("--tier-chunk, --tier-policy and --tier-store-threshold describe "
                              "tiers below the GPU pool; add one with --tier cpu=SIZE")
        policy = tier_policy_for(preset, self.tier_policy)
        per_token = self.kv_bytes()
        if per_token is None and self.model is not None:
            per_token = find_model(self.model).kv_bytes_per_token
        if (policy in SGLANG_POLICIES and rules.accounting is Accounting.SGLANG
                and self.tier_chunk_tokens not in (None, rules.block_size_tokens)):
            page = rules.block_size_tokens
            raise ConfigError(f"--tier-chunk {self.tier_chunk_tokens}: SGLang's HiCache copies "
                              f"whole pages of its GPU pool (--block-size {page}); drop "
                              "--tier-chunk or change --block-size")
        specs = resolve_tiers(tuple(parse_tier(t) for t in self.tiers), policy=policy,
                              block_size_tokens=rules.block_size_tokens,
                              chunk_tokens=self.tier_chunk_tokens, kv_bytes_per_token=per_token,
                              store_threshold=self.tier_store_threshold or 0)
        return TierSetup(tiers=specs, policy=policy, kv_bytes_per_token=per_token)


def check_tier_options(options: ReplayOptions) -> None:
    """What of the tier options can be refused before the trace is read: each `--tier`'s
    grammar, and the policy against an explicit preset."""
    for text in options.tiers:
        parse_tier(text)
    if options.preset is not None:
        tier_policy_for(str(Preset(str(options.preset))), options.tier_policy)
    if options.tier_chunk_tokens is not None and options.tier_chunk_tokens < 1:
        raise ConfigError(f"--tier-chunk {options.tier_chunk_tokens} must be at least 1 token")
    given = (options.tier_chunk_tokens, options.tier_policy, options.tier_store_threshold)
    if any(v is not None for v in given) and not options.tiers:
        raise ConfigError("--tier-chunk, --tier-policy and --tier-store-threshold describe "
                          "tiers below the GPU pool; add one with --tier cpu=SIZE")
    if (options.tier_store_threshold or 0) >= 2 and len(options.tiers) > 1:
        raise ConfigError("vLLM does not take a store_threshold with tiers below the CPU "
                          "(TieringOffloadingSpec refuses it): drop --tier-store-threshold or "
                          "the lower --tier")


# What each engine preset calls its pool's units, for a capacity read in another block size.
_ENGINE_POOLS = {"vllm": "blocks (its num_gpu_blocks)",
                 "sglang": "pages (its max_total_num_tokens at page size 1)"}

# The options that set a `ReplayRules` field of the same name.
RULE_FIELDS = tuple(f.name for f in fields(ReplayOptions)
                    if f.name in ReplayRules.__dataclass_fields__)


def capacity_blocks(text: str | None, block_size_tokens: int, model: str | None,
                    kv_bytes_per_token: int | None) -> int | None:
    """`--capacity` in blocks, tokens or bytes, as whole blocks of the effective block size."""
    if text is None:
        return None
    capacity = parse_capacity(text)
    per_token = kv_bytes_per_token
    if capacity.unit == "bytes" and per_token is None and model is not None:
        per_token = find_model(model).kv_bytes_per_token
    blocks = capacity.to_blocks(block_size_tokens, per_token)
    if blocks is not None and blocks < 1:
        raise ConfigError(f"capacity {text!r} holds less than one {block_size_tokens}-token block; "
                          "give a larger capacity")
    return blocks
