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


def test_per_day_of_the_traces_traffic() -> None:
    # 1,800 GPU-seconds over a 1-hour trace: 12 GPU-hours a day, $30 at $2.50.
    assert gpu_hours_per_day(1800.0, 3600.0) == pytest.approx(12.0)
    assert gpu_money_per_day(1800.0, 3600.0, Prices(gpu_per_hour=2.5)) == pytest.approx(30.0)
    assert gpu_money_per_day(1800.0, 3600.0, Prices()) is None
    assert gpu_hours_per_day(1.0, 0.0) is None
    # 64 GiB at $3 per GiB-month: 192 $/month over 30.4375 days.
    assert memory_money_per_day(64 * 2**30, Prices(memory_per_gib_month=3.0)) == pytest.approx(
        192 / 30.4375)
