"""`--gpu-price` and `--memory-price`: numbers or a one-line usage error, and the per-day
arithmetic of GPU-hours and memory."""

from __future__ import annotations

import pytest

from yaotu_trace.catalog.prices import (
    Prices,
    gpu_hours_per_day,
    gpu_money_per_day,
    memory_money_per_day,
    parse_price,
)
from yaotu_trace.errors import ConfigError, ExitCode


def test_prices_are_dollars() -> None:
    assert Prices.parse("2.5", "$0.004") == Prices(gpu_per_hour=2.5, memory_per_gib_month=0.004)
    assert Prices.parse(None, None) == Prices()


@pytest.mark.parametrize("text", ["two", "", "nan", "inf", "-1", "1,5"])
def test_a_price_that_is_not_a_number_is_a_usage_error(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_price(text, "--gpu-price")
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in str(info.value) and "--gpu-price" in str(info.value)


@pytest.mark.parametrize("text", ["1e300", "2000000", "$1.5e7"])
def test_an_absurd_price_is_a_usage_error(text: str) -> None:
    # $1e300 a GPU-hour printed every money cell as a 300-digit number
    with pytest.raises(ConfigError) as info:
        parse_price(text, "--gpu-price")
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in str(info.value) and "beyond $1,000,000" in str(info.value)
    assert parse_price("1000000", "--gpu-price") == 1e6


def test_per_day_of_the_traces_traffic() -> None:
    # 1,800 GPU-seconds over a 1-hour trace: 12 GPU-hours a day, $30 at $2.50.
    assert gpu_hours_per_day(1800.0, 3600.0) == pytest.approx(12.0)
    assert gpu_money_per_day(1800.0, 3600.0, Prices(gpu_per_hour=2.5)) == pytest.approx(30.0)
    assert gpu_money_per_day(1800.0, 3600.0, Prices()) is None
    assert gpu_hours_per_day(1.0, 0.0) is None
    # 64 GiB at $3 per GiB-month: 192 $/month over 30.4375 days.
    assert memory_money_per_day(64 * 2**30, Prices(memory_per_gib_month=3.0)) == pytest.approx(
        192 / 30.4375)


def test_a_tier_can_have_its_own_memory_price() -> None:
    # GIVEN host memory at $3 and NVMe at $0.08 per GiB-month (`--memory-price 3,disk=0.08`)
    prices = Prices.parse(None, "3,disk=0.08")
    # THEN the disk is priced at its own, every other tier at the common price
    assert prices.memory_for("disk") == 0.08 and prices.memory_for("cpu") == 3.0
    assert memory_money_per_day(2**30, prices, "disk") == pytest.approx(0.08 / 30.4375)
    assert prices.to_dict()["memory_per_gib_month_by_tier"] == {"disk": 0.08}
    # and a tier priced alone leaves the others unpriced
    alone = Prices.parse(None, "remote=0.02")
    assert alone.memory_for("remote") == 0.02 and alone.memory_for("cpu") is None
    assert memory_money_per_day(2**30, alone, "cpu") is None


@pytest.mark.parametrize(("text", "said"), [
    ("3,4", "two prices for every tier"), ("ssd=1", "'ssd' is not a tier"),
    ("disk=x", "--memory-price disk 'x' is not a price"), ("disk=1,disk=2", "prices disk twice"),
])
def test_bad_tier_memory_prices_are_one_line_usage_errors(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        Prices.parse(None, text)
    assert info.value.exit_code == ExitCode.USAGE
    assert said in str(info.value) and "\n" not in str(info.value)
