"""Check evaluation on hand-built report documents: paths, thresholds, baselines, the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yaotu_trace.errors import ConfigError, ConfigFileError
from yaotu_trace.gate.check import (
    CheckStatus,
    FailOn,
    load_baseline,
    parse_config,
    run_checks,
)
from yaotu_trace.gate.fail_on import Gates
from yaotu_trace.gate.report_path import parse_path, resolve


def doc(queue_p99: float | None = 1.5, hit: float = 0.5, preempt: float = 0.0,
        axes_as_list: bool = True) -> dict:
    axes = {
        "queueing": {"status": "warning", "cause": "burst",
                     "metrics": {"queue_time_s": None if queue_p99 is None else
                                 {"p50": 0.1, "p99": queue_p99}, "ttft_s": None}},
        "kv_memory": {"status": "ok", "cause": None,
                      "metrics": {"preempted_request_share": preempt}},
        "pd_interference": {"status": "insufficient_data", "cause": None,
                            "missing": ["token_times_s"], "metrics": {"tbt_s": None}},
    }
    return {
        "schema_version": 1, "command": "diagnose",
        "prefix_reuse": {"hit_ratio": hit, "knee": {"capacity_blocks": 10}},
        "axes": [{"name": k, **v} for k, v in axes.items()] if axes_as_list else axes,
    }


@pytest.mark.parametrize("as_list", [True, False])
def test_resolve_axis_paths_work_over_list_and_mapping_forms(as_list: bool) -> None:
    d = doc(axes_as_list=as_list)
    for path in ("axes.kv_memory.status", "axes[name=kv_memory].status", "kv_memory.status"):
        assert resolve(d, path).value == "ok"
    assert resolve(d, "queueing.queue_time_s.p99").value == 1.5
    assert resolve(d, "queueing.queue_time_s.p99").resolved_path == \
        "axes.queueing.metrics.queue_time_s.p99"


def test_resolve_null_parent_is_missing_not_unknown() -> None:
    res = resolve(doc(queue_p99=None), "queueing.queue_time_s.p99")
    assert res.found and res.value is None
    assert res.null_at == "axes.queueing.metrics.queue_time_s"


@pytest.mark.parametrize("bad", ["", "a..b", "a.", "[0]", "a[x", "a.b[0]c"])
def test_parse_path_malformed_is_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_path(bad)


def test_threshold_pass_and_fail() -> None:
    cfg = parse_config({"check": [
        {"path": "prefix_reuse.hit_ratio", "op": ">=", "value": 0.4},
        {"path": "queueing.queue_time_s.p99", "op": "<=", "value": 1},
    ]})
    section = run_checks(doc(), cfg)
    assert [r.status for r in section.results] == [CheckStatus.PASSED, CheckStatus.FAILED]
    assert section.status is CheckStatus.FAILED
    assert "1.5 is not <= 1" in section.results[1].message


def test_unknown_path_names_close_valid_paths() -> None:
    """A path from the check file that the report lacks is a bad file (exit 3) naming it."""
    cfg = parse_config({"check": [{"path": "queueing.queue_tim_s.p99", "op": "<", "value": 1}]},
                       "checks.toml")
    with pytest.raises(ConfigFileError,
                       match=r"^checks\.toml: .*unknown metric path .*queueing\.queue_time_s\.p99"):
        run_checks(doc(), cfg)


@pytest.mark.parametrize(("policy", "status"), [("fail", CheckStatus.FAILED),
                                                ("skip", CheckStatus.SKIPPED)])
def test_null_metric_follows_on_missing(policy: str, status: CheckStatus) -> None:
    cfg = parse_config({"on_missing": policy, "check": [
        {"path": "queueing.queue_time_s.p99", "op": "<=", "value": 1}]})
    result = run_checks(doc(queue_p99=None), cfg).results[0]
    assert result.status is status
    assert "not available" in result.message


def test_string_equality_on_status() -> None:
    cfg = parse_config({"check": [{"path": "axes.kv_memory.status", "op": "==", "value": "ok"}]})
    assert run_checks(doc(), cfg).results[0].status is CheckStatus.PASSED


@pytest.mark.parametrize("table", [
    {"check": [{"path": "a", "op": "~", "value": 1}]},
    {"check": [{"path": "a", "op": ">=", "value": "high"}]},
    {"check": [{"path": "a", "op": ">="}]},
    {"check": [{"path": "a", "op": ">=", "value": 1, "oops": 2}]},
    {"baseline": {"rel_tol": -1}},
    {"baseline": {"metric": [{"path": "a", "better": "up"}]}},
    {"fail_on": "error"},
    {"surprise": 1},
])
def test_invalid_config_is_config_error(table: dict) -> None:
    with pytest.raises(ConfigFileError):
        parse_config(table)


def test_baseline_default_catches_a_worse_trace_and_skips_unmeasured() -> None:
    section = run_checks(doc(queue_p99=3.0, hit=0.30, preempt=0.05), parse_config({}),
                         baseline=doc())
    by_path = {r.path: r for r in section.results}
    assert by_path["prefix_reuse.hit_ratio"].status is CheckStatus.FAILED
    assert by_path["queueing.queue_time_s.p99"].status is CheckStatus.FAILED
    assert by_path["kv_memory.preempted_request_share"].status is CheckStatus.FAILED
    assert by_path["queueing.queue_time_s.p50"].status is CheckStatus.PASSED
    assert by_path["pd_interference.tbt_s.p99"].status is CheckStatus.SKIPPED


def test_baseline_tolerances_and_overrides() -> None:
    worse = doc(queue_p99=1.6)  # +6.7 %
    assert run_checks(worse, parse_config({}), baseline=doc()).failed == 1
    relaxed = parse_config({"baseline": {"override": {
        "queueing.queue_time_s.p99": {"rel_tol": 0.1}}}})
    assert run_checks(worse, relaxed, baseline=doc()).failed == 0
    explicit = parse_config({"baseline": {"metric": [
        {"path": "queueing.queue_time_s.p99", "better": "lower", "abs_tol": 0.2}]}})
    section = run_checks(worse, explicit, baseline=doc())
    assert [r.status for r in section.results] == [CheckStatus.PASSED]


def test_baseline_written_by_check_answers_from_its_results() -> None:
    cfg = parse_config({"check": [{"path": "prefix_reuse.hit_ratio", "op": ">=", "value": 0}]})
    first = run_checks(doc(hit=0.5), cfg)
    from yaotu_trace.data.report import to_builtins

    base = {"schema_version": 1, "command": "check", "checks": to_builtins(first)}
    explicit = parse_config({"baseline": {"metric": [
        {"path": "prefix_reuse.hit_ratio", "better": "higher"}]}})
    assert run_checks(doc(hit=0.2), explicit, baseline=base).failed == 1


@pytest.mark.parametrize(("version", "shown"), [(999, "999"), (0, "0"), ("1", '"1"'),
                                               (True, "true"), (None, "null")])
def test_baseline_of_a_version_this_tool_does_not_read_is_refused(
    version: object, shown: str, tmp_path: Path
) -> None:
    # A bumped schema_version changes what a path means: comparing across it would be a guess.
    path = tmp_path / "b.json"
    path.write_text(json.dumps({**doc(), "schema_version": version}), encoding="utf-8")
    with pytest.raises(ConfigFileError, match=rf"^{path}: schema_version {shown} is not one this "
                                              r"tool reads \(it reads 1\); write the baseline"):
        load_baseline(path)


def test_baseline_of_this_version_is_read(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc()), encoding="utf-8")
    assert load_baseline(path)["schema_version"] == 1


def test_fail_on_gate_per_axis() -> None:
    section = run_checks(doc(), parse_config({}), gates=Gates(level=FailOn.WARNING))
    status = {r.name: r.status for r in section.results}
    assert status == {"diagnosis: queueing": CheckStatus.FAILED,
                      "diagnosis: kv_memory": CheckStatus.PASSED,
                      "diagnosis: pd_interference": CheckStatus.SKIPPED}
    assert run_checks(doc(), parse_config({}), gates=Gates(level=FailOn.BOTTLENECK)).failed == 0
