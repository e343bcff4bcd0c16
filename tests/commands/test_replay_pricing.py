"""`trace replay --gpu ... --gpu-price ... --memory-price ...`: the cache's saved prefill and
every tier's loads priced per day of the trace's traffic, with no price the user did not give."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES

from yaotu_trace import replay
from yaotu_trace.commands.load import TraceInput
from yaotu_trace.commands.shared.pricing import PricingOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.render.json_report import render_json

TRACE = FIXTURES / "engines" / "trace_mixed.parquet"


def _section(pricing: PricingOptions, **options: object) -> dict:
    import json

    report = replay(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", capacity="66", model="llama-3.1-8b", **options), pricing=pricing,
        waterfall=False)
    return json.loads(render_json(report))["prefill_pricing"]


def test_each_tier_is_priced_from_its_own_hits() -> None:
    s = _section(PricingOptions(gpu="H100", gpu_price="2.5", memory_price="3"),
                 tiers=("cpu=4000tokens",))
    (cpu,) = s["tiers"]
    assert cpu["name"] == "cpu" and cpu["hit_tokens"] > 0
    assert cpu["size_bytes"] == 4000 * 131_072
    assert cpu["net_money_per_day"] == pytest.approx(
        cpu["gpu_money_per_day"] - cpu["memory_money_per_day"])
    assert cpu["gpu_money_per_day"] == pytest.approx(2.5 * cpu["gpu_hours_per_day"])
    assert s["gpu_cache"]["hit_tokens"] > 0 and s["fetch"]["slower_requests"] >= 0


def test_no_price_no_money() -> None:
    s = _section(PricingOptions(gpu="H100"))
    assert s["gpu_cache"]["gpu_hours_per_day"] > 0
    assert s["gpu_cache"]["gpu_money_per_day"] is None
    assert s["prices"] == {"gpu_per_hour": None, "memory_per_gib_month": None}
    assert np.isfinite(s["prefill_s_without_cache"])


@pytest.mark.parametrize(("pricing", "needle"), [
    (PricingOptions(gpu="H100", gpu_price="cheap"), "--gpu-price 'cheap' is not a price"),
    (PricingOptions(gpu="H100", memory_price="-1"), "--memory-price '-1' is not a price"),
    (PricingOptions(gpu_price="2"), "add --gpu"),
    (PricingOptions(gpu="H100", links=("pcie=fast",)), "--link"),
])
def test_bad_prices_are_one_line(pricing: PricingOptions, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _section(pricing)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_check_gates_on_the_hits_a_configured_tier_must_reach(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from yaotu_trace import check
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    def gate(value: float) -> bool:
        config = tmp_path / f"tier{value}.toml"
        config.write_text('[[check]]\npath = "tiers.tiers.cpu.hit_ratio"\nop = ">="\n'
                          f"value = {value}\n")
        report = check(TraceInput(path=TRACE), DiagnosisOptions(preset="vllm", kv_capacity="66"),
                       config=config, tiers=ReplayOptions(tiers=("cpu=4000tokens",)))
        return bool(report.sections["checks"].failed)

    assert not gate(0.01)
    assert gate(0.99)


def test_a_gpu_pool_larger_than_the_gpus_memory_is_named() -> None:
    """66 blocks of 16 tokens of llama-3.1-8b's 128 KiB a token (132 MiB) fit one H100; the
    same pool in the blocks of a 512-token trace would be 32 times that, and a pool of
    700,000 tokens (85 GiB) does not fit its 80 GB: the section says so, with what fits."""
    assert _section(PricingOptions(gpu="H100"))["notes"] == []
    import json

    report = replay(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", capacity="700000tok", model="llama-3.1-8b"),
        pricing=PricingOptions(gpu="H100"), waterfall=False)
    (note,) = json.loads(render_json(report))["prefill_pricing"]["notes"]
    assert note.startswith("the GPU pool (85.4 GiB of KV, 700,000 tokens) is more than the "
                           "memory of 1 × H100-SXM (80 GB, 610,352 tokens of KV before the "
                           "weights)")
    report = replay(TraceInput(path=TRACE), ReplayOptions(
        preset="vllm", capacity="700000tok", model="llama-3.1-8b"),
        pricing=PricingOptions(gpu="H100", tp=2), waterfall=False)
    assert json.loads(render_json(report))["prefill_pricing"]["notes"] == []
