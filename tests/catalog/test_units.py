"""Capacity strings: blocks, tokens and bytes, exact conversion to blocks, one-line errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from yaotu_trace.catalog.units import (
    MAX_BLOCK_TOKENS,
    check_block_size,
    check_kv_bytes_per_token,
    parse_capacity,
)
from yaotu_trace.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "unit", "amount"),
    [
        ("20000", "blocks", 20_000),
        ("20k blocks", "blocks", 20_000),
        ("1e5", "blocks", 100_000),
        ("3.2Mtok", "tokens", 3_200_000),
        ("3.2M tok", "tokens", 3_200_000),
        ("500ktok", "tokens", 500_000),
        ("1e6 tokens", "tokens", 1_000_000),
        ("2Btok", "tokens", 2_000_000_000),
        ("40GiB", "bytes", 40 * 2**30),
        ("40GB", "bytes", 40 * 10**9),
        ("512MiB", "bytes", 512 * 2**20),
        ("512 mib", "bytes", 512 * 2**20),
        ("1.5TB", "bytes", 1_500_000_000_000),
        ("4096B", "bytes", 4096),
    ],
)
def test_parse_capacity_units(text: str, unit: str, amount: int) -> None:
    cap = parse_capacity(text)
    assert cap.unit == unit
    assert cap.amount == amount


def test_blocks_are_blocks_at_any_block_size() -> None:
    assert parse_capacity("20000").to_blocks(16) == 20_000
    assert parse_capacity("20000").to_blocks(512) == 20_000


def test_tokens_convert_exactly_and_floor() -> None:
    assert parse_capacity("3.2M tok").to_blocks(16) == 200_000
    assert parse_capacity("1e4tok").to_blocks(512) == 19  # 19.53 blocks: floor
    assert parse_capacity("0.3ktok").to_blocks(16) == 18  # 300 / 16 = 18.75, no float error


def test_bytes_need_kv_bytes_per_token() -> None:
    cap = parse_capacity("40GiB")
    with pytest.raises(ConfigError, match="--model"):
        cap.to_blocks(16)
    # Llama-3.1-70B: 327,680 B/token -> 40 GiB = 131,072 tokens = 8,192 blocks of 16.
    assert cap.to_blocks(16, kv_bytes_per_token=327_680) == 8_192
    assert cap.to_tokens(kv_bytes_per_token=327_680) == 131_072


def test_bytes_floor_to_whole_blocks() -> None:
    # 1 GB / 131,072 B per token = 7,629.39 tokens -> 476 blocks of 16 (476.8).
    assert parse_capacity("1GB").to_blocks(16, kv_bytes_per_token=131_072) == 476


def test_unlimited() -> None:
    for text in ("unlimited", "inf", "None"):
        cap = parse_capacity(text)
        assert cap.unlimited
        assert cap.to_blocks(16) is None


@pytest.mark.parametrize(
    "text", ["", "abc", "12 parsecs", "-5", "0", "2.5", "0tok", "1.5 blocks", "5 GiBs", "tok"]
)
def test_bad_capacities_raise_one_line_config_errors(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_capacity(text)
    assert "\n" not in str(info.value)


def test_bad_block_size_and_kv_bytes() -> None:
    with pytest.raises(ConfigError):
        parse_capacity("1Mtok").to_blocks(0)
    with pytest.raises(ConfigError):
        parse_capacity("1GiB").to_blocks(16, kv_bytes_per_token=0)


@given(
    tokens=st.integers(min_value=1, max_value=10**12),
    block=st.integers(min_value=1, max_value=4096),
)
def test_token_capacity_round_trip_floor(tokens: int, block: int) -> None:
    assert parse_capacity(f"{tokens}tok").to_blocks(block) == tokens // block


@given(
    gib=st.integers(min_value=1, max_value=4096),
    kv=st.integers(min_value=1, max_value=2_000_000),
    block=st.integers(min_value=1, max_value=1024),
)
def test_byte_capacity_floor_is_exact(gib: int, kv: int, block: int) -> None:
    blocks = parse_capacity(f"{gib}GiB").to_blocks(block, kv_bytes_per_token=kv)
    assert blocks == (gib * 2**30) // (kv * block)
    assert Fraction(blocks * kv * block) <= gib * 2**30


@pytest.mark.parametrize(("text", "bound"), [
    ("1e30", "beyond 1e+15 blocks"),
    ("1e16", "beyond 1e+15 blocks"),
    ("2e15tok", "beyond 1e+15 tokens"),
    ("1e10TiB", "beyond 1.15e+18 bytes"),
])
def test_absurd_capacities_are_refused_with_the_bound(text: str, bound: str) -> None:
    """A capacity no cache has is a usage error, not an int64 overflow further on."""
    with pytest.raises(ConfigError) as info:
        parse_capacity(text)
    assert str(info.value) == (f"capacity '{text}' is {bound}; give a real cache size, or "
                               "'unlimited' for no limit")


def test_the_largest_capacity_converts_exactly() -> None:
    assert parse_capacity("1e15").to_blocks(16) == 10**15
    assert parse_capacity("1e15tok").to_blocks(16) == 10**15 // 16
    assert parse_capacity(f"{2**60}B").to_tokens(1) == 2**60


@pytest.mark.parametrize("text", ["nan", "-5", "-1GiB", "1e5e5", ""])
def test_non_numbers_and_negative_capacities_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="capacity"):
        parse_capacity(text)


@pytest.mark.parametrize("value", [0, -1, 10**16, 1.5, True])
def test_kv_bytes_per_token_must_be_a_positive_whole_number(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^--kv-bytes-per-token .* must be a whole number"):
        check_kv_bytes_per_token(value)
    with pytest.raises(ConfigError):
        parse_capacity("1GiB").to_tokens(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -16, MAX_BLOCK_TOKENS + 1, 2**70])
def test_block_sizes_beyond_any_engine_are_refused(value: int) -> None:
    with pytest.raises(ConfigError, match=r"^--block-size .* must be a whole number of tokens"):
        check_block_size(value)
    assert check_block_size(MAX_BLOCK_TOKENS) == MAX_BLOCK_TOKENS
