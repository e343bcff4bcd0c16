"""Diagnosis of fleets: a short pool of a disaggregated run and prefix lost to routing are
bottlenecks when they dominate, the decode queue is queueing, the P:D move is priced, and a
healthy balanced fleet gets no principal and no warning.

The hand-built cases work their numbers out in the comments. The simulated ones (marked slow:
each is judged from the request table, with the step log and with the metrics export) are the
scenarios of docs/diagnose.md (#disaggregated-serving, #many-instances): Llama-3.1-8B on H100
instances of the step simulator, `trace simulate --pd`, `--instances`, `--route`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diag_factories import axis_result, evidence, make_input, thresholds

from yaotu_trace.axes.base import AxisName, Status
from yaotu_trace.axes.kv_memory import analyze_kv_memory
from yaotu_trace.axes.pd_interference import analyze_pd_interference
from yaotu_trace.axes.pd_interference.metrics import InterferenceMetrics
from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.data.handoff import client_first_token_s, decode_queue_s
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.diagnosis.diagnose import Diagnosis, judge_trace, verdict_of
from yaotu_trace.diagnosis.pool_move import pool_move
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.sim.generate import GenerateOptions, generate_requests
from yaotu_trace.sim.metrics_export import metrics_export
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import SimRun, run_scenario
from yaotu_trace.sim.workloads import WorkloadKind


def decode_starved() -> dict[str, list[Any]]:
    """Four requests prefilled on p0 or p1, decoded on d0 after a long wait for a seat.

    Per request: prefill wait (scheduled − arrival) 0, 0, 0.1, 0; transfer 0.1 each; decode
    wait (decode_start − first_token − transfer) 0.4, 1.4, 2.3, 3.4 (Σ 7.5 s); client TTFT
    (decode_start − arrival) 1, 2, 3, 4 (Σ 10 s): the decode queue is 75 % of TTFT.
    """
    return {
        "arrival_s": [0.0, 1.0, 2.0, 3.0],
        "prompt_len": [100, 100, 100, 100],
        "output_len": [10, 10, 10, 10],
        "scheduled_s": [0.0, 1.0, 2.1, 3.0],
        "first_token_s": [0.5, 1.5, 2.6, 3.5],
        "kv_transfer_s": [0.1, 0.1, 0.1, 0.1],
        "decode_start_s": [1.0, 3.0, 5.0, 7.0],
        "finish_s": [3.0, 5.0, 7.0, 9.0],
        "prefill_instance": ["p0", "p1", "p0", "p1"],
        "decode_instance": ["d0"] * 4,
        "instance": ["d0"] * 4,
    }


def test_handoff_gives_the_client_ttft_and_the_decode_queue() -> None:
    req = make_input(decode_starved()).requests
    assert client_first_token_s(req).tolist() == [1.0, 3.0, 5.0, 7.0]
    assert decode_queue_s(req) == pytest.approx([0.4, 1.4, 2.3, 3.4])


def test_the_decode_queue_is_queueing_the_user_feels() -> None:
    # queue = prefill wait + decode wait = 0.4, 1.4, 2.4, 3.4 (Σ 7.6 s) over client TTFT
    # 1, 2, 3, 4 (Σ 10 s): 76 %, not the prefill worker's 0.1 / 2.1.
    m = analyze_queueing(make_input(decode_starved()), thresholds()).metrics
    assert m.queue_share_of_ttft == pytest.approx(7.6 / 10.0)
    assert m.queue_seconds_total == pytest.approx(7.6)


def test_a_pool_queue_of_half_of_ttft_is_the_bottleneck() -> None:
    # decode wait 7.5 / 10 = 0.75 ≥ queue_share_of_ttft 0.5; the prefill pool's load from the
    # request intervals [scheduled, first token) per instance: p0 0.5 + 0.5, p1 0.5 + 0.5 over
    # 2 × the span 9 s = 0.111 ≤ pool_idle_busy 0.5.
    result = analyze_pd_interference(make_input(decode_starved()), thresholds())
    assert result.status is Status.BOTTLENECK and result.cause == "pd_ratio"
    assert {"D009", "D011"} <= set(result.rule_ids)
    ev = evidence(result, "D011")
    assert ev["decode_wait_share"].value == pytest.approx(0.75)
    assert ev["prefill_busy_share"].value == pytest.approx(2.0 / 18.0)
    assert ev["move_instances"].value == "prefill → decode"
    assert result.score == pytest.approx(0.75)
    # Below half of TTFT the short pool is a warning only (D009).
    warn = analyze_pd_interference(make_input(decode_starved()),
                                   thresholds(queue_share_of_ttft=0.8))
    assert warn.status is Status.WARNING and "D011" not in warn.rule_ids


def test_a_short_pool_next_to_one_of_unmeasured_load_is_still_the_bottleneck() -> None:
    # The decode pool's request-interval load is an upper bound: above pool_idle_busy it
    # measures nothing. D009 needs the other pool idle; D011 says the load is unknown.
    cols = decode_starved()
    cols["decode_start_s"] = [0.6] * 4  # decodes start at once: no decode queue…
    cols["finish_s"] = [9.0] * 4  # …and the decode instance is never idle
    cols["scheduled_s"] = [0.0, 1.5, 3.0, 4.5]  # but the prefill pool queues
    cols["first_token_s"] = [0.5, 2.0, 3.5, 5.0]
    cols["decode_start_s"] = [0.6, 2.1, 3.6, 5.1]
    result = analyze_pd_interference(make_input(cols), thresholds())
    assert "D011" in result.rule_ids and "D009" not in result.rule_ids
    hit = next(h for h in result.hits if h.rule_id == "D011")
    assert "not measured" in hit.detail


def test_queueing_from_a_short_pool_is_its_symptom() -> None:
    axes = {
        AxisName.QUEUEING: axis_result(AxisName.QUEUEING, Status.BOTTLENECK, 0.9,
                                       "arrival_burst"),
        AxisName.KV_MEMORY: axis_result(AxisName.KV_MEMORY, Status.OK),
        AxisName.PREFIX_REUSE: axis_result(AxisName.PREFIX_REUSE, Status.OK),
        AxisName.PD_INTERFERENCE: axis_result(AxisName.PD_INTERFERENCE, Status.BOTTLENECK, 0.75,
                                              "pd_ratio"),
    }
    v = verdict_of(axes)
    assert (v.principal_axis, v.principal_cause) == ("pd_interference", "pd_ratio")
    assert v.summary == ("verdict: pd_interference (pd_ratio): 75.0 % of TTFT queued for the "
                         "short pool; causes queueing")
    # A load imbalance has a root of its own.
    axes[AxisName.QUEUEING] = axis_result(AxisName.QUEUEING, Status.BOTTLENECK, 0.9,
                                          "load_imbalance")
    assert verdict_of(axes).principal_axis == "queueing"


def test_moving_an_instance_is_priced_by_the_pool_queue_model() -> None:
    # The decode pool: one instance, at most 1 request at once (d0 runs one at a time), so one
    # seat-second per second; KV ready at first token + 0.1 = 0.6, 1.6, 2.7, 3.6 with 2 s of
    # decode each: modelled waits 0, 1, 1.9, 3 (Σ 5.9 s) on one instance; on two (2 seat-s/s,
    # each request's 2 s done in 1 s) only the last waits, 0.1 s behind the third (in from
    # 2.7 s to 3.7 s). The measured 7.5 s × 0.1 / 5.9.
    inp = make_input(decode_starved())
    pm = analyze_pd_interference(inp, thresholds()).metrics
    assert isinstance(pm, InterferenceMetrics) and pm.placement is not None
    move = pool_move(inp, pm.placement, "decode")
    assert move is not None and move.moved
    assert move.taker.rate_per_instance == 1.0
    assert move.taker.wait_s == pytest.approx(7.5)
    assert move.taker.wait_after_s == pytest.approx(7.5 * 0.1 / 5.9)
    # The prefill pool gives one of its two instances: the same work on one, busy × 2.
    assert move.donor.busy_after == pytest.approx(2 * 2.0 / 18.0)


def test_ledger_names_the_move_with_its_cost() -> None:
    from yaotu_trace.diagnosis.diagnose import run_diagnosis

    d = run_diagnosis(make_input(decode_starved()), thresholds())
    entry = next(e for e in d.ledger if e.remedy == "move_instances")
    assert entry.triggered_by == ("D009", "D011")
    saves = {q.name: q for q in entry.saves}
    adds = {q.name: q for q in entry.adds}
    assert saves["decode_wait_seconds"].value == pytest.approx(7.5 - 7.5 * 0.1 / 5.9)
    assert "move 1 instance from prefill to decode" in saves["decode_wait_seconds"].basis
    assert adds["prefill_busy_after"].value == pytest.approx(4.0 / 18.0)
    assert "+100 %" in adds["prefill_busy_after"].basis


def test_measured_kv_usage_below_full_overrules_the_demand_estimate() -> None:
    # Two requests held from scheduled_s to finish_s by the estimate: 2 × 112 tokens (7 blocks
    # of 16) > the pool of 160 tokens; the step log shows the pool 57 % full at most.
    cols = {"arrival_s": [0.0, 0.0], "prompt_len": [100, 100], "output_len": [12, 12],
            "scheduled_s": [0.0, 0.0], "first_token_s": [0.1, 0.1], "finish_s": [1.0, 1.0]}
    steps = {"start_s": [0.0, 0.5], "end_s": [0.5, 1.0], "kv_blocks_used": [40, 57],
             "kv_blocks_total": [100, 100], "num_preempted": [0, 0]}
    assert "K004" in analyze_kv_memory(make_input(cols, kv_capacity_tokens=160),
                                       thresholds()).rule_ids
    judged = analyze_kv_memory(make_input(cols, steps=steps, kv_capacity_tokens=160),
                               thresholds())
    assert judged.metrics.kv_usage_max == pytest.approx(0.57)
    assert "K004" not in judged.rule_ids


def test_wait_for_the_next_step_on_an_even_fleet_is_no_imbalance() -> None:
    # Two instances with the same work: i0's requests wait 0.05 s of a 0.2 s TTFT (25 %, the
    # wait for a step boundary), i1's none; latency 1.2 s each, so 2 % of it queued.
    n = 40
    cols = {"arrival_s": [0.5 * k for k in range(n)], "prompt_len": [100] * n,
            "output_len": [20] * n, "instance": [f"i{k % 2}" for k in range(n)]}
    cols["scheduled_s"] = [a + (0.05 if k % 2 == 0 else 0.0)
                           for k, a in enumerate(cols["arrival_s"])]
    cols["first_token_s"] = [a + 0.2 for a in cols["arrival_s"]]
    cols["finish_s"] = [a + 1.2 for a in cols["arrival_s"]]
    result = analyze_queueing(make_input(cols), thresholds())
    lb = result.metrics.load_balance
    assert lb is not None and lb.row("i0").work_share == pytest.approx(0.5)
    assert "Q010" not in result.rule_ids
    assert result.status is Status.OK


# ---- simulated fleets ------------------------------------------------------------------

SOURCES = ("table", "steps", "metrics")


def _simulate(kind: WorkloadKind, requests: int, rate: float, seed: int,
              tenants: int | None = None, **sim: Any) -> SimRun:
    table = generate_requests(GenerateOptions(scenario=kind, requests=requests,
                                              rate_per_s=rate, seed=seed, tenants=tenants))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "generated")
    return run_scenario(trace, Scenario(model="Llama-3.1-8B", gpu="H100-SXM", **sim))


def _judge(run: SimRun, source: str, tmp_path: Path) -> Diagnosis:
    """The run judged from the request table alone, with its step log, or with its export."""
    trace: Trace = normalize(RawTrace(requests=run.requests, format_name="canonical"), "sim")
    metrics = None
    if source == "steps":
        trace = replace(trace, steps=StepLog.from_frame(run.steps, "steps"))
    if source == "metrics":
        path = tmp_path / "metrics.csv"
        metrics_export(run.requests, run.steps).to_csv(path, index=False)
        metrics = read_metrics(path)
    return judge_trace(trace, metrics=metrics).diagnosis


@pytest.fixture(scope="module")
def starved_decode() -> SimRun:
    """200 chat requests at 20 req/s on 3 prefill : 1 decode instances of 16 seats."""
    return _simulate(WorkloadKind.CHAT, 200, 20.0, 1, pd="3:1", max_num_seqs=16)


@pytest.fixture(scope="module")
def starved_prefill() -> SimRun:
    """100 long-prefill requests at 8 req/s on 1 prefill : 3 decode instances."""
    return _simulate(WorkloadKind.LONG_PREFILL, 100, 8.0, 1, pd="1:3")


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_decode_starved_split_is_a_pd_ratio_bottleneck(starved_decode: SimRun, source: str,
                                                       tmp_path: Path) -> None:
    d = _judge(starved_decode, source, tmp_path)
    assert (d.verdict.principal_axis, d.verdict.principal_cause) == ("pd_interference",
                                                                     "pd_ratio")
    pm = d.axes[AxisName.PD_INTERFERENCE].metrics.placement
    assert pm.decode_wait_share > 0.9 and pm.prefill_busy_share < 0.5
    assert "Q000" not in {f.id for f in d.findings}  # Little's law holds with the decode queue
    move = next(e for e in d.ledger if e.remedy == "move_instances")
    assert "move 1 instance from prefill to decode" in move.saves[0].basis
    assert move.saves[0].value > 0


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_prefill_starved_split_is_a_pd_ratio_bottleneck(starved_prefill: SimRun, source: str,
                                                        tmp_path: Path) -> None:
    d = _judge(starved_prefill, source, tmp_path)
    assert (d.verdict.principal_axis, d.verdict.principal_cause) == ("pd_interference",
                                                                     "pd_ratio")
    ids = {f.id for f in d.findings}
    # One prefill instance holds every prompt's cache: nothing is lost to routing.
    assert not ids & {"P003", "P007", "Q000", "K004"}
    move = next(e for e in d.ledger if e.remedy == "move_instances")
    assert "move 1 instance from decode to prefill" in move.saves[0].basis


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_random_routing_of_sessions_is_a_routing_bottleneck(source: str,
                                                            tmp_path: Path) -> None:
    run = _simulate(WorkloadKind.CHAT, 400, 4.0, 2, tenants=16, instances=4, route="random")
    d = _judge(run, source, tmp_path)
    assert (d.verdict.principal_axis, d.verdict.principal_cause) == ("prefix_reuse", "routing")
    pm = d.axes[AxisName.PREFIX_REUSE].metrics
    assert pm.affinity_gain_share >= 0.25
    assert pm.affinity_hit_rate > pm.achievable_hit_rate
    assert "P007" in {f.id for f in d.findings}
    entry = next(e for e in d.ledger if e.remedy == "cache_aware_routing")
    assert entry.saves[0].value == pytest.approx(pm.affinity_gain_share * pm.prompt_tokens)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_healthy_balanced_fleet_has_no_principal_and_no_warning(seed: int,
                                                                  tmp_path: Path) -> None:
    # Four instances behind a least-loaded router at a quarter of their load (diag-healthy's
    # 1 req/s each); before Q010 asked for a queue that matters, seeds 1, 3 and 4 named
    # load_imbalance from the request table at 0.2 % of latency queued.
    run = _simulate(WorkloadKind.DIAG_HEALTHY, 300, 4.0, seed, instances=4,
                    route="least-loaded")
    for source in SOURCES:
        d = _judge(run, source, tmp_path)
        assert d.verdict.principal_axis is None, (source, d.verdict.summary)
        bad = [f.id for f in d.findings if f.severity in ("warning", "bottleneck")]
        assert bad == [], (source, bad)


def test_the_metrics_export_joins_the_trace_instances_through_an_engine_label(
        tmp_path: Path) -> None:
    # vLLM v1 labels each engine `engine="0"` beside the scrape's `instance`: `i0/0` is the
    # trace's `i0` (docs/inputs.md). The table keeps only arrivals, lengths and instances.
    run = _simulate(WorkloadKind.DIAG_HEALTHY, 60, 8.0, 1, instances=2, route="round-robin")
    path = tmp_path / "metrics.csv"
    export = metrics_export(run.requests, run.steps)
    export["labels"] = export["labels"].str.replace('instance="', 'engine="0",instance="')
    export.to_csv(path, index=False)
    keep = ["request_id", "arrival_s", "prompt_len", "output_len", "instance"]
    trace = normalize(RawTrace(requests=run.requests[keep], format_name="canonical"), "sim")
    d = judge_trace(trace, metrics=read_metrics(path)).diagnosis
    lb = d.axes[AxisName.QUEUEING].metrics.load_balance
    assert lb is not None
    assert [r.instance for r in lb.instances] == ["i0", "i1"]
    assert all(r.running_mean is not None for r in lb.instances)
    assert np.isclose(sum(r.work_share for r in lb.instances), 1.0)


@pytest.mark.slow
def test_a_sick_instance_that_takes_most_of_the_traffic_is_found(tmp_path: Path) -> None:
    # Two instances, 65 % of the requests to i0 (`--route weighted`); every 8th request on i0
    # fails mid-stream (status error, a CUDA fault), one on i1. Against the whole trace i0
    # fails 1.5 × as often (under the lift of 2); against its peer, ~10 ×: Q008 names it.
    run = _simulate(WorkloadKind.DIAG_HEALTHY, 240, 4.0, 1, route="weighted",
                    route_weights="0.65,0.35")
    req = run.requests.copy()
    on_i0 = np.flatnonzero((req["instance"] == "i0").to_numpy())[::8]
    on_i1 = np.flatnonzero((req["instance"] == "i1").to_numpy())[:1]
    status = np.full(len(req), "ok", dtype=object)
    status[np.concatenate([on_i0, on_i1])] = "error"
    req["status"] = status
    for source in SOURCES:
        d = _judge(replace(run, requests=req), source, tmp_path)
        q008 = next(f for f in d.findings if f.id == "Q008")
        ev = {e.name: e.value for e in q008.evidence}
        assert ev["worst_instance"] == "i0"
        assert ev["worst_instance_failure_lift"] > 2.0


@pytest.mark.slow
def test_the_disaggregated_run_of_the_docs_prints_what_they_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/diagnose.md, "A disaggregated run end to end": its commands, run as written, print
    the verdict, the pools and the priced move the page shows."""
    import re
    import shlex

    from conftest import run_cli

    doc = (Path(__file__).resolve().parents[2] / "docs" / "diagnose.md").read_text()
    section = doc.split("### A disaggregated run end to end", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    commands = [shlex.split(line) for line in re.sub(r"\\\n\s*", "", block).splitlines()
                if line.startswith("trace ")]
    verdict = next(line.strip() for line in block.splitlines() if "verdict:" in line)
    monkeypatch.chdir(tmp_path)  # the commands name their files in the working folder
    for argv in commands[:2]:
        code, _, err = run_cli([*argv[1:], "-q"], capsys)
        assert code == 0, err
    code, out, err = run_cli([*commands[2][1:], "-q", "--no-charts"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == verdict
    printed = " ".join(out.replace("│", " ").split())
    for shown in ("prefill 3 0.0 % 20.0 %", "decode 1 99.7 % 5.8 %",
                  "wait 4,647.5 s → 609.4 s (-87 %)", "prefill busy 20.0 % → 30.0 % (+50 %)"):
        assert shown in " ".join(section.split())
        assert shown in printed
