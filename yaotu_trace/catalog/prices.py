"""Prices the user gives (`--gpu-price`, `--memory-price`), and the arithmetic that turns a
trace's GPU-seconds and a tier's bytes into GPU-hours and money per day of its traffic.

No price is built in: without `--gpu-price` an amount stays in GPU-hours, without
`--memory-price` a tier stays in GiB. "Per day" scales what the trace's arrival span used to
a day of the same traffic (`× 86,400 / span`); a month is 365.25 / 12 days.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from yaotu_trace.errors import ConfigError

DAY_S: Final = 86_400.0
# No GPU-hour and no GiB-month costs a million dollars: beyond that a price is a typo or in
# another unit, and every amount priced by it would be as absurd.
MAX_PRICE: Final = 1e6
DAYS_PER_MONTH: Final = 365.25 / 12
GIB: Final = 2.0**30


def parse_price(text: str | float | None, option: str) -> float | None:
    """A price in dollars (`2.50`, `$2.50`), refused in one line when it is not a number
    from 0 to `MAX_PRICE`."""
    if text is None:
        return None
    raw = str(text).strip().removeprefix("$").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{option} {text!r} is not a price: give a number of dollars of at "
                          "least 0, e.g. 2.50")
    if value > MAX_PRICE:
        raise ConfigError(f"{option} {text!r} is beyond ${MAX_PRICE:,.0f}: give dollars per "
                          "GPU-hour (--gpu-price) or per GiB-month (--memory-price), e.g. 2.50")
    return value


TIER_NAMES: Final = ("cpu", "disk", "remote")


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """What the user pays: $ per GPU-hour and $ per GiB-month of host memory or storage.

    `memory_per_gib_month` is every tier's price; `tier_memory` a tier's own where given
    (`--memory-price 3,disk=0.08`: host memory and NVMe do not cost the same)."""

    gpu_per_hour: float | None = None
    memory_per_gib_month: float | None = None
    tier_memory: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, gpu_price: str | float | None, memory_price: str | float | None) -> Prices:
        """From the options' text (each refused in one line when it is not a number).
        `memory_price` is a price for every tier, `NAME=PRICE` for one (cpu, disk, remote),
        or both, separated by commas."""
        every, own = _memory_prices(memory_price)
        return cls(gpu_per_hour=parse_price(gpu_price, "--gpu-price"),
                   memory_per_gib_month=every, tier_memory=own)

    def memory_for(self, tier: str | None) -> float | None:
        """$ per GiB-month of tier `tier` (its own price, else every tier's; None: not given)."""
        return dict(self.tier_memory).get(str(tier), self.memory_per_gib_month)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        out: dict[str, object] = {"gpu_per_hour": self.gpu_per_hour,
                                  "memory_per_gib_month": self.memory_per_gib_month}
        if self.tier_memory:
            out["memory_per_gib_month_by_tier"] = dict(self.tier_memory)
        return out


def _memory_prices(text: str | float | None
                   ) -> tuple[float | None, tuple[tuple[str, float], ...]]:
    """`3`, `disk=0.08`, `3,disk=0.08,remote=0.02` as (every tier's price, each tier's own)."""
    if text is None:
        return None, ()
    every: float | None = None
    own: dict[str, float] = {}
    for item in str(text).split(","):
        name, sep, price = item.partition("=")
        if not sep:
            if every is not None:
                raise ConfigError(f"--memory-price {text!r} gives two prices for every tier; "
                                  "give one, and NAME=PRICE for a tier of its own")
            every = parse_price(item, "--memory-price")
            continue
        name = name.strip().lower()
        if name not in TIER_NAMES:
            raise ConfigError(f"--memory-price {text!r}: {name!r} is not a tier; price cpu, "
                              "disk or remote, e.g. --memory-price 3,disk=0.08")
        if name in own:
            raise ConfigError(f"--memory-price {text!r} prices {name} twice; give it once")
        value = parse_price(price, f"--memory-price {name}")
        assert value is not None
        own[name] = value
    return every, tuple(sorted(own.items()))


def per_day(amount: float, span_s: float) -> float | None:
    """`amount` used over a trace of `span_s` seconds, scaled to a day of the same traffic."""
    return amount * DAY_S / span_s if span_s > 0 else None


def gpu_hours_per_day(gpu_seconds: float, span_s: float) -> float | None:
    """GPU-seconds of the trace as GPU-hours per day of its traffic."""
    day = per_day(gpu_seconds, span_s)
    return None if day is None else day / 3600.0


def gpu_money_per_day(gpu_seconds: float, span_s: float, prices: Prices) -> float | None:
    """Those GPU-hours at `--gpu-price` (None without it)."""
    hours = gpu_hours_per_day(gpu_seconds, span_s)
    if hours is None or prices.gpu_per_hour is None:
        return None
    return hours * prices.gpu_per_hour


def memory_money_per_day(size_bytes: float, prices: Prices, tier: str | None = None
                         ) -> float | None:
    """A tier of `size_bytes` held for a day at its `--memory-price` (None without one)."""
    price = prices.memory_for(tier)
    if price is None:
        return None
    return size_bytes / GIB * price / DAYS_PER_MONTH
