"""The verdict and the ledger with a load imbalance (Q010): idle seats next to a queue are
examined before interference."""

from __future__ import annotations

from types import SimpleNamespace

from diag_factories import axis_result, blank_metrics

from yaotu_trace.axes.base import AxisName, AxisResult, Status
from yaotu_trace.axes.queueing import QueueingMetrics
from yaotu_trace.diagnosis.diagnose import verdict_of
from yaotu_trace.diagnosis.ledger import withheld_by


def _axes(stall_shares: dict[str, float] | None) -> dict[AxisName, AxisResult]:
    """Queueing a load imbalance (instance a queues, 30 % of latency); interference a larger
    bottleneck (90 % of decode time) whose stalls split as `stall_shares`."""
    return {
        AxisName.QUEUEING: axis_result(AxisName.QUEUEING, Status.BOTTLENECK, 0.3,
                                       "load_imbalance", load_balance=SimpleNamespace(
                                           queued_instance="a")),
        AxisName.KV_MEMORY: axis_result(AxisName.KV_MEMORY, Status.OK),
        AxisName.PREFIX_REUSE: axis_result(AxisName.PREFIX_REUSE, Status.OK),
        AxisName.PD_INTERFERENCE: axis_result(AxisName.PD_INTERFERENCE, Status.BOTTLENECK, 0.9,
                                              "prefill_interference",
                                              stall_share_by_instance=stall_shares),
    }


def test_stalls_on_the_queued_instance_are_a_symptom_of_the_imbalance() -> None:
    v = verdict_of(_axes({"a": 0.8, "b": 0.2}))
    assert v.principal_axis is AxisName.QUEUEING and v.principal_cause == "load_imbalance"
    assert "pd_interference is its symptom" in v.reason and "(Q010)" in v.reason
    assert v.summary.endswith("causes pd_interference")


def test_stalls_elsewhere_stay_a_separate_bottleneck() -> None:
    for shares in ({"a": 0.2, "b": 0.8}, None):
        v = verdict_of(_axes(shares))
        assert v.principal_axis is AxisName.QUEUEING
        assert "comes after the others in the flow" in v.reason
        assert "causes" not in v.summary


def test_disaggregation_waits_for_the_imbalance() -> None:
    reasons = withheld_by(_axes({"a": 0.8, "b": 0.2}))
    assert any("load imbalance (queueing, Q010) comes first" in r for r in reasons)


def test_route_hits_price_leaving_affinity_in_prefix_hits() -> None:
    # Four 40-token prompts share their first 32 tokens (two 16-token blocks) and all ran on
    # instance a; a fifth, unrelated, ran on b. As routed, requests 2–4 hit 32 tokens each: 96.
    # Least-loaded (fewest prompt tokens routed so far, ties to the lower instance) sends them
    # to a, b, a, b, a: only the third and fourth find their prefix cached there: 64, so 32
    # hit tokens are lost. Prefix-affinity follows the cached prefix (32/40 > 0.3): 96 again.
    from diag_factories import make_input

    from yaotu_trace.diagnosis.route_cost import route_hits

    shared = list(range(1000, 1032))
    prompts = [shared + [2000 + 10 * i + k for k in range(8)] for i in range(4)]
    prompts.append(list(range(5000, 5040)))
    inp = make_input({"request_id": [f"r{i}" for i in range(5)],
                      "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0], "prompt_len": [40] * 5,
                      "output_len": [4] * 5, "prompt_tokens": prompts,
                      "instance": ["a", "a", "a", "a", "b"]})
    hits = route_hits(inp)
    assert hits is not None
    assert (hits.current, hits.least_loaded, hits.prefix_affinity) == (96, 64, 96)
    assert hits.affinity_instance is not None and list(hits.affinity_instance[:4]) == [0] * 4


def test_more_replicas_wait_for_the_idle_seats() -> None:
    # A burst (Q001) on the instance that queues while another idles (Q010): the capacity
    # entry is priced but withheld; the two routing remedies carry the queue seconds.
    from diag_factories import make_input, thresholds

    from yaotu_trace.axes.base import Cause, RuleHit
    from yaotu_trace.diagnosis.ledger import build_ledger

    lb = SimpleNamespace(queued_instance="a", queue_seconds_vanish_least_loaded=8.0,
                         queue_seconds_vanish_even=6.0, modelled_queue_seconds=None,
                         service_rate_tokens_per_s=None, queue_seconds_total=10.0,
                         instances=(), basis="model")
    qm = blank_metrics(QueueingMetrics, load_balance=lb, peak_rho=2.0, mean_rho=1.0,
                       queue_seconds_in_overload=10.0, excess_offered_tokens=100.0)
    axes = _axes(None)
    axes[AxisName.QUEUEING] = AxisResult(
        axis=AxisName.QUEUEING, status=Status.BOTTLENECK, cause=Cause.LOAD_IMBALANCE, score=0.3,
        score_basis="s", sources=(), metrics=qm,
        hits=(RuleHit(rule_id="Q001", evidence=()), RuleHit(rule_id="Q010", evidence=())))
    axes[AxisName.PD_INTERFERENCE] = axis_result(AxisName.PD_INTERFERENCE, Status.OK)
    inp = make_input({"arrival_s": [0.0, 1.0], "prompt_len": [10, 10], "output_len": [5, 5],
                      "instance": ["a", "b"]})
    entries = {e.remedy: e for e in build_ledger(axes, inp, thresholds())}
    assert not entries["capacity_admission"].recommended
    assert "Q010" in entries["capacity_admission"].withheld_because[0]
    saves = {q.name: q.value for q in entries["route_by_load"].saves}
    assert saves == {"queue_seconds_vanish": 8.0, "queue_seconds_vanish_even": 6.0}
    # No prompt content: the hits a routing gives up cannot be replayed, and say why.
    lost = entries["route_by_load"].adds[0]
    assert lost.value is None and "prompt content" in lost.basis
    assert entries["route_by_cache_and_load"].saves[0].value is None
