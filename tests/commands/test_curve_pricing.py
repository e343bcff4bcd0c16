"""`trace sweep` and `trace analyze` with prices: every capacity-curve point and tier-curve point,
and analyze's tiered replay, in GPU-hours and money per day, equal to `trace replay`'s pricing
of the same replay; no price the user did not give."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from yaotu_trace import replay
from yaotu_trace.commands.analyze import analyze
from yaotu_trace.commands.load import TraceInput
from yaotu_trace.commands.shared.pricing import PricingOptions
from yaotu_trace.commands.sweep import sweep
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.render.json_report import render_json

TRACE = FIXTURES / "engines" / "trace_mixed.parquet"
PRICES = PricingOptions(gpu="H100", gpu_price="2.5", memory_price="3")


def _json(report) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(render_json(report))


def _replayed(capacity: str, *tiers: str, accounting: str | None = None) -> dict:
    return _json(replay(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", block_size_tokens=16, capacity=capacity, model="llama-3.1-8b",
        tiers=tiers, accounting=accounting), pricing=PRICES,
        waterfall=False))["prefill_pricing"]


@pytest.fixture(scope="module")
def swept() -> dict:
    return _json(sweep(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", block_size_tokens=16, model="llama-3.1-8b", tiers=("cpu=176blocks",)),
        capacities="33,66", pricing=PRICES))


def test_each_capacity_point_is_priced_as_a_replay_at_its_capacity(swept: dict) -> None:
    priced = swept["curve_pricing"]["capacity_points"]
    curve = swept["capacity_curve"]
    assert len(priced) >= len(curve["points"])
    knee = next(p for p in priced if p["label"] == "knee")
    assert knee["hit_tokens"] == curve["knee"]["hit_tokens"]
    alone = _replayed(str(knee["capacity_blocks"]), accounting="clean")["gpu_cache"]
    assert knee["hit_tokens"] == alone["hit_tokens"]
    assert knee["gpu_hours_per_day"] == pytest.approx(alone["gpu_hours_per_day"])
    assert knee["gpu_money_per_day"] == pytest.approx(2.5 * knee["gpu_hours_per_day"])
    # More capacity never saves less prefill.
    by_size = sorted(priced, key=lambda p: p["capacity_blocks"])
    saved = [p["prefill_saved_s"] for p in by_size]
    assert saved == sorted(saved)


def test_each_tier_point_is_priced_as_trace_replay_prices_it(swept: dict) -> None:
    points = swept["curve_pricing"]["tier_points"]
    point = next(p for p in points if p["gpu_capacity_blocks"] == 66
                 and p["tier_capacity_chunks"] == 176)["tier"]
    (cpu,) = _replayed("66", "cpu=176blocks")["tiers"]
    for key in ("hit_tokens", "prefill_saved_s", "load_s", "gpu_hours_per_day",
                "gpu_money_per_day", "memory_money_per_day", "net_money_per_day"):
        assert point[key] == pytest.approx(cpu[key]), key
    assert point["hit_tokens"] == 25_168  # vLLM's own (tests/fixtures/tiers_vllm)
    gpu_alone = next(p for p in points if p["gpu_capacity_blocks"] == 66
                     and p["tier_capacity_chunks"] is None)["gpu"]
    assert gpu_alone["hit_tokens"] == 24_816


def test_analyze_prices_its_tiered_replay_as_trace_replay() -> None:
    report = _json(analyze(TraceInput(path=TRACE), preset="vllm", tiers=ReplayOptions(
        preset="vllm", capacity="66", model="llama-3.1-8b", tiers=("cpu=176blocks",)),
        pricing=PRICES))
    priced = report["prefill_pricing"]
    (cpu,) = _replayed("66", "cpu=176blocks")["tiers"]
    assert priced["tiers"][0]["net_money_per_day"] == pytest.approx(cpu["net_money_per_day"])


def test_without_prices_the_outputs_carry_no_pricing() -> None:
    report = _json(sweep(TraceInput(path=TRACE), ReplayOptions(preset="vllm")))
    assert "curve_pricing" not in report
    analyzed = _json(analyze(TraceInput(path=TRACE), preset="vllm", tiers=ReplayOptions(
        preset="vllm", capacity="66", tiers=("cpu=176blocks",))))
    assert "prefill_pricing" not in analyzed and "tiers" in analyzed


def test_gpu_time_without_a_price_stays_in_gpu_hours() -> None:
    report = _json(sweep(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", model="llama-3.1-8b"), pricing=PricingOptions(gpu="H100")))
    point = report["curve_pricing"]["capacity_points"][-1]
    assert point["gpu_hours_per_day"] > 0 and point["gpu_money_per_day"] is None


@pytest.mark.parametrize(("call", "needle"), [
    (lambda: sweep(TraceInput(path=TRACE), ReplayOptions(model="llama-3.1-8b"),
                   pricing=PricingOptions(gpu="H100", gpu_price="two")),
     "--gpu-price 'two' is not a price"),
    (lambda: sweep(TraceInput(path=TRACE), ReplayOptions(model="llama-3.1-8b"),
                   pricing=PricingOptions(gpu="H100", memory_price="1e")),
     "--memory-price '1e' is not a price"),
    (lambda: sweep(TraceInput(path=TRACE), ReplayOptions(),
                   pricing=PricingOptions(gpu="H100", gpu_price="2")), "add --model"),
    (lambda: sweep(TraceInput(path=TRACE), ReplayOptions(model="llama-3.1-8b", warmup="50%"),
                   pricing=PricingOptions(gpu="H100")), "drop --warmup"),
    (lambda: analyze(TraceInput(path=TRACE), pricing=PricingOptions(gpu="H100")),
     "add --tier"),
    (lambda: analyze(TraceInput(path=TRACE), tiers=ReplayOptions(
        capacity="66", tiers=("cpu=176blocks",)),
        pricing=PricingOptions(gpu="H100", gpu_price="x")),
     "--gpu-price 'x' is not a price"),
])
def test_bad_prices_are_one_line(call, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value)


MOONCAKE = __import__("pathlib").Path("/work/shared/traces/mooncake/conversation_trace.jsonl")


@pytest.mark.skipif(not MOONCAKE.exists(), reason="the Mooncake trace is not on this machine")
def test_the_priced_curve_of_docs_tiers_md() -> None:
    """docs/tiers.md §4: the 2,700-block pool with a 13,000-block CPU tier, and the knee."""
    report = _json(sweep(TraceInput(path=MOONCAKE), ReplayOptions(
        model="llama-3.1-70b", tiers=("cpu=26000blocks",), tier_policy="vllm-native"),
        capacities="2700", pricing=PricingOptions(gpu="H100", tp=8, gpu_price="2.50",
                                                  memory_price="3")))
    priced = report["curve_pricing"]
    cell = next(p for p in priced["tier_points"] if p["tier_capacity_chunks"] == 13_000)["tier"]
    assert round(cell["gpu_hours_per_day"], 2) == 57.24
    assert round(cell["net_money_per_day"], 2) == -57.10
    knee = next(p for p in priced["capacity_points"] if p["label"] == "knee")
    assert (knee["capacity_blocks"], round(knee["gpu_money_per_day"], 2)) == (38_223, 310.67)
