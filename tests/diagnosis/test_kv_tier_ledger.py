"""P004 names a CPU tier: its size, replayed under the engine's tier rules, and the ledger's
`kv_tier` entry that prices it; `trace check` can gate on what the tier wins back."""

from __future__ import annotations

import json
from pathlib import Path

from yaotu_trace import diagnose
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.gate.report_path import resolve
from yaotu_trace.render.json_report import render_json

CHAT = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"


def test_capacity_loss_gets_a_sized_and_priced_cpu_tier() -> None:
    options = DiagnosisOptions(model="llama-3.1-8b", gpu="H100", kv_capacity="400")
    doc = json.loads(render_json(diagnose(CHAT, options)))
    tier = resolve(doc, "axes.prefix_reuse.metrics.tier_candidate")
    assert tier.found and tier.value is not None
    t = tier.value
    # The tier holds a whole number of 16-token blocks, at least the GPU pool, and wins back
    # most of what the pool loses to capacity (never more than that).
    assert t["size_tokens"] >= t["gpu_pool_tokens"] == 400 * 16
    assert 0.5 < t["recovered_share"] <= 1.0
    assert t["hit_gain_share"] > 0.1
    assert t["size_bytes"] == t["size_tokens"] * 131_072
    assert t["peak_bytes_per_s"] > 0 and t["ttft_change_share"] < 0
    entry = next(e for e in doc["ledger"] if e["remedy"] == "kv_tier")
    assert entry["triggered_by"] == ["P004"]
    assert entry["caveats"][0].startswith("add ") and "CPU tier: +" in entry["caveats"][0]
    gate = resolve(doc, "axes.prefix_reuse.metrics.tier_candidate.hit_gain_share")
    assert gate.found and gate.value == t["hit_gain_share"]
    # The smaller sizes tried (1, 2, 4, ... × the pool) stay with the curve's estimate, each
    # short of the 90 % that picked the size replayed; the ledger names the last three that
    # win back a quarter or more, for a host that cannot hold the one recommended.
    smaller = t["smaller_sizes"]
    assert [p["size_tokens"] for p in smaller] == [t["gpu_pool_tokens"] * 2**k
                                                   for k in range(len(smaller))]
    assert smaller[-1]["size_tokens"] * 2 == t["size_tokens"]
    shares = [p["recovered_share_estimate"] for p in smaller]
    assert shares == sorted(shares) and shares[-1] < 0.9
    shown = [p for p in smaller if p["recovered_share_estimate"] >= 0.25][-3:]
    said = entry["caveats"][2]
    assert said.startswith("smaller tiers win back, by the one-pass LRU curve")
    assert said.count("GiB ~") == len(shown) == 3


def test_tier_candidate_prefill_is_the_replicas_with_tp() -> None:
    # GIVEN the same run judged on one GPU per instance and on four (--tp 4)
    def tier_of(tp: int | None) -> dict[str, float]:
        options = DiagnosisOptions(model="llama-3.1-8b", gpu="H100", kv_capacity="400", tp=tp)
        doc = json.loads(render_json(diagnose(CHAT, options)))
        return resolve(doc, "axes.prefix_reuse.metrics.tier_candidate").value

    one, four = tier_of(None), tier_of(4)
    # THEN the tier's hits and loads are the same, the prefill its hits save takes a quarter
    # of the time on four GPUs, and the GPU-seconds freed count all four GPUs of the replica
    assert four["hit_tokens_gained"] == one["hit_tokens_gained"] > 0
    assert four["load_s"] == one["load_s"] > 0
    assert abs(four["prefill_saved_s"] - one["prefill_saved_s"] / 4) < 1e-9 * one["prefill_saved_s"]
    expected = (four["prefill_saved_s"] - four["load_s"]) * 4
    assert abs(four["gpu_seconds_saved"] - expected) < 1e-6 * abs(expected)


def test_reuse_lost_to_capacity_is_not_claimed_by_fixing_cache_keys() -> None:
    # GIVEN a pool too small for the chat trace's shared prefixes and no observed hits: the
    # waterfall loses the reuse to capacity and eviction only (no key, no routing loss)
    options = DiagnosisOptions(model="llama-3.1-8b", gpu="H100", kv_capacity="400")
    doc = json.loads(render_json(diagnose(CHAT, options)))
    reuse = next(a for a in doc["axes"] if a["name"] == "prefix_reuse")
    losses = {s["step"]: s["loss_tokens"] for s in reuse["metrics"]["waterfall"]}
    assert losses["tenant_isolation"] == losses["routing"] == 0 < losses["capacity"]
    assert {"P001", "P004"} <= {f["id"] for f in reuse["findings"]}
    # THEN the tier and the larger pool price it, and no entry says new cache keys save it
    # (the ledger claimed all 790,720 recomputed tokens for fix_cache_keys before)
    remedies = [e["remedy"] for e in doc["ledger"]]
    assert "kv_tier" in remedies and "larger_kv_pool" in remedies
    assert "fix_cache_keys" not in remedies
