"""A rule moves the verdict and the ledger by what it declares, with no other file naming it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from diag_factories import axis_result, make_input, thresholds

from yaotu_trace.axes.base import AxisName, AxisResult, Cause, RuleHit, Severity, Status
from yaotu_trace.axes.rule import Remedy, Rule, cause_of
from yaotu_trace.axes.rules import RULES
from yaotu_trace.diagnosis.diagnose import verdict_of
from yaotu_trace.diagnosis.ledger import build_ledger

# A rule that is no file: host stalls between steps, declared a dispatch cause whose remedy is
# overlap scheduling.
HOST_STALLS: Rule[object] = Rule(
    id="Q099", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK, title="Host stalls",
    trigger="t", evidence="e", fix="f", cause=Cause.DISPATCH_OVERHEAD,
    remedies=(Remedy.OVERLAP_SCHEDULING,), check=lambda facts, t, found: (),
)


def _axes(rule: Rule[object]) -> dict[AxisName, AxisResult]:
    """Queueing a concern with `rule` fired on it, and decode stalls the only bottleneck."""
    hits = (RuleHit(rule_id=rule.id, evidence=()),)
    queueing = replace(axis_result(AxisName.QUEUEING, Status.WARNING, 0.2,
                                   idle_while_waiting_s=3.0),
                       cause=cause_of([rule], hits), hits=hits)
    return {
        AxisName.QUEUEING: queueing,
        AxisName.KV_MEMORY: axis_result(AxisName.KV_MEMORY, Status.OK),
        AxisName.PREFIX_REUSE: axis_result(AxisName.PREFIX_REUSE, Status.OK),
        AxisName.PD_INTERFERENCE: axis_result(AxisName.PD_INTERFERENCE, Status.BOTTLENECK, 0.9,
                                              "prefill_interference"),
    }


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RULES, HOST_STALLS.id, HOST_STALLS)


@pytest.mark.usefixtures("catalog")
def test_a_new_rule_prices_the_remedy_it_declares() -> None:
    inp = make_input({"arrival_s": [0.0, 1.0], "prompt_len": [10, 10], "output_len": [5, 5]})
    entries = build_ledger(_axes(HOST_STALLS), inp, thresholds())
    assert [(e.remedy, e.triggered_by) for e in entries] == [
        (Remedy.OVERLAP_SCHEDULING, ("Q099",))]
    assert entries[0].saves[0].value == 3.0


@pytest.mark.usefixtures("catalog")
def test_a_new_rule_moves_the_verdict_by_the_cause_it_declares() -> None:
    v = verdict_of(_axes(HOST_STALLS))
    # Stalls behind host dispatch are queueing's symptom, whichever rule found the dispatch.
    assert v.principal_axis is AxisName.QUEUEING and v.principal_cause is Cause.DISPATCH_OVERHEAD
    assert "the gaps are host dispatch time (Q003, Q099)" in v.reason


@pytest.mark.usefixtures("catalog")
def test_a_rule_that_declares_nothing_moves_nothing() -> None:
    quiet = replace(HOST_STALLS, cause=None, remedies=())
    RULES[quiet.id] = quiet
    inp = make_input({"arrival_s": [0.0, 1.0], "prompt_len": [10, 10], "output_len": [5, 5]})
    axes = _axes(quiet)
    assert build_ledger(axes, inp, thresholds()) == ()
    assert verdict_of(axes).principal_axis is AxisName.PD_INTERFERENCE
