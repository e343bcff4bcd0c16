"""The verdict's decision flow, findings with evidence, and the remedy ledger's arithmetic."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from diag_factories import axis_result, burst_columns, make_input, make_trace, thresholds

from yaotu_trace.axes.base import AxisName, AxisResult, EngineSettings, Status
from yaotu_trace.commands.diagnose import diagnose_trace as diagnose
from yaotu_trace.diagnosis.diagnose import run_diagnosis, verdict_of
from yaotu_trace.render import OutputFormat, render


def axes(**given: tuple[Status, float | None, str | None]) -> dict[AxisName, AxisResult]:
    out = {}
    for name in AxisName:
        status, score, cause = given.get(str(name), (Status.OK, 0.0, None))
        out[name] = axis_result(name, status, score, cause)
    return out


def test_verdict_highest_scoring_bottleneck_wins() -> None:
    v = verdict_of(axes(queueing=(Status.BOTTLENECK, 0.4, "arrival_burst"),
                        prefix_reuse=(Status.BOTTLENECK, 0.6, "cache_keys")))
    assert v.principal_axis is AxisName.PREFIX_REUSE
    assert v.fix_order == (AxisName.QUEUEING, AxisName.PREFIX_REUSE)
    assert v.ranking[0].axis is AxisName.PREFIX_REUSE


def test_verdict_kv_admission_queueing_defers_to_kv_memory() -> None:
    v = verdict_of(axes(queueing=(Status.BOTTLENECK, 0.8, "kv_admission"),
                        kv_memory=(Status.BOTTLENECK, 0.1, "kv_capacity")))
    assert v.principal_axis is AxisName.KV_MEMORY
    assert "Q005" in v.reason and "capacity budget" in v.reason
    assert v.fix_order[0] is AxisName.KV_MEMORY


@pytest.mark.parametrize(("cause", "says", "not_says"), [
    ("capacity", "a tier below the GPU pool", "fix cache keys"),
    ("cache_keys", "salts", "a tier below"),
    ("routing", "route by prefix", "cache keys"),
    ("prefix_recompute", "fix cache keys and routing", "a tier below"),
])
def test_verdict_prefix_advice_follows_where_the_reuse_is_lost(
        cause: str, says: str, not_says: str) -> None:
    # Reuse lost to capacity is not mended by cache keys (the Mooncake conversation trace on a
    # 70B deployment said so before); without the waterfall the flow's own advice stands.
    v = verdict_of(axes(prefix_reuse=(Status.BOTTLENECK, 0.3, cause)))
    assert v.principal_axis is AxisName.PREFIX_REUSE
    assert says in v.reason and not_says not in v.reason


def test_verdict_interference_only_when_nothing_else_is_a_bottleneck() -> None:
    both = verdict_of(axes(pd_interference=(Status.BOTTLENECK, 0.9, "prefill_interference"),
                           kv_memory=(Status.BOTTLENECK, 0.05, "kv_capacity")))
    assert both.principal_axis is AxisName.KV_MEMORY
    assert "comes after" in both.reason
    alone = verdict_of(axes(pd_interference=(Status.BOTTLENECK, 0.2, "prefill_interference")))
    assert alone.principal_axis is AxisName.PD_INTERFERENCE
    assert "chunked prefill" in alone.reason


def test_verdict_without_bottleneck_names_the_largest_warning_and_undecided_axes() -> None:
    v = verdict_of(axes(queueing=(Status.WARNING, 0.3, None),
                        pd_interference=(Status.INSUFFICIENT_DATA, None, None)))
    assert v.principal_axis is None
    assert "queueing" in v.reason and "undecided: pd_interference" in v.reason
    assert v.insufficient_data == (AxisName.PD_INTERFERENCE,)


def interference_trace_columns() -> dict:
    first = [0.02 * i for i in range(10)]
    tokens = first + [first[-1] + 0.5 + 0.02 * i for i in range(10)]
    return {"arrival_s": [0.0, 0.1], "prompt_len": [1000, 3000], "output_len": [20, 1],
            "instance": ["a", "a"], "first_token_s": [0.0, 0.4],
            "token_times_s": [tokens, [0.4]]}


def test_ledger_prices_chunking_and_disaggregation_from_the_trace() -> None:
    inp = make_input(interference_trace_columns(), kv_bytes_per_token=1000, link_gbps=8.0)
    d = run_diagnosis(inp, thresholds(chunk_tokens=512, link_efficiency=1.0,
                                      transfer_latency_s=0.0))
    entries = {e.remedy: e for e in d.ledger}
    chunk = {q.name: q.value for q in entries["chunked_prefill"].adds}
    # 1000 → 2 chunks (1 extra step), 3000 → 6 chunks (5 extra steps).
    assert chunk["extra_steps"] == 6.0
    assert chunk["prefix_kv_reread_bytes"] == pytest.approx(1000 * (1000**2 + 3000**2) / 1024)
    assert chunk["prompts_with_higher_ttft"] == 2.0
    pd = {q.name: q.value for q in entries["pd_disaggregation"].adds}
    assert pd["network_bytes"] == 4_000_000.0  # Σ prompt × 1000 B
    assert pd["transfer_seconds_total"] == pytest.approx(4_000_000 / 1e9)  # 8 Gb/s = 1 GB/s
    saves = {q.name: q.value for q in entries["pd_disaggregation"].saves}
    assert saves["decode_seconds_lost"] == pytest.approx(0.48)
    names = {q.name for q in entries["pd_disaggregation"].adds}
    assert {"routing", "failure_fallback"} <= names
    # Mean transfer 2 ms against mean TTFT 0.15 s (1.3 %) and a light link load: D003.
    ids = [f.id for f in d.findings]
    assert "D003" in ids and "D004" not in ids
    assert d.verdict.principal_axis is AxisName.PD_INTERFERENCE


def test_ledger_network_check_fails_without_kv_bytes() -> None:
    d = run_diagnosis(make_input(interference_trace_columns()), thresholds())
    pd = next(e for e in d.ledger if e.remedy == "pd_disaggregation")
    assert {q.name: q.value for q in pd.adds}["network_bytes"] is None
    assert "D004" in [f.id for f in d.findings]
    finding = next(f for f in d.findings if f.id == "D004")
    assert "--model" in finding.message


def test_ledger_larger_kv_pool_counts_recompute_and_flops() -> None:
    columns = {"arrival_s": [0.0, 1.0], "scheduled_s": [0.0, 1.0], "first_token_s": [0.5, 1.5],
               "finish_s": [5.0, 6.0], "prompt_len": [100, 100], "output_len": [20, 20],
               "num_preemptions": [0, 3]}
    steps = {"start_s": [0.0, 1.0], "end_s": [0.5, 1.5], "kv_blocks_used": [99, 99],
             "kv_blocks_total": [100, 100], "num_preempted": [1, 2]}
    inp = make_input(columns, steps=steps, active_params=1_000_000)
    d = run_diagnosis(inp, thresholds())
    pool = next(e for e in d.ledger if e.remedy == "larger_kv_pool")
    saves = {q.name: q.value for q in pool.saves}
    assert saves["recomputed_prefill_tokens"] == 330.0  # 3 × (100 + 10)
    assert saves["prefill_flops"] == 2 * 1_000_000 * 330.0
    assert d.verdict.principal_axis is AxisName.KV_MEMORY
    assert d.findings[0].severity == "bottleneck"


def test_findings_carry_evidence_and_sorted_by_severity() -> None:
    d = run_diagnosis(make_input(interference_trace_columns()), thresholds())
    severities = [f.severity for f in d.findings]
    assert severities == sorted(severities, key=["bottleneck", "warning", "info"].index)
    d002 = next(f for f in d.findings if f.id == "D002")
    assert d002.axis is AxisName.PD_INTERFERENCE
    assert "interference_share" in d002.message and "(>= interference_dominant 0.15)" in \
        d002.message
    assert any(e.threshold == 0.15 for e in d002.evidence)


def test_diagnose_report_sections_render_in_every_format() -> None:
    trace = make_trace(interference_trace_columns())
    report = diagnose(trace, settings=EngineSettings(kv_bytes_per_token=1000),
                      thresholds=thresholds(stall_factor=4))
    doc = json.loads(render(report, OutputFormat.JSON))
    assert [a["name"] for a in doc["axes"]] == ["queueing", "kv_memory", "prefix_reuse",
                                                "pd_interference"]
    assert {"verdict", "ledger", "findings"} <= set(doc)
    assert doc["config"]["thresholds_overridden"] == {"stall_factor": 4.0}
    f = doc["findings"][0]
    assert set(f) >= {"id", "severity", "axis", "title", "message", "evidence"}
    table = render(report, OutputFormat.TABLE, width=100)
    assert table.startswith("verdict: pd_interference") and "D002" in table
    markdown = render(report, OutputFormat.MARKDOWN)
    assert "### Verdict" in markdown and "| pd_disaggregation | adds | network_bytes |" in markdown


def test_every_status_is_reachable_on_every_axis() -> None:
    # Collected from the axis tests' scenarios: the statuses each axis produced.
    seen = {
        AxisName.PD_INTERFERENCE: {
            run_diagnosis(make_input(interference_trace_columns()), thresholds()).axes[
                AxisName.PD_INTERFERENCE].status,
            run_diagnosis(make_input(interference_trace_columns()),
                          thresholds(interference_dominant=0.9)).axes[
                AxisName.PD_INTERFERENCE].status,
            run_diagnosis(make_input(interference_trace_columns()),
                          thresholds(stall_factor=100)).axes[AxisName.PD_INTERFERENCE].status,
        },
    }
    assert seen[AxisName.PD_INTERFERENCE] == {Status.BOTTLENECK, Status.WARNING, Status.OK}
    empty = run_diagnosis(make_input({"arrival_s": [0.0], "prompt_len": [1], "output_len": [1]}))
    assert {a.status for a in empty.axes.values()} == {Status.INSUFFICIENT_DATA}
    assert replace(empty.axes[AxisName.QUEUEING]).missing


def test_ledger_capacity_admission_for_an_arrival_burst() -> None:
    d = run_diagnosis(make_input(burst_columns()), thresholds())
    assert d.verdict.principal_axis is AxisName.QUEUEING
    assert d.verdict.principal_cause == "arrival_burst"
    entry = next(e for e in d.ledger if e.remedy == "capacity_admission")
    assert entry.triggered_by == ("Q001",)
    saves = {q.name: q.value for q in entry.saves}
    adds = {q.name: q.value for q in entry.adds}
    assert saves["queue_seconds_in_overload"] == pytest.approx(sum(0.95 * k for k in range(20)))
    assert adds["extra_capacity_share"] == pytest.approx(3.0)  # peak rho 4
    assert adds["rejected_or_deferred_requests"] == pytest.approx(15.0)  # 1650 tokens / 110
    assert not any(e.remedy in ("chunked_prefill", "pd_disaggregation") for e in d.ledger)


def test_console_view_is_deterministic_and_fits_the_width() -> None:
    report = diagnose(make_trace(burst_columns()))
    first = render(report, OutputFormat.TABLE, width=100)
    assert first == render(report, OutputFormat.TABLE, width=100)
    assert max(len(line) for line in first.splitlines()) <= 100
    assert first.startswith("verdict: queueing (arrival_burst)")
    assert "capacity_admission" in first and "busiest 5.00 s windows" in first


@pytest.mark.parametrize(("recompute_met", "principal"), [
    (True, AxisName.KV_MEMORY), (False, AxisName.PD_INTERFERENCE)])
def test_decode_stalls_follow_preemption_only_when_its_recompute_is_material(
        recompute_met: bool, principal: AxisName) -> None:
    # GIVEN decode stalls, and K002 firing on the KV axis, once because the recompute itself is
    # material and once only because many requests were preempted (the engine counted their
    # recompute small: their readmissions hit their own freed blocks)
    from yaotu_trace.axes.base import Evidence, RuleHit

    k002 = RuleHit(rule_id="K002", evidence=(
        Evidence(name="recompute_token_fraction", value=0.3 if recompute_met else 0.001,
                 threshold=0.02, comparison=">", passed=recompute_met),
        Evidence(name="preempted_request_share", value=0.05, threshold=0.01, comparison=">",
                 passed=True)))
    given = axes(pd_interference=(Status.BOTTLENECK, 0.3, "prefill_interference"),
                 kv_memory=(Status.WARNING, 0.3 if recompute_met else 0.001, "preemption"))
    given[AxisName.KV_MEMORY] = replace(given[AxisName.KV_MEMORY], hits=(k002,))
    v = verdict_of(given)
    # THEN the stalls are the re-prefills' only when those are material
    assert v.principal_axis is principal
    assert ("re-prefills after preemption" in v.reason) is recompute_met
    # AND P/D disaggregation waits for the KV axis either way, for the reason that holds
    from yaotu_trace.diagnosis.ledger import withheld_by

    why = withheld_by(given)[0]
    assert why.startswith("KV preemption" if recompute_met else "KV memory (kv_memory)")
    assert ("re-prefills" in why) is recompute_met
