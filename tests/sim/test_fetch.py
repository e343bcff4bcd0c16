"""Fetch versus recompute (`sim/fetch.py`): loads against the prefill they save, Mooncake's
Eq. 2 break-even, link overrides, and the requests that loading makes slower."""

from __future__ import annotations

import numpy as np
import pytest

from yaotu_trace.catalog.gpus import find_gpu
from yaotu_trace.catalog.models import find_model
from yaotu_trace.errors import ConfigError
from yaotu_trace.sim.fetch import (
    LINKS,
    Compute,
    break_even_tokens,
    links_with,
    parse_link,
    path_of,
    price_fetches,
)
from yaotu_trace.sim.roofline import step_cost_for


def _compute(tp: int = 8, mfu: float = 0.5) -> Compute:
    model = find_model("Llama-3.1-70B")
    cost = step_cost_for(model, find_gpu("H100-SXM"), tp=tp, mfu=mfu, mbu=0.7,
                         overhead_ms=0.0, kv_bytes_per_token=model.kv_bytes_per_token)
    return Compute.of(cost, gpus=tp)


def test_a_tier_saves_prefill_and_adds_its_load() -> None:
    compute = Compute(linear_params=1e9, attention_flops_per_token_pair=0.0, flops_per_s=1e12)
    links = links_with(["pcie=1GB/s,1ms"])
    pricing = price_fetches(
        request_id=np.array(["a", "b", "c"], dtype=object), arrival_s=np.array([0.0, 1.0, 2.0]),
        prompt_tokens=np.array([1000, 1000, 1000]), gpu_hit_tokens=np.array([0, 100, 0]),
        tier_hits=[("cpu", np.array([500, 0, 10]))], compute=compute, kv_bytes_per_token=1000,
        links=links)
    cpu = pricing.tiers[0]
    # 500 tokens: 2·1e9·500 / 1e12 = 1 s of prefill; 1 ms + 500 kB / 1 GB/s = 1.5 ms of load.
    assert cpu.prefill_saved_s == pytest.approx(1.0 + 0.02)
    assert cpu.load_s == pytest.approx(0.0015 + 0.00101)
    assert pricing.ttft_saved_s.tolist() == pytest.approx([1.0 - 0.0015, 0.0, 0.02 - 0.00101])
    assert pricing.slower_requests == 0
    assert cpu.requests == 2 and cpu.loaded_bytes == 510_000


def test_loading_slower_than_recomputing_is_counted_and_named() -> None:
    compute = Compute(linear_params=1e6, attention_flops_per_token_pair=0.0, flops_per_s=1e12)
    pricing = price_fetches(
        request_id=np.array(["fast", "slow"], dtype=object), arrival_s=np.array([0.0, 5.0]),
        prompt_tokens=np.array([100, 100]), gpu_hit_tokens=np.array([0, 0]),
        tier_hits=[("remote", np.array([0, 64]))], compute=compute,
        kv_bytes_per_token=100_000)
    assert pricing.slower_requests == 1
    assert pricing.slower_examples[0][0] == "slow"
    assert pricing.slower_examples[0][1] > 0.57e-3  # at least the NIC's latency
    assert pricing.ttft_change_share > 0  # the tier makes TTFT longer


def test_a_tiers_path_takes_its_slowest_link_and_every_latency() -> None:
    bandwidth, latency, names = path_of("disk", LINKS)
    assert names == ("nvme", "pcie")
    assert bandwidth == LINKS["nvme"].bytes_per_s
    assert latency == LINKS["nvme"].latency_s + LINKS["pcie"].latency_s


def test_eq2_break_even_matches_mooncakes_llama70b_example() -> None:
    # Mooncake §2.2 (kv-tiers.md §5): LLaMA3-70B at p = 8192 needs about 19 GB/s on 8×H800
    # (≈ H100, G its peak): below it a prefix of 8192 tokens is not worth fetching, above it
    # it is. Our roofline adds the attention term, which lowers the bar a little (~17 GB/s).
    compute = _compute(mfu=1.0)
    kv = find_model("Llama-3.1-70B").kv_bytes_per_token
    slow = break_even_tokens(compute, kv, 15e9, 0.0)
    fast = break_even_tokens(compute, kv, 22e9, 0.0)
    assert slow is None or slow > 8192
    assert fast is not None and fast <= 8192


@pytest.mark.parametrize(("text", "rate", "latency"), [
    ("pcie=32GB/s", 32e9, 0.0), ("nic=200Gb/s,0.5ms", 25e9, 0.5e-3),
    ("nvme=3.5GiB/s,80us", 3.5 * 2**30, 80e-6)])
def test_link_overrides(text: str, rate: float, latency: float) -> None:
    link = parse_link(text)
    assert (link.bytes_per_s, link.latency_s) == pytest.approx((rate, latency))


@pytest.mark.parametrize("text", ["pcie", "usb=1GB/s", "pcie=fast", "pcie=-1GB/s",
                                  "nic=1GB/s,soon"])
def test_bad_links_are_one_line(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_link(text)
    assert "\n" not in str(info.value) and "--link" in str(info.value)
