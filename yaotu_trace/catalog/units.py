"""Cache capacities as users write them (blocks, tokens or bytes) and their conversion to blocks.

Grammar (case-insensitive units, optional space between number and unit):

- blocks: `20000`, `20k blocks`, `1e5`; a bare number is a count of blocks and must be whole;
- tokens: `3.2Mtok`, `3.2M tok`, `500ktok`, `1e6 tokens` (multipliers k, M, G/B = 1e3, 1e6, 1e9);
- bytes: `40GiB`, `512MiB`, `40GB`, `1.5TB`, `4096B` (KiB/MiB/GiB/TiB binary, KB/MB/GB/TB
  decimal); converting them needs the KV bytes per token (`--model` or `--kv-bytes-per-token`);
- `unlimited` (also `inf`, `none`): no capacity limit.

A capacity above `MAX_COUNT` blocks or tokens (or `MAX_BYTES` bytes) is refused: no cache is
that large, and the counts must stay exact in 64-bit integers.

Arithmetic is exact (fractions), so `3.2M tok` at 16-token blocks is exactly 200,000 blocks and
conversions floor: a cache never holds a block it has no room for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Final, Literal

from yaotu_trace.errors import ConfigError

CapacityUnit = Literal["blocks", "tokens", "bytes", "unlimited"]

_COUNT_MULTIPLIERS: Final = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}
_BYTE_UNITS: Final = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_TOKEN_WORDS: Final = ("tok", "toks", "token", "tokens")
_BLOCK_WORDS: Final = ("", "blk", "blks", "block", "blocks")
_UNLIMITED: Final = ("unlimited", "inf", "infinite", "none")
_NUMBER: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*([a-z]*)\s*$")
_EXAMPLES: Final = "e.g. 20000 (blocks), 3.2Mtok, 500ktok, 40GiB, 512MiB or unlimited"
MAX_COUNT: Final = 10**15  # blocks or tokens: a billion GPUs' worth of a million tokens each
MAX_BYTES: Final = 2**60  # 1 EiB
# The largest KV block: engines use 1 to 256 tokens (Mooncake's traces 512); the replay keeps
# block offsets in 32-bit integers.
MAX_BLOCK_TOKENS: Final = 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class Capacity:
    """A parsed capacity: an exact amount in one unit, plus the text it came from."""

    unit: CapacityUnit
    amount: Fraction
    text: str

    @property
    def unlimited(self) -> bool:
        """Whether this capacity means "no limit"."""
        return self.unit == "unlimited"

    def to_blocks(
        self, block_size_tokens: int, kv_bytes_per_token: int | None = None
    ) -> int | None:
        """Whole blocks of `block_size_tokens` that fit (floor); None when unlimited."""
        check_block_size(block_size_tokens)
        if self.unit == "unlimited":
            return None
        if self.unit == "blocks":
            return int(self.amount)
        tokens = self.to_tokens(kv_bytes_per_token)
        assert tokens is not None  # unlimited handled above
        return int(tokens // block_size_tokens)

    def to_tokens(self, kv_bytes_per_token: int | None = None) -> Fraction | None:
        """Exact tokens this capacity holds (bytes need the KV bytes per token); None if unlimited.

        Capacities in blocks have no token size without a block size: use `to_blocks`.
        """
        if self.unit == "unlimited":
            return None
        if self.unit == "tokens":
            return self.amount
        if self.unit == "bytes":
            if kv_bytes_per_token is None:
                raise ConfigError(
                    f"capacity {self.text!r} is in bytes; pass --model NAME or "
                    "--kv-bytes-per-token N so it can be converted to tokens"
                )
            check_kv_bytes_per_token(kv_bytes_per_token)
            return self.amount / kv_bytes_per_token
        raise ConfigError(
            f"capacity {self.text!r} is in blocks; convert it with the block size (to_blocks)"
        )


def parse_capacity(text: str, unlimited_for: str = "no limit") -> Capacity:
    """Parse a capacity string; raises a one-line `ConfigError` that shows valid examples.
    `unlimited_for` says where 'unlimited' may stand instead (a tier: below the first)."""
    raw = str(text).strip()
    lowered = raw.lower()
    if lowered in _UNLIMITED:
        return Capacity(unit="unlimited", amount=Fraction(0), text=raw)
    match = _NUMBER.match(lowered)
    if match is None:
        raise ConfigError(f"cannot read capacity {raw!r}; write a number and a unit, {_EXAMPLES}")
    number_text, first, second = match.groups()
    try:
        number = Fraction(Decimal(number_text))
    except (InvalidOperation, ValueError) as exc:
        raise ConfigError(f"cannot read the number in capacity {raw!r}; {_EXAMPLES}") from exc
    unit, amount = _unit_and_amount(raw, number, first, second)
    if amount <= 0:
        raise ConfigError(f"capacity {raw!r} must be positive; use 'unlimited' for "
                          f"{unlimited_for}")
    if unit == "blocks" and amount.denominator != 1:
        raise ConfigError(f"capacity {raw!r} is a fraction of a block; blocks are whole")
    limit = MAX_BYTES if unit == "bytes" else MAX_COUNT
    if amount > limit:
        raise ConfigError(f"capacity {raw!r} is beyond {limit:.3g} {unit}; give a real cache "
                          f"size, or 'unlimited' for {unlimited_for}")
    return Capacity(unit=unit, amount=amount, text=raw)


def _unit_and_amount(
    raw: str, number: Fraction, first: str, second: str
) -> tuple[CapacityUnit, Fraction]:
    """Resolve the one or two unit words after the number ("M tok", "Mtok", "GiB", "k blocks")."""
    word = first + second
    if word in _BYTE_UNITS and not second:
        return "bytes", number * _BYTE_UNITS[word]
    for words, unit in ((_TOKEN_WORDS, "tokens"), (_BLOCK_WORDS, "blocks")):
        for suffix in words:
            if word.endswith(suffix):
                prefix = word[: len(word) - len(suffix)]
                if prefix in _COUNT_MULTIPLIERS:
                    kind: CapacityUnit = "tokens" if unit == "tokens" else "blocks"
                    return kind, number * _COUNT_MULTIPLIERS[prefix]
    raise ConfigError(f"unknown unit in capacity {raw!r}; {_EXAMPLES}")


def check_kv_bytes_per_token(value: object, option: str = "--kv-bytes-per-token") -> int:
    """A KV size per token as a whole number of bytes in [1, MAX_COUNT]; anything else is a
    `ConfigError` naming `option` (the CLI's --kv-bytes-per-token, a catalog entry)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ConfigError(f"{option} {value!r} must be a whole number of bytes from 1 to "
                          f"{MAX_COUNT:.0e}; e.g. 131072 for Llama-3.1-8B in bf16")
    return value


def check_block_size(value: object, option: str = "--block-size") -> int:
    """A KV block size in tokens, a whole number in [1, MAX_BLOCK_TOKENS]; anything else is a
    `ConfigError` naming `option`."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_BLOCK_TOKENS:
        raise ConfigError(f"{option} {value!r} must be a whole number of tokens from 1 to "
                          f"{MAX_BLOCK_TOKENS}; engines use 16 (vLLM) or 1 to 256")
    return value
