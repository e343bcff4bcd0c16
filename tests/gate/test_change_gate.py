"""The change gate on hand-built diffs: `--fail-on` words, conditions and axis changes as checks,
the tally, and the JUnit of a warned check."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.data.run_diff import (
    AxisChange,
    AxisState,
    ChangeLedger,
    Condition,
    MatchedRequests,
    MeasureChange,
    RunDiff,
)
from yaotu_trace.errors import ConfigError, ConfigFileError
from yaotu_trace.gate.change import change_results
from yaotu_trace.gate.check import CheckKind, CheckStatus, parse_config, run_checks
from yaotu_trace.gate.fail_on import DiffGate, FailOn, Gates, parse_fail_on
from yaotu_trace.render.junit import render_junit

BOTH = frozenset(DiffGate)


@pytest.mark.parametrize(("spec", "gates"), [
    ("bottleneck", Gates(level=FailOn.BOTTLENECK)),
    ("regressed,not-comparable", Gates(diff=BOTH)),
    (" Regressed , bottleneck ", Gates(level=FailOn.BOTTLENECK,
                                       diff=frozenset({DiffGate.REGRESSED}))),
    (["not-comparable", "warning"], Gates(level=FailOn.WARNING,
                                          diff=frozenset({DiffGate.NOT_COMPARABLE}))),
])
def test_parse_fail_on_reads_a_level_and_change_gates(spec: str | list[str],
                                                     gates: Gates) -> None:
    assert parse_fail_on(spec) == gates


@pytest.mark.parametrize(("spec", "needle"), [
    ("regresed", "'regresed' is not one of warning, bottleneck, regressed, not-comparable"),
    ("warning,bottleneck", "one diagnosis level"),
    (",", "empty"),
])
def test_parse_fail_on_refuses_with_the_choices(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_fail_on(spec)


def test_check_file_fail_on_takes_change_gates_and_names_the_file_when_wrong() -> None:
    cfg = parse_config({"fail_on": ["regressed", "bottleneck"]}, "checks.toml")
    assert (cfg.fail_on, cfg.fail_on_diff) == (FailOn.BOTTLENECK,
                                               frozenset({DiffGate.REGRESSED}))
    with pytest.raises(ConfigFileError, match=re.escape("checks.toml: fail_on: 'better'")):
        parse_config({"fail_on": "better"}, "checks.toml")
    with pytest.raises(ConfigFileError, match=re.escape("checks.toml: fail_on is 3")):
        parse_config({"fail_on": 3}, "checks.toml")


def _state(status: str, cause: str | None = None) -> AxisState:
    return AxisState(status=status, cause=cause, score=None)


def _diff(success: str = "same", chain: str = "same", kv: str = "improved") -> RunDiff:
    """Six conditions and three axes; the KV axis' change and two conditions set by the test."""
    conditions = tuple(
        Condition(name=name, status=status, before=before, after=after, detail=detail)
        for name, status, before, after, detail in (
            ("request_chain", chain, 300, 300 if chain == "same" else 120, "matched by id"),
            ("io_distribution", "same", None, None, "two-sample KS"),
            ("model", "same", "llama-3.1-8b", "llama-3.1-8b", "from the model column"),
            ("hardware", "unknown", None, None, "neither run says"),
            ("cache_warmth", "same", "cold", "cold", "observed against replayed hits"),
            ("success_rate", success, 1.0, 1.0 if success == "same" else 0.9,
             "completed / total"),
        ))
    recompute = MeasureChange(name="recompute_token_share", before=0.17, after=0.0,
                              unit="ratio", change="improved", noise=0.05, basis="bootstrap")
    if kv == "regressed":
        recompute = MeasureChange(name="recompute_token_share", before=0.0, after=0.17,
                                  unit="ratio", change="regressed", noise=0.05,
                                  basis="bootstrap")
    axes = (
        AxisChange(name="queueing", before=_state("ok"), after=_state("ok"), change="unchanged",
                   measures=(), reason="every key measure within noise"),
        AxisChange(name="kv_memory", before=_state("bottleneck", "kv_capacity"),
                   after=_state("ok"), change=kv, measures=(recompute,)),
        AxisChange(name="pd_interference", before=_state("insufficient_data"),
                   after=_state("insufficient_data"), change="unknown", measures=(),
                   reason="no token times on either side"),
    )
    differing = [c.name for c in conditions if c.status == "differs"]
    fairness = tuple(f"{name}: make it the same" for name in differing)
    matched = MatchedRequests(before_rows=(), after_rows=(), basis="request_id",
                              before_requests=300, after_requests=300, before_share=1.0,
                              after_share=1.0, order_correlation=1.0, span_ratio=1.0,
                              gap_agreement=1.0)
    return RunDiff(comparable=not differing, conditions=conditions, axes=axes,
                   ledger=ChangeLedger(saved=(), added=()), matched=matched, fairness=fairness)


