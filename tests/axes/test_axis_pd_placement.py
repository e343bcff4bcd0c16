"""Disaggregated serving on the pd_interference axis: KV transfer, pool balance, fallbacks.

Every number is worked out by hand in the comments.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from diag_factories import evidence, make_input, make_metrics, make_trace, thresholds

from yaotu_trace.axes.base import EngineSettings, Status
from yaotu_trace.axes.pd_interference import analyze_pd_interference
from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import TraceSchemaError


def handed_off() -> dict[str, list[Any]]:
    """Four requests prefilled on p0 and decoded on d0, with observed transfers.

    ttft = max(first_token_s, decode_start_s) − arrival_s = 0.8, 0.4, 0.9, 0.6 (Σ 2.7 s);
    transfers 0.2, 0.1, 0.3, 0.4 (Σ 1.0 s); prefill waits (scheduled − arrival) 0.1, 0, 0.2, 0;
    decode waits (decode_start − first_token − transfer) 0.1, 0, 0, 0.
    """
    return {
        "arrival_s": [0.0, 1.0, 2.0, 3.0],
        "prompt_len": [100, 200, 300, 400],
        "output_len": [3, 3, 3, 3],
        "scheduled_s": [0.1, 1.0, 2.2, 3.0],
        "first_token_s": [0.5, 1.3, 2.6, 3.2],
        "kv_transfer_s": [0.2, 0.1, 0.3, 0.4],
        "decode_start_s": [0.8, 1.4, 2.9, 3.6],
        "finish_s": [1.0, 2.0, 3.6, 4.0],
        "prefill_instance": ["p0"] * 4,
        "decode_instance": ["d0"] * 4,
    }


def pool_steps() -> dict[str, list[Any]]:
    """p0 busy 0.5 + 0.3 + 0.4 + 0.2 = 1.4 s over its span 0–3.2 s (0.4375); d0's KV usage
    weighted by step time 0.2·0.1 + 0.6·0.2 + 0.7·0.3 + 0.4·0.1 = 0.39 over 0.8–4.0 s
    (0.121875); d0 runs 0.2·2 + 0.6·3 + 0.7·4 + 0.4·1 = 5.4 decode-seconds in 1.9 s."""
    return {
        "instance": ["p0", "d0", "p0", "d0", "p0", "d0", "p0", "d0"],
        "start_s": [0.0, 0.8, 1.0, 1.4, 2.2, 2.9, 3.0, 3.6],
        "end_s": [0.5, 1.0, 1.3, 2.0, 2.6, 3.6, 3.2, 4.0],
        "prefill_tokens": [100, 0, 200, 0, 300, 0, 400, 0],
        "decode_tokens": [0, 2, 0, 3, 0, 4, 0, 1],
        "kv_blocks_used": [5, 10, 5, 20, 5, 30, 5, 10],
        "kv_blocks_total": [100] * 8,
        "num_running": [1, 2, 1, 3, 1, 4, 1, 1],
    }


def test_observed_transfer_share_of_ttft_is_a_kv_transfer_finding() -> None:
    # GIVEN four handed-off requests with kv_transfer_s and no token times
    result = analyze_pd_interference(make_input(handed_off()), thresholds())
    pm = result.metrics.placement
    assert pm is not None and pm.disaggregated_requests == 4
    assert pm.transfer_source == "kv_transfer_s (observed)"
    # THEN Σ transfer / Σ ttft = 1.0 / 2.7; P50 of 0.1..0.4 = 0.25, P90 = 0.3 + 0.7 · 0.1
    assert pm.transfer_ttft_share == pytest.approx(1.0 / 2.7)
    assert pm.kv_transfer_s.p50 == pytest.approx(0.25)
    assert pm.kv_transfer_s.p90 == pytest.approx(0.37)
    assert pm.prefill_wait_share == pytest.approx(0.3 / 2.7)
    assert pm.decode_wait_share == pytest.approx(0.1 / 2.7)
    # 0.37 ≥ transfer_ttft_share 0.10 but < kv_transfer_dominant 0.5: a warning, not D008
    assert result.rule_ids == ("D007",)
    assert result.status is Status.WARNING and result.cause == "kv_transfer"
    assert result.score == pytest.approx(1.0 / 2.7)
    assert evidence(result, "D007")["kv_transfer_p50_s"].value == pytest.approx(0.25)
    # Without a step log the prefill pool's load is the union of the requests' prefill
    # intervals over the trace's 0–4 s: [0.1, 0.5] + [1.0, 1.3] + [2.2, 2.6] + [3.0, 3.2] =
    # 1.3 s; the decode pool's is unknown (its decode intervals say nothing of its batch)
    assert pm.busy_source is not None
    assert pm.busy_source.startswith("prefill pool: request intervals (upper bound); "
                                     "decode pool load unknown")
    assert pm.prefill_busy_share == pytest.approx(1.3 / 4.0)
    assert pm.decode_busy_share is None


def test_a_transfer_over_half_of_ttft_dominates() -> None:
    columns = handed_off()
    columns["kv_transfer_s"] = [0.5, 0.3, 0.6, 0.4]  # Σ 1.8 of 2.7 s: 0.667 ≥ 0.5
    result = analyze_pd_interference(make_input(columns), thresholds())
    assert result.rule_ids == ("D007", "D008")
    assert result.status is Status.BOTTLENECK and result.cause == "kv_transfer"
    assert result.score == pytest.approx(1.8 / 2.7)


def test_client_side_first_token_already_holds_the_transfer() -> None:
    # first_token_s after decode_start_s (the client's): ttft = first_token_s − arrival_s
    columns = handed_off()
    columns["first_token_s"] = [0.9, 1.5, 3.0, 3.7]  # ttft 0.9 + 0.5 + 1.0 + 0.7 = 3.1
    columns["decode_start_s"] = [0.8, 1.4, 2.9, 3.6]
    pm = analyze_pd_interference(make_input(columns), thresholds()).metrics.placement
    assert pm is not None and pm.transfer_ttft_share == pytest.approx(1.0 / 3.1)


def test_without_a_transfer_column_it_is_estimated_from_bytes_and_the_link() -> None:
    columns = handed_off()
    del columns["kv_transfer_s"], columns["decode_start_s"]
    # 8 Gb/s = 1e9 B/s × link_efficiency 0.7 = 0.7e9 B/s; 100 tokens × 7e6 B = 7e8 B: 1 s + α
    inp = make_input(columns, kv_bytes_per_token=7_000_000, link_gbps=8.0)
    pm = analyze_pd_interference(inp, thresholds()).metrics.placement
    assert pm is not None and pm.transfer_source.startswith("estimated")
    assert pm.kv_transfer_s.min == pytest.approx(1.0 + 0.00057)
    assert pm.kv_transfer_s.max == pytest.approx(4.0 + 0.00057)


def test_prefill_pool_queues_while_decode_pool_idles_is_pd_ratio() -> None:
    # prefill wait 0.3 / 2.7 = 0.111 ≥ pool_wait_share 0.1; decode KV load 0.121875 ≤ 0.5
    inp = make_input(handed_off(), steps=pool_steps())
    result = analyze_pd_interference(inp, thresholds(pool_wait_share=0.1,
                                                     transfer_ttft_share=0.5))
    pm = result.metrics.placement
    assert pm is not None and pm.busy_source == "step log (decode pool: KV usage)"
    assert pm.prefill_busy_share == pytest.approx(1.4 / 3.2)
    assert pm.decode_busy_share == pytest.approx(0.39 / 3.2)
    assert "D009" in result.rule_ids and result.cause == "pd_ratio"
    ev = evidence(result, "D009")
    assert ev["move_instances"].value == "decode → prefill"
    assert ev["prefill_wait_share"].value == pytest.approx(0.3 / 2.7)
    # A busy decode pool (load above pool_idle_busy) is no reason to move instances.
    busy = analyze_pd_interference(inp, thresholds(pool_wait_share=0.1, pool_idle_busy=0.1,
                                                   transfer_ttft_share=0.5))
    assert "D009" not in busy.rule_ids


def test_decode_pool_load_counts_seats_when_max_num_seqs_binds_first() -> None:
    # d0 runs 2, 3, 4, 1 of 4 seats: max(KV usage, seats) = 0.5, 0.75, 1.0, 0.25, weighted by
    # step time 0.2·0.5 + 0.6·0.75 + 0.7·1.0 + 0.4·0.25 = 1.35 over 3.2 s
    inp = make_input(handed_off(), steps=pool_steps(), max_num_seqs=4)
    pm = analyze_pd_interference(inp, thresholds()).metrics.placement
    assert pm is not None and pm.busy_source == "step log (decode pool: KV usage and seats)"
    assert pm.decode_busy_share == pytest.approx(1.35 / 3.2)


def test_fallbacks_and_failed_transfers_are_counted() -> None:
    columns = handed_off()
    # one more request prefilled on its decode instance (a fallback) and one whose transfer
    # failed: prefilled on p0, status error, never decoded
    columns["arrival_s"] += [4.0, 5.0]
    columns["prompt_len"] += [100, 100]
    columns["output_len"] += [5, 5]
    columns["scheduled_s"] += [4.0, 5.0]
    columns["first_token_s"] += [4.2, 5.2]
    columns["kv_transfer_s"] += [None, 0.1]
    columns["decode_start_s"] += [4.2, None]
    columns["finish_s"] += [4.5, None]
    columns["prefill_instance"] += ["d0", "p0"]
    columns["decode_instance"] += ["d0", None]
    columns["status"] = ["ok"] * 5 + ["error"]
    result = analyze_pd_interference(make_input(columns), thresholds(transfer_ttft_share=0.5))
    pm = result.metrics.placement
    assert pm is not None
    assert (pm.disaggregated_requests, pm.fallback_requests, pm.transfer_failures) == (4, 1, 1)
    # (1 + 1) / (4 + 1 + 1)
    assert pm.failure_share == pytest.approx(2 / 6)
    assert pm.prefill_instances == 1 and pm.decode_instances == 1
    assert result.rule_ids == ("D010",) and result.cause == "transfer_failures"
    # A request that failed before its prefill ended (no first token, no transfer) is not a
    # failed transfer.
    columns["first_token_s"][5], columns["kv_transfer_s"][5] = None, None
    pm = analyze_pd_interference(make_input(columns), thresholds()).metrics.placement
    assert pm is not None and pm.transfer_failures == 0
    assert pm.failure_share == pytest.approx(1 / 5)


def test_the_handoff_gap_is_not_a_decode_stall() -> None:
    # Token 1 at the prefill's end, token 2 after a 1.5 s transfer, then 20 ms steps: without
    # the split that gap would be two stalls with no prefill to explain them (D006).
    tokens = [[1.0] + [2.5 + 0.02 * i for i in range(10)],
              [2.0] + [3.5 + 0.02 * i for i in range(10)]]
    columns = {"arrival_s": [0.0, 1.0], "prompt_len": [10, 10], "output_len": [11, 11],
               "first_token_s": [1.0, 2.0], "token_times_s": tokens,
               "prefill_instance": ["p0", "p0"], "decode_instance": ["d0", "d0"]}
    result = analyze_pd_interference(make_input(columns), thresholds())
    m = result.metrics
    assert m.stalls == 0 and "D006" not in result.rule_ids
    # decode time: 2 × (1.5 + 9 × 0.02) − the two handoff gaps = 0.36 s
    assert m.decode_seconds_total == pytest.approx(0.36)
    colocated = {k: v for k, v in columns.items() if k != "prefill_instance"}
    assert analyze_pd_interference(make_input(colocated), thresholds()).metrics.stalls == 2


def test_colocation_ledger_entry_prices_transfers_and_interference() -> None:
    trace = make_trace(handed_off(), steps=pool_steps())
    doc = diagnose_trace(trace, settings=EngineSettings(kv_bytes_per_token=1000)).to_dict()
    entry = next(e for e in doc["ledger"] if e["remedy"] == "colocate_chunked_prefill")
    assert entry["triggered_by"] == ["D007"]
    saves = {q["name"]: q["value"] for q in entry["saves"]}
    adds = {q["name"]: q["value"] for q in entry["adds"]}
    # (100 + 200 + 300 + 400) tokens × 1000 B, moved once and held twice
    assert saves["transfer_bytes"] == pytest.approx(1e6)
    assert saves["second_kv_copy_bytes"] == pytest.approx(1e6)
    assert saves["transfer_seconds_total"] == pytest.approx(1.0)
    # 1.4 prefill-pool seconds × 5.4 / 1.9 decodes per decode step
    assert adds["decode_seconds_lost_max"] == pytest.approx(1.4 * 5.4 / 1.9)
    assert adds["extra_steps"] == 0.0  # no prompt above chunk_tokens 512


def test_schema_refuses_a_negative_transfer_and_notes_an_early_decode_start() -> None:
    columns = handed_off()
    columns["kv_transfer_s"][2] = -0.1
    with pytest.raises(TraceSchemaError, match=r"kv_transfer_s.*negative"):
        normalize(RawTrace(requests=_frame(columns), format_name="canonical"), "t.jsonl")
    columns = handed_off()
    columns["decode_start_s"][1] = 0.5  # before its arrival at 1.0
    trace = normalize(RawTrace(requests=_frame(columns), format_name="canonical"), "t.jsonl")
    assert any("'decode_start_s' decode start before arrival" in n for n in trace.notes)


def _frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    return pd.DataFrame(columns)


def test_a_fallback_prefill_on_the_decode_instance_stalls_its_decodes() -> None:
    # A is handed off p0 → d0 (a 0.01 s transfer: 0.01 / 0.11 s of TTFT, under 10 %) and decodes
    # every 20 ms with one 0.5 s gap;
    # B falls back to prefilling 4,000 tokens on d0, its first token inside A's gap.
    a_tokens = ([0.1] + [0.17 + 0.02 * i for i in range(10)]
                + [0.85 + 0.02 * i for i in range(10)])
    columns = {"arrival_s": [0.0, 0.3], "prompt_len": [100, 4000], "output_len": [21, 1],
               "first_token_s": [0.1, 0.6], "token_times_s": [a_tokens, [0.6]],
               "kv_transfer_s": [0.01, None], "decode_start_s": [0.11, 0.6],
               "prefill_instance": ["p0", "d0"], "decode_instance": ["d0", "d0"]}
    trace = make_trace(columns)
    doc = diagnose_trace(trace, settings=EngineSettings(kv_bytes_per_token=1000)).to_dict()
    axis = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    ids = {f["id"] for f in axis["findings"]}
    # the 0.5 s gap coincides with B's prefill: 0.48 s lost; 1 fallback of 2 requests
    assert {"D001", "D002", "D010"} <= ids
    assert axis["metrics"]["decode_seconds_lost"] == pytest.approx(0.48)
    assert axis["cause"] == "transfer_failures" and axis["score"] == pytest.approx(0.5)
    # The disaggregation entry prices the transfer this deployment measured: A's 0.01 s.
    entry = next(e for e in doc["ledger"] if e["remedy"] == "pd_disaggregation")
    adds = {q["name"]: q for q in entry["adds"]}
    assert adds["transfer_s_mean"]["value"] == pytest.approx(0.01)
    assert "kv_transfer_s (observed)" in adds["transfer_s_mean"]["basis"]
    assert any("already disaggregated" in c for c in entry["caveats"])


def test_the_panel_shows_the_placement_rows() -> None:
    from yaotu_trace.render.views.axes import metric_rows

    doc = diagnose_trace(make_trace(handed_off())).to_dict()
    rows = dict(metric_rows(next(a for a in doc["axes"] if a["name"] == "pd_interference")))
    assert rows["handed-off requests"] == "4"
    assert rows["KV transfer share of TTFT"] == "37.0 %"  # 1.0 / 2.7


def test_network_check_follows_the_placement_findings_on_the_axis() -> None:
    # GIVEN the handed-off requests, request 0 decoding 12 tokens on d0 with a 1.8 s gap while
    # the others' first tokens land (material interference) and a transfer that is 37 % of TTFT
    columns = handed_off() | {
        "output_len": [12, 3, 3, 3], "finish_s": [3.0, 2.0, 3.6, 4.0],
        "token_times_s": [[0.5, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9, 2.7, 2.72, 2.74, 2.76, 2.78],
                          [1.3, 1.4, 1.42], [2.6, 2.9, 2.92], [3.2, 3.6, 3.62]]}
    result = analyze_pd_interference(make_input(columns), thresholds())
    # THEN the network check (D004: no --model) weighs disaggregation after the placement
    # finding (D007), so the panel's transfer_ttft_share is the placement's Σ transfer / Σ TTFT
    assert result.rule_ids == ("D001", "D002", "D007", "D004")
    assert result.cause == "kv_transfer"
    shown = {e.name: e for h in reversed(result.hits) for e in h.evidence}
    assert shown["transfer_ttft_share"].comparison == ">="


def prefill_queued() -> dict[str, list[Any]]:
    """Four requests 1 s apart that wait 1.0 s for the one prefill instance, prefill in 0.4 s,
    move their KV in 0.1 s and decode at once on d0 for 0.5 s: ttft = decode_start − arrival =
    1.5 s each (Σ 6.0), prefill waits Σ 4.0 s (2/3 of TTFT), transfers Σ 0.4 s (under
    transfer_ttft_share), no decode wait."""
    arrival = [0.0, 1.0, 2.0, 3.0]
    return {
        "arrival_s": arrival,
        "prompt_len": [100, 200, 300, 400],
        "output_len": [3, 3, 3, 3],
        "scheduled_s": [a + 1.0 for a in arrival],
        "first_token_s": [a + 1.4 for a in arrival],
        "kv_transfer_s": [0.1] * 4,
        "decode_start_s": [a + 1.5 for a in arrival],
        "finish_s": [a + 2.0 for a in arrival],
        "prefill_instance": ["p0"] * 4,
        "decode_instance": ["d0"] * 4,
    }


def test_without_step_log_or_metrics_the_decode_pool_load_is_unknown_not_busy() -> None:
    # GIVEN the prefill pool queued (2/3 of TTFT) and only the request table
    result = analyze_pd_interference(make_input(prefill_queued()), thresholds())
    pm = result.metrics.placement
    assert pm is not None and pm.prefill_wait_share == pytest.approx(4.0 / 6.0)
    # THEN the decode pool's load is not taken from its decode intervals (busy most of the
    # time whatever the batch): it is unknown, and the axis says what would measure it
    assert pm.decode_busy_share is None
    assert "D009" not in result.rule_ids
    assert any(m.startswith("the decode pool's load: --metrics with kv_cache_usage_perc")
               for m in result.missing)
    # AND a queue that is most of TTFT is the bottleneck whatever the other pool's load (D011,
    # on the scale of Q001 and D008); the finding says the load that decides the remedy is
    # not measured
    assert result.rule_ids == ("D011",)
    assert result.status is Status.BOTTLENECK
    assert "decode pool's load is not measured" in result.hits[0].detail


def test_a_short_queue_with_the_other_pool_unmeasured_is_undecided_not_ok() -> None:
    # GIVEN the prefill pool queued a third of TTFT (over pool_wait_share, under
    # queue_share_of_ttft), a quick transfer, and nothing that measures the decode pool
    columns = prefill_queued()
    columns["scheduled_s"] = [a + 0.25 for a in columns["arrival_s"]]
    columns["first_token_s"] = [a + 0.65 for a in columns["arrival_s"]]
    columns["kv_transfer_s"] = [0.01] * 4
    columns["decode_start_s"] = [a + 0.66 for a in columns["arrival_s"]]
    result = analyze_pd_interference(make_input(columns), thresholds())
    # THEN whether the P:D ratio is off cannot be told: the axis is undecided, and says why
    assert result.metrics.placement.prefill_wait_share == pytest.approx(0.25 / 0.66)
    assert result.status is Status.INSUFFICIENT_DATA
    assert any("prefill pool's queue is 38 % of TTFT" in n for n in result.notes)


def test_decode_pool_load_from_per_instance_metrics() -> None:
    # GIVEN scrapes of d0 (its vLLM engine 0: labels instance=d0, engine=0 join as "d0/0",
    # read as d0) at KV usage 0.1, 0.2, 0.3 and of p0 at 0.9 (the prefill pool, left out)
    rows = []
    for t, usage in ((0.0, 0.1), (2.0, 0.2), (4.0, 0.3)):
        rows += [(t, "vllm:kv_cache_usage_perc", "instance=d0,engine=0", usage),
                 (t, "vllm:kv_cache_usage_perc", "instance=p0,engine=0", 0.9),
                 (t, "vllm:num_requests_running", "instance=d0,engine=0", 2.0)]
    inp = make_input(prefill_queued(), metrics=make_metrics(rows))
    result = analyze_pd_interference(inp, thresholds())
    pm = result.metrics.placement
    # THEN the decode pool's load is d0's mean KV usage, 0.2: idle next to a queued prefill
    # pool, so D009 says move a decode instance to prefill
    assert pm is not None and pm.decode_busy_share == pytest.approx(0.2)
    assert "metrics (decode pool: KV usage of 1 of 1 instance(s), KV usage at most 30 %)" in (
        pm.busy_source or "")
    assert "D009" in result.rule_ids
    assert evidence(result, "D009")["move_instances"].value == "decode → prefill"
    # AND with --max-num-seqs 4, running 2 fills half the seats, above the KV usage
    seats = make_input(prefill_queued(), metrics=make_metrics(rows), max_num_seqs=4)
    pm = analyze_pd_interference(seats, thresholds()).metrics.placement
    assert pm is not None and pm.decode_busy_share == pytest.approx(0.5)
    assert "KV usage and seats" in (pm.busy_source or "")
