"""The tiers below the GPU pool as values: their names, the engine rules that run them, and
one `TierSpec` per tier (`--tier NAME=SIZE`, `--tier-chunk`, `--tier-policy`).

Light on purpose (no NumPy): the command line builds these before it loads any analysis.
Sizes in bytes become chunks through the KV bytes per token, as each engine sizes its tier
(vLLM rounds a chunk up to 4 KiB pages, `vllm/v1/kv_offload/cpu/spec.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from yaotu_trace.catalog.units import parse_capacity
from yaotu_trace.errors import ConfigError


class TierName(StrEnum):
    """Where a tier lives: host memory, local storage, or a remote store."""

    CPU = "cpu"
    DISK = "disk"
    REMOTE = "remote"


class TierPolicy(StrEnum):
    """Whose rules move KV between the GPU pool and the tiers below it (kv-tiers.md)."""

    VLLM = "vllm-native"  # OffloadingConnector + CPUOffloadingManager (vLLM 0.33), lru
    VLLM_ARC = "vllm-native-arc"  # the same with `eviction_policy: arc`
    LMCACHE = "lmcache"  # LMCache 0.5 storage manager: every backend written, LRU each
    SGLANG_WRITE_THROUGH = "write_through"  # SGLang HiCache, host copy at hit count 1
    SGLANG_WRITE_THROUGH_SELECTIVE = "write_through_selective"  # host copy at hit count 2
    SGLANG_WRITE_BACK = "write_back"  # host copy when the GPU evicts


VLLM_POLICIES: Final = (TierPolicy.VLLM, TierPolicy.VLLM_ARC)
SGLANG_POLICIES: Final = (TierPolicy.SGLANG_WRITE_THROUGH,
                          TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE, TierPolicy.SGLANG_WRITE_BACK)
# The policies each preset's engine has, its default first. vLLM runs its native offload or
# LMCache (`--kv-offloading-backend native|lmcache`); the engine-neutral presets take any.
PRESET_POLICIES: Final[dict[str, tuple[TierPolicy, ...]]] = {
    "vllm": (TierPolicy.VLLM, TierPolicy.VLLM_ARC, TierPolicy.LMCACHE),
    "lmcache": (TierPolicy.LMCACHE,),
    "sglang": (TierPolicy.SGLANG_WRITE_THROUGH, TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE,
               TierPolicy.SGLANG_WRITE_BACK),
    "mooncake": (TierPolicy.LMCACHE, TierPolicy.VLLM, TierPolicy.VLLM_ARC,
                 TierPolicy.SGLANG_WRITE_THROUGH,
                 TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE, TierPolicy.SGLANG_WRITE_BACK),
    "none": (TierPolicy.LMCACHE, TierPolicy.VLLM, TierPolicy.VLLM_ARC,
             TierPolicy.SGLANG_WRITE_THROUGH, TierPolicy.SGLANG_WRITE_THROUGH_SELECTIVE,
             TierPolicy.SGLANG_WRITE_BACK),
}
LMCACHE_CHUNK_TOKENS: Final = 256  # LMCache's chunk_size default (v1/config.py)
# vLLM's `max_tracker_size` default: the keys whose offers a `store_threshold` counts.
MAX_TRACKED_OFFERS: Final = 64_000
VLLM_PAGE_BYTES: Final = 4096  # a vLLM CPU chunk is rounded up to this (cpu/spec.py)
SGLANG_LOAD_BACK_MIN_TOKENS: Final = 10  # HiCache's load_back_threshold
SGLANG_PREFETCH_MIN_TOKENS: Final = 256  # HiCache's storage prefetch_threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSpec:
    """One tier below the GPU pool: its name, how many chunks it holds, the chunk's tokens.

    `capacity_chunks` is whole chunks of `chunk_tokens` tokens (a multiple of the replay's
    block size); a tier holds at least one. `store_threshold` is vLLM's admission rule for its
    CPU tier (`store_threshold` in `kv_connector_extra_config`): at 2 or more a chunk is stored
    from its that-many-th offer on; 0 or 1 stores every offer. An `unlimited` tier (one below
    the first: vLLM's fs and obj tiers have no size) never fills: the replay gives it room for
    every chunk of the trace (`bounded`).
    """

    name: TierName
    capacity_chunks: int
    chunk_tokens: int
    store_threshold: int = 0
    unlimited: bool = False

    def __post_init__(self) -> None:
        """Refuse a tier that cannot hold one chunk."""
        if self.chunk_tokens < 1:
            raise ConfigError(f"--tier-chunk {self.chunk_tokens} must be at least 1 token")
        if self.capacity_chunks < 1:
            raise ConfigError(f"tier {self.name} holds less than one {self.chunk_tokens}-token "
                              "chunk; give a larger size")

    @property
    def capacity_tokens(self) -> int:
        """The tier's size in tokens."""
        return self.capacity_chunks * self.chunk_tokens

    def bounded(self, blocks_in_trace: int) -> TierSpec:
        """An unlimited tier sized past every block of a trace of `blocks_in_trace` blocks (a
        chunk is one or more blocks, so it never fills and never evicts); a sized tier as it
        is."""
        if not self.unlimited:
            return self
        return replace(self, capacity_chunks=max(1, blocks_in_trace + 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class TierRequest:
    """A tier as `--tier NAME=SIZE` gives it, before the chunk size and the model are known."""

    name: TierName
    size_text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSetup:
    """The tiers of one replay, the policy that moves KV between them, and the KV bytes per
    token that turn their hits into bytes loaded (None: unknown, no byte columns)."""

    tiers: tuple[TierSpec, ...]
    policy: TierPolicy
    kv_bytes_per_token: int | None = None


def parse_tier(text: str) -> TierRequest:
    """`cpu=64GiB`, `disk=2TB`, `remote=1e6tokens`, `cpu=20000blocks` as a `TierRequest`."""
    name, sep, size = text.partition("=")
    name = name.strip().lower()
    if not sep or not size.strip():
        raise ConfigError(f"--tier {text!r} must be NAME=SIZE, e.g. cpu=64GiB or disk=2Mtok")
    try:
        tier = TierName(name)
    except ValueError:
        raise ConfigError(f"--tier {text!r}: the tier name must be one of cpu, disk, remote"
                          ) from None
    try:  # the size's grammar is checked now, converted later (`resolve_tiers`)
        parse_capacity(size.strip(), unlimited_for="a tier below the first")
    except ConfigError as exc:
        raise ConfigError(f"--tier {text!r}: {exc}") from None
    return TierRequest(name=tier, size_text=size.strip())


def tier_policy_for(preset: str, policy: TierPolicy | str | None) -> TierPolicy:
    """The tier policy of `preset` (its default when `policy` is None), refused when the
    preset's engine does not have it."""
    allowed = PRESET_POLICIES[str(preset)]
    if policy is None:
        return allowed[0]
    try:
        chosen = TierPolicy(str(policy))
    except ValueError:
        names = ", ".join(p.value for p in TierPolicy)
        raise ConfigError(f"--tier-policy {policy!r} is not a tier policy; use one of {names}"
                          ) from None
    if chosen not in allowed:
        names = ", ".join(p.value for p in allowed)
        raise ConfigError(f"--tier-policy {chosen.value} is not one of preset {preset}'s "
                          f"engine ({names}); change --preset or --tier-policy")
    return chosen


def default_chunk_tokens(policy: TierPolicy, block_size_tokens: int) -> int:
    """The engine's chunk: one GPU block (vLLM, SGLang's page), 256 tokens (LMCache)."""
    if policy is TierPolicy.LMCACHE:
        return max(LMCACHE_CHUNK_TOKENS, block_size_tokens)
    return block_size_tokens


def resolve_tiers(requests: tuple[TierRequest, ...], *, policy: TierPolicy,
                  block_size_tokens: int, chunk_tokens: int | None,
                  kv_bytes_per_token: int | None, store_threshold: int = 0
                  ) -> tuple[TierSpec, ...]:
    """The tiers in chunks: sizes in tokens, blocks (of the replay's block size) or bytes
    (through `kv_bytes_per_token`), in the order given; each name at most once.
    `store_threshold` (vLLM's) is the first tier's admission rule."""
    chunk = default_chunk_tokens(policy, block_size_tokens) if chunk_tokens is None \
        else int(chunk_tokens)
    if chunk < 1 or chunk % block_size_tokens:
        raise ConfigError(f"--tier-chunk {chunk} must be a whole number of "
                          f"{block_size_tokens}-token blocks")
    seen: set[TierName] = set()
    tiers: list[TierSpec] = []
    for request in requests:
        if request.name in seen:
            raise ConfigError(f"--tier {request.name} is given twice; give each tier once")
        seen.add(request.name)
        capacity = parse_capacity(request.size_text)
        if capacity.unlimited:
            if not tiers:
                raise ConfigError(f"--tier {request.name}={request.size_text}: the first tier "
                                  "below the GPU needs a size (it is host memory); a tier "
                                  "below it may be unlimited, as vLLM's fs tier is")
            tiers.append(TierSpec(name=request.name, capacity_chunks=1, chunk_tokens=chunk,
                                  unlimited=True))
            continue
        if capacity.unit == "bytes":
            if kv_bytes_per_token is None:
                raise ConfigError(f"--tier {request.name}={request.size_text} is in bytes; "
                                  "give --model (or --kv-bytes-per-token) to convert it, or a "
                                  "size in tokens or blocks")
            chunk_bytes = kv_bytes_per_token * chunk
            if policy in VLLM_POLICIES:
                chunk_bytes = -(-chunk_bytes // VLLM_PAGE_BYTES) * VLLM_PAGE_BYTES
            chunks = int(capacity.amount // chunk_bytes)
        elif capacity.unit == "blocks":
            chunks = int(capacity.amount * block_size_tokens // chunk)
        else:
            chunks = int(capacity.amount // chunk)
        if chunks < 1:
            raise ConfigError(f"--tier {request.name}={request.size_text} holds less than one "
                              f"{chunk}-token chunk; give a larger size")
        tiers.append(TierSpec(name=request.name, capacity_chunks=chunks, chunk_tokens=chunk,
                              store_threshold=0 if tiers else store_threshold))
    return tuple(tiers)
