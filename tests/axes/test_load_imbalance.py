"""Load imbalance across instances (rule Q010, `axes/queueing/imbalance.py`): hand-checked
numbers on a constructed two-instance case, the FCFS models, and the simulated 85/15 router
judged from the request table + step log and from per-instance metrics alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from diag_factories import evidence, make_input, make_metrics, thresholds

from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.axes.queueing.imbalance import (
    fcfs_waits_s,
    least_work_waits_s,
)
from yaotu_trace.data.instance_join import join_instance
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.diagnosis.diagnose import judge_trace
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.sim.generate import GenerateOptions, generate_requests
from yaotu_trace.sim.metrics_export import metrics_export
from yaotu_trace.sim.scenario import Scenario as SimScenario
from yaotu_trace.sim.summary import SimRun, run_scenario
from yaotu_trace.sim.workloads import WorkloadKind


def test_fcfs_waits_are_the_work_ahead_over_the_rate() -> None:
    # Three 10-token requests at t = 0 on a 10 tokens/s server wait 0, 1 and 2 s; one arriving
    # at 0.5 s behind a 10-token request waits the 0.5 s left of it; at 5 s it finds none.
    three = fcfs_waits_s(np.zeros(3), np.full(3, 10.0), 10.0)
    assert three.tolist() == [0.0, 1.0, 2.0]
    assert fcfs_waits_s(np.array([0.0, 0.5]), np.array([10.0, 10.0]), 10.0).tolist() == [0, 0.5]
    assert fcfs_waits_s(np.array([0.0, 5.0]), np.array([10.0, 10.0]), 10.0).tolist() == [0, 0]


def test_least_work_router_fills_the_emptier_instance() -> None:
    # Two 1-s requests at t = 0 go to instances 0 and 1 (no wait); a third at 0.5 s finds
    # 0.5 s ahead on both and takes instance 0 (the lower index): it waits 0.5 s.
    waits = least_work_waits_s(np.array([0.0, 0.0, 0.5]), np.full(3, 100.0), 100.0, 2)
    assert waits.tolist() == [0.0, 0.0, 0.5]


def test_instance_labels_join_instance_pod_and_engine() -> None:
    assert join_instance("engine=0,instance=i0", ()) == "i0/0"
    assert join_instance("pod=p1", ()) == "p1"
    assert join_instance("le=+Inf", ()) is None


def _two_instances() -> dict[str, list[object]]:
    """Instance a: requests at 0, 0.5, 1, 1.5 s served one at a time for 1 s each (scheduled
    0, 1, 2, 3); instance b: one request at 0 s. Every request is 90 + 10 tokens."""
    arrival = [0.0, 0.5, 1.0, 1.5, 0.0]
    scheduled = [0.0, 1.0, 2.0, 3.0, 0.0]
    return {
        "arrival_s": arrival,
        "scheduled_s": scheduled,
        "first_token_s": [s + 0.5 for s in scheduled],
        "finish_s": [s + 1.0 for s in scheduled],
        "prompt_len": [90] * 5,
        "output_len": [10] * 5,
        "instance": ["a", "a", "a", "a", "b"],
    }


def test_hand_checked_two_instances_are_load_imbalance() -> None:
    result = analyze_queueing(make_input(_two_instances()), thresholds(window_s=1.0))
    lb = result.metrics.load_balance
    a, b = lb.row("a"), lb.row("b")
    # Queue on a: 0 + 0.5 + 1 + 1.5 = 3 s of 3 + 4 × 0.5 = 5 s TTFT (0.6); b: none.
    assert a.queue_seconds == pytest.approx(3.0) and a.queue_share == pytest.approx(1.0)
    assert a.queue_share_of_ttft == pytest.approx(0.6) and b.queue_share_of_ttft == 0.0
    # Seats: the cluster runs 0–4 s; a serves 4 s, b 1 s, one at a time (cap 1, inferred).
    assert lb.seat_cap == 1.0 and lb.seat_cap_inferred
    assert a.seat_fill == pytest.approx(1.0) and b.seat_fill == pytest.approx(0.25)
    # μ: a serves 100 tokens in each 1-s window = 100 tokens/s. As routed, a's FCFS model
    # waits 0, 0.5, 1, 1.5 = 3 s (the measured queue). Least-loaded: a0 → 0, b0 → 1, a1 at
    # 0.5 s waits 0.5 (instance 0), a2 at 1 s finds instance 1 free (0), a3 at 1.5 s waits
    # 0.5: 1 s, so 1 − 1/3 = 2/3 vanishes (2 s). Round-robin in arrival order (a0, b0, a1,
    # a2, a3 → 0, 1, 0, 1, 0): instance 0 waits 0, 0.5, 0.5; instance 1 none: also 1 s.
    assert lb.service_rate_tokens_per_s == pytest.approx(100.0)
    assert lb.modelled_queue_seconds == pytest.approx(3.0)
    assert lb.vanish_share_least_loaded == pytest.approx(2 / 3)
    assert lb.vanish_share_even == pytest.approx(2 / 3)
    assert lb.queue_seconds_vanish_least_loaded == pytest.approx(2.0)
    assert (lb.queued_instance, lb.idle_instance) == ("a", "b")
    assert result.cause == "load_imbalance" and "Q010" in result.rule_ids
    ev = evidence(result, "Q010")
    assert ev["seat_fill[b]"].value == pytest.approx(0.25)
    assert ev["vanish_share_least_loaded"].passed


def test_a_modest_vanish_share_is_not_load_imbalance() -> None:
    # The same case with imbalance_vanish_share above the 2/3 routing would remove.
    result = analyze_queueing(make_input(_two_instances()),
                              thresholds(window_s=1.0, imbalance_vanish_share=0.7))
    assert "Q010" not in result.rule_ids and result.cause != "load_imbalance"


def test_one_instance_has_no_load_balance() -> None:
    cols = _two_instances()
    cols["instance"] = ["a"] * 5
    assert analyze_queueing(make_input(cols), thresholds()).metrics.load_balance is None


def test_disaggregated_instances_are_not_compared() -> None:
    # Prefill and decode instances do different work: an idle decode pool beside a busy
    # prefill pool is not a routing problem.
    cols = _two_instances()
    cols["prefill_instance"] = ["p0"] * 5
    cols["decode_instance"] = cols["instance"]
    assert analyze_queueing(make_input(cols), thresholds(window_s=1.0)
                            ).metrics.load_balance is None


def test_per_instance_step_log_gives_waiting_seats_and_preemptions() -> None:
    # a: four 1-s steps waiting 3, 2, 1, 0 (∫ = 6 request-s, waiting in 3 of 4) with 4 running
    # and one preemption; b: two 1-s steps, none waiting, 1 running. The cap is inferred (4):
    # seat fill 1 and 0.25. Work shares from the steps' tokens: a 4 × 4 = 16, b 2 → 16/18.
    steps = {"instance": ["a", "b", "a", "b", "a", "a"],
             "start_s": [0.0, 0.0, 1.0, 2.0, 2.0, 3.0], "end_s": [1.0, 1.0, 2.0, 3.0, 3.0, 4.0],
             "num_waiting": [3, 0, 2, 0, 1, 0], "num_running": [4, 1, 4, 1, 4, 4],
             "prefill_tokens": [0] * 6, "decode_tokens": [4, 1, 4, 1, 4, 4],
             "num_preempted": [0, 0, 1, 0, 0, 0]}
    inp = make_input({"arrival_s": [0.0, 0.5], "prompt_len": [10, 10], "output_len": [5, 5]},
                     steps=steps)
    lb = analyze_queueing(inp, thresholds()).metrics.load_balance
    assert lb.source == "steps" and lb.seat_cap == 4.0
    a, b = lb.row("a"), lb.row("b")
    assert (a.queue_seconds, a.waiting_share, a.seat_fill) == (6.0, 0.75, 1.0)
    assert (b.queue_seconds, b.waiting_share, b.seat_fill) == (0.0, 0.0, 0.25)
    assert (a.preemption_share, b.preemption_share) == (1.0, 0.0)
    assert a.work_share == pytest.approx(16 / 18) and a.queue_share == 1.0
    # Busy: a steps 4 s, b 2 s of the cluster's 0–4 s.
    assert (a.busy_share, b.busy_share) == (1.0, 0.5)


def test_per_instance_metrics_alone_give_waiting_and_seats() -> None:
    # Two engines scraped at 0, 1, 2 s: engine 0 waits 4, 4, 4 (∫ = 8 request-s over the
    # two 1-s intervals) with 8 running; engine 1 waits 0 with 2 running (cap 8: fill 0.25).
    rows = []
    for t in (0.0, 1.0, 2.0):
        rows += [(t, "vllm:num_requests_waiting", "engine=0", 4.0),
                 (t, "vllm:num_requests_running", "engine=0", 8.0),
                 (t, "vllm:num_requests_waiting", "engine=1", 0.0),
                 (t, "vllm:num_requests_running", "engine=1", 2.0)]
    inp = make_input({"arrival_s": [0.0, 1.0], "prompt_len": [10, 10], "output_len": [5, 5]},
                     metrics=make_metrics(rows))
    lb = analyze_queueing(inp, thresholds()).metrics.load_balance
    assert lb.source == "metrics"
    e0, e1 = lb.row("0"), lb.row("1")
    assert e0.queue_seconds == 8.0 and e0.waiting_share == 1.0 and e0.seat_fill == 1.0
    assert e1.queue_seconds == 0.0 and e1.waiting_share == 0.0 and e1.seat_fill == 0.25


# ---- the simulated two-instance deployment (issue: an 85/15 router) ----------------------

def _simulated(route: str) -> SimRun:
    """600 short chat requests at 20 req/s on two Llama-3.1-8B H100 instances of 16 seats;
    `weighted` sends 85 % to the first, `round-robin` alternates."""
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.DIAG_HEALTHY, requests=600,
                                     rate_per_s=20.0))
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "generated")
    options = ({"route_weights": "0.85,0.15"} if route == "weighted" else {"instances": 2})
    return run_scenario(trace, SimScenario(model="Llama-3.1-8B", gpu="H100-SXM",
                                           max_num_seqs=16, route=route, **options))


@pytest.fixture(scope="module")
def weighted() -> SimRun:
    return _simulated("weighted")


@pytest.fixture(scope="module")
def balanced() -> SimRun:
    return _simulated("round-robin")


def _trace(run: SimRun, *, steps: bool, drop: tuple[str, ...] = ()) -> Trace:
    requests = run.requests.drop(columns=list(drop))
    trace = normalize(RawTrace(requests=requests, format_name="canonical"), "simulated")
    return replace(trace, steps=StepLog.from_frame(run.steps, "steps")) if steps else trace


def test_the_85_15_router_queues_one_instance_only(weighted: SimRun) -> None:
    df = weighted.requests
    queue = (df["scheduled_s"] - df["arrival_s"]).groupby(df["instance"]).mean()
    shares = df["instance"].value_counts(normalize=True)
    assert shares["i0"] == pytest.approx(0.85) and shares["i1"] == pytest.approx(0.15)
    assert queue["i0"] > 1.0 and queue["i1"] < 0.05


def test_85_15_router_from_request_table_and_step_log_is_load_imbalance(
        weighted: SimRun) -> None:
    d = judge_trace(_trace(weighted, steps=True)).diagnosis
    assert d.verdict.principal_axis == "queueing"
    assert d.verdict.principal_cause == "load_imbalance"
    lb = d.axes["queueing"].metrics.load_balance
    assert (lb.queued_instance, lb.idle_instance) == ("i0", "i1")
    assert lb.row("i0").queue_share > 0.99 and lb.row("i1").seat_fill < 0.7
    assert lb.vanish_share_least_loaded > 0.5
    remedies = {e.remedy: e for e in d.ledger}
    assert {"route_by_load", "route_by_cache_and_load"} <= set(remedies)
    saved = next(q for q in remedies["route_by_load"].saves if q.name == "queue_seconds_vanish")
    assert saved.value == pytest.approx(lb.queue_seconds_vanish_least_loaded)
    lost = next(q for q in remedies["route_by_load"].adds if q.name == "prefix_hits_lost")
    assert lost.value is not None  # replayed: the trace has prompt token ids


def test_85_15_router_from_per_instance_metrics_is_load_imbalance(
        weighted: SimRun, tmp_path: Path) -> None:
    # The run's Prometheus export (one series per instance), read back as `--metrics` reads it;
    # the request table keeps its arrivals and lengths only: no instance, no engine timing.
    path = tmp_path / "metrics.csv"
    metrics_export(weighted.requests, weighted.steps).to_csv(path, index=False)
    timing = ("instance", "scheduled_s", "first_token_s", "finish_s", "token_times_s",
              "num_preemptions", "cached_tokens")
    d = judge_trace(_trace(weighted, steps=False, drop=timing),
                       metrics=read_metrics(path)).diagnosis
    q = d.axes["queueing"]
    assert q.metrics.load_balance.source == "metrics"
    assert [r.instance for r in q.metrics.load_balance.instances] == ["i0", "i1"]
    assert d.verdict.principal_axis == "queueing"
    assert d.verdict.principal_cause == "load_imbalance"


def test_a_balanced_round_robin_is_not_load_imbalance(balanced: SimRun, tmp_path: Path) -> None:
    d = judge_trace(_trace(balanced, steps=True)).diagnosis
    assert "Q010" not in d.axes["queueing"].rule_ids
    assert d.axes["queueing"].cause != "load_imbalance"
    path = tmp_path / "metrics.csv"
    metrics_export(balanced.requests, balanced.steps).to_csv(path, index=False)
    from_metrics = judge_trace(_trace(balanced, steps=False, drop=("instance",)),
                                  metrics=read_metrics(path)).diagnosis
    assert "Q010" not in from_metrics.axes["queueing"].rule_ids


def test_per_instance_stall_and_preemption_shares() -> None:
    # Three requests decode 20 tokens 20 ms apart, each with one gap after the 10th token:
    # 0.5 s on a's two requests, 0.6 s on b's. Median step 20 ms, stall threshold 5 × 20 ms:
    # three stalls, a holds 2/3 of them. Preemptions: a 3 + 1, b 0 → shares 1 and 0.
    def decoding(stall_s: float) -> list[float]:
        first = [0.02 * i for i in range(10)]
        return first + [first[-1] + stall_s + 0.02 * i for i in range(10)]

    cols = {"arrival_s": [0.0, 0.0, 0.0], "prompt_len": [10] * 3, "output_len": [20] * 3,
            "instance": ["a", "a", "b"], "scheduled_s": [0.0] * 3, "first_token_s": [0.0] * 3,
            "finish_s": [1.0] * 3, "num_preemptions": [3, 1, 0],
            "token_times_s": [decoding(0.5), decoding(0.5), decoding(0.6)]}
    from yaotu_trace.axes.pd_interference import analyze_pd_interference

    pd_metrics = analyze_pd_interference(make_input(cols), thresholds()).metrics
    assert pd_metrics.stall_share_by_instance == {"a": pytest.approx(2 / 3),
                                                  "b": pytest.approx(1 / 3)}
    lb = analyze_queueing(make_input(cols), thresholds()).metrics.load_balance
    assert (lb.row("a").preemptions, lb.row("a").preemption_share) == (4.0, 1.0)
    assert (lb.row("b").preemptions, lb.row("b").preemption_share) == (0.0, 0.0)


def test_per_instance_metrics_without_a_trace_name_the_imbalance(
        weighted: SimRun, balanced: SimRun, tmp_path: Path) -> None:
    # Telemetry alone (`trace diagnose --metrics FILE`): no arrivals, so routing cannot be
    # modelled, and the standing queue on i0 next to i1's free seats decides by itself; the
    # balanced run, whose two instances queue alike, is no imbalance.
    from yaotu_trace.commands.diagnose import diagnose
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    for run, expected in ((weighted, "load_imbalance"), (balanced, None)):
        path = tmp_path / f"{expected}.csv"
        metrics_export(run.requests, run.steps).to_csv(path, index=False)
        doc = diagnose(None, DiagnosisOptions(metrics=path)).to_dict()
        queueing = next(a for a in doc["axes"] if a["name"] == "queueing")
        if expected is None:
            assert queueing["cause"] != "load_imbalance"
            continue
        assert doc["verdict"]["principal_cause"] == expected
        q010 = next(f for f in queueing["findings"] if f["id"] == "Q010")
        vanish = next(e for e in q010["evidence"] if e["name"] == "vanish_share_least_loaded")
        assert vanish["value"] is None and vanish["passed"] is None