def _changes(diff: RunDiff, gates: frozenset[DiffGate]) -> list:
    return change_results(diff.conditions, diff.axes, diff.fairness, gates)


def _statuses(diff: RunDiff, gates: frozenset[DiffGate]) -> dict[str, str]:
    return {r.name: str(r.status) for r in _changes(diff, gates)}


def test_a_fair_improvement_passes_with_the_unknowns_warned_and_skipped() -> None:
    results = _changes(_diff(), BOTH)
    statuses = {r.name: str(r.status) for r in results}
    # 4 same conditions + 2 axes (unchanged, improved) pass; hardware unknown warns; the axis
    # without data is skipped, as the diagnosis gate skips it.
    assert statuses == {
        "condition: request_chain": "passed", "condition: io_distribution": "passed",
        "condition: model": "passed", "condition: hardware": "warned",
        "condition: cache_warmth": "passed", "condition: success_rate": "passed",
        "change: queueing": "passed", "change: kv_memory": "passed",
        "change: pd_interference": "skipped",
    }
    kv = next(r for r in results if r.name == "change: kv_memory")
    assert (kv.kind, kv.path, kv.value) == (CheckKind.CHANGE, "axes.kv_memory.change",
                                            "improved")
    assert kv.message == ("improved: bottleneck → ok; recompute_token_share 0.17 → 0 "
                          "(improved, noise ±0.05)")
    queue = next(r for r in results if r.name == "change: queueing")
    assert queue.message == "unchanged: ok → ok; every key measure within noise"


def test_a_differing_condition_fails_only_under_not_comparable() -> None:
    diff = _diff(success="differs")
    gated = _changes(diff, BOTH)
    success = next(r for r in gated if r.name == "condition: success_rate")
    assert success.status is CheckStatus.FAILED
    assert success.kind is CheckKind.CONDITION
    assert success.path == "conditions.success_rate.status"
    # The evidence of each side and the one step that makes this condition fair.
    assert success.message == ("differs: completed / total (before 1, after 0.9); to compare "
                               "fairly: make it the same")
    ungated = _statuses(diff, frozenset({DiffGate.REGRESSED}))
    assert ungated["condition: success_rate"] == "warned"


def test_a_regressed_axis_fails_only_under_regressed() -> None:
    diff = _diff(kv="regressed")
    assert _statuses(diff, BOTH)["change: kv_memory"] == "failed"
    assert _statuses(diff, frozenset({DiffGate.NOT_COMPARABLE}))["change: kv_memory"] == "warned"


def test_run_checks_tallies_the_change_results_after_the_other_checks() -> None:
    # GIVEN one threshold that passes and a diff whose chain and success rate differ
    cfg = parse_config({"check": [{"path": "prefix_reuse.hit_ratio", "op": ">=", "value": 0.4}]})
    changes = _changes(_diff(success="differs", chain="differs"), BOTH)
    # WHEN
    section = run_checks({"prefix_reuse": {"hit_ratio": 0.5}}, cfg, changes=changes,
                         before_path="before.parquet", gates=Gates(diff=BOTH))
    # THEN 1 threshold + 9 change results: 2 conditions fail, hardware warns, one axis skips,
    # 1 + 3 conditions + 2 axes pass; a warned check does not fail the section
    assert [r.kind for r in section.results][:2] == [CheckKind.THRESHOLD, CheckKind.CONDITION]
    assert (section.passed, section.failed, section.skipped, section.warned) == (6, 2, 1, 1)
    assert section.status is CheckStatus.FAILED
    assert section.fail_on_diff == (DiffGate.NOT_COMPARABLE, DiffGate.REGRESSED)
    assert section.before_path == "before.parquet"


def test_junit_shows_a_warned_check_as_a_passing_case_with_the_warning_first() -> None:
    section = run_checks({}, parse_config({}), changes=_changes(_diff(), BOTH),
                         before_path="before.parquet", gates=Gates(diff=BOTH))
    summary = InputSummary(path="after.parquet", format="parquet", rows_read=300,
                           requests=300, source_block_size=None, content=None, columns=())
    root = ET.fromstring(render_junit(Report(command="check", input=summary,
                                             sections={"checks": section})))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("9", "0", "1")
    case = root.find("./testsuite/testcase[@name='condition: hardware']")
    assert case is not None and case.get("classname") == "trace.check.condition"
    assert case.find("failure") is None and case.find("skipped") is None
    assert (case.findtext("system-out") or "").startswith("warning: unknown: neither run says")
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["before"] == "before.parquet"
