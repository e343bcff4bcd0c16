"""`trace check --fail-on observed-shortfall` (`gate/observed.py`) and the observed-vs-replayed
section of `trace analyze` and `trace diagnose` (`commands/shared/observed.py`), on captures
SGLang 0.5.23's own exporter wrote (tests/fixtures/captures/sglang/README.md)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.analyze import analyze
from yaotu_trace.commands.check import check
from yaotu_trace.commands.diagnose import diagnose
from yaotu_trace.commands.shared.observed import pool_size
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.gate.check import CheckKind, parse_config
from yaotu_trace.gate.fail_on import ObservedGate, parse_fail_on
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.render.json_report import render_json
from yaotu_trace.render.junit import render_junit

SGLANG = FIXTURES / "captures" / "sglang"
# sglang:max_total_num_tokens 32000 in a /metrics scrape SGLang's own HTTP server rendered.
SCRAPE = FIXTURES / "telemetry" / "sglang" / "scrapes" / "20261203T101500Z.prom"


def test_check_fails_on_the_flushed_capture_naming_the_stretch() -> None:
    section = check(SGLANG / "metrics_flush", fail_on="observed-shortfall").sections["checks"]
    assert section.failed == 1
    message = section.results[0].message
    assert "fall short of the sglang replay from 264.4 s to 317.2 s" in message
    assert "cache reset or engine restart at 283.4 s" in message


def test_check_passes_on_the_agreeing_capture() -> None:
    section = check(SGLANG / "metrics_agree", fail_on="observed-shortfall").sections["checks"]
    assert (section.passed, section.failed) == (1, 0)


def test_check_names_capacity_when_the_replay_at_the_given_pool_agrees() -> None:
    options = DiagnosisOptions(kv_capacity="800tok")
    section = check(SGLANG / "metrics_pool", options,
                    fail_on="observed-shortfall").sections["checks"]
    assert section.failed == 1
    assert "likely: capacity: the replay at 800 blocks (--kv-capacity) agrees" in \
        section.results[0].message


def test_the_pool_is_read_from_the_flag_else_from_the_engines_metrics() -> None:
    metrics = read_metrics(SCRAPE)
    given = pool_size(EngineSettings(kv_capacity_tokens=1600.0), metrics, 16)
    assert given is not None and (given.blocks, given.source) == (100, "--kv-capacity")
    stated = pool_size(EngineSettings(), metrics, 1)
    assert stated is not None
    assert (stated.blocks, stated.source) == (32000, "sglang:max_total_num_tokens in --metrics")
    assert pool_size(EngineSettings(), None, 1) is None


def test_check_margins_are_configurable() -> None:
    assert parse_fail_on("observed-shortfall").observed == ObservedGate(0.02, 0.10)
    assert parse_fail_on("bottleneck,observed-shortfall:3:15").observed == ObservedGate(0.03,
                                                                                         0.15)
    section = check(SGLANG / "metrics_flush",
                    fail_on="observed-shortfall:60:10").sections["checks"]
    assert section.failed == 0
    with pytest.raises(ConfigError, match="observed-shortfall:POINTS:PERCENT"):
        parse_fail_on("observed-shortfall:two")


def test_a_check_file_turns_the_gate_on_like_the_others() -> None:
    config = parse_config({"fail_on": "observed-shortfall:3:15"}, "check.toml")
    assert config.fail_on_observed == ObservedGate(0.03, 0.15)
    section = check(SGLANG / "metrics_flush", config=config).sections["checks"]
    assert section.failed == 1 and section.fail_on_observed == ObservedGate(0.03, 0.15)


def test_the_junit_and_json_files_carry_the_gate_and_the_stretch() -> None:
    report = check(SGLANG / "metrics_flush", fail_on="observed-shortfall")
    junit = render_junit(report)
    assert 'classname="trace.check.observed"' in junit
    assert '<property name="fail_on_observed" value="2 points and 10 %"' in junit
    assert 'type="observed"' in junit and "from 264.4 s to 317.2 s" in junit
    doc = json.loads(render_json(report))
    checks = doc["checks"]
    assert checks["fail_on_observed"] == {"points": 0.02, "relative": 0.1}
    assert checks["results"][0]["kind"] == CheckKind.OBSERVED.value
    assert checks["results"][0]["status"] == "failed"
    stretch = doc["observed_vs_replayed"]["shortfall"]
    assert (round(stretch["start_s"], 1), round(stretch["end_s"], 1)) == (264.4, 317.2)


def test_check_refuses_a_trace_without_cached_tokens() -> None:
    vllm = SGLANG.parent / "vllm" / "vllm_requests.log"
    with pytest.raises(ConfigError, match=r"\(vllm-log\) has none; give a capture"):
        check(vllm, fail_on="observed-shortfall")


def test_analyze_and_diagnose_show_observed_and_replayed_side_by_side() -> None:
    for report in (analyze(SGLANG / "metrics_flush"), diagnose(SGLANG / "metrics_flush")):
        section = report.sections["observed_vs_replayed"]
        assert section.below_tokens == 418
        assert section.shortfall.requests == 4
        assert [r.cause for r in section.reasons] == ["reset"]


def test_diagnose_tests_capacity_at_its_kv_capacity() -> None:
    report = diagnose(SGLANG / "metrics_pool", DiagnosisOptions(kv_capacity="800tok"))
    reasons = report.sections["observed_vs_replayed"].reasons
    assert (reasons[0].cause, reasons[0].tested) == ("capacity", "agrees")


def test_a_trace_not_captured_from_an_engine_gets_no_such_section() -> None:
    sample = FIXTURES.parent.parent / "sample_traces" / "diag-prefix-recompute.parquet"
    assert "observed_vs_replayed" not in analyze(sample).sections


def test_the_html_report_shades_the_stretch_where_the_engine_falls_short() -> None:
    from yaotu_trace.commands.report import report
    from yaotu_trace.render.html import render_html

    page = render_html(report(SGLANG / "metrics_flush"))
    assert 'data-plot="observed_hits"' in page
    assert ("<title>from 264.4 s to 317.2 s the engine hit 140 of 697 prompt tokens, the "
            "replay 506</title>") in page
    agree = render_html(report(SGLANG / "metrics_agree"))
    assert 'data-plot="observed_hits"' in agree and 'class="mark band burst"' not in \
        agree.split('data-plot="observed_hits"')[1].split("</figure>")[0]


@pytest.mark.parametrize("command", ["check", "analyze", "diagnose", "replay"])
def test_every_command_writes_the_section_the_schema_describes(command: str) -> None:
    import jsonschema

    from yaotu_trace.commands.replay import replay
    from yaotu_trace.render.json_report import json_schema

    trace = SGLANG / "metrics_pool"
    options = DiagnosisOptions(kv_capacity="800tok")
    report = {"check": lambda: check(trace, options, fail_on="observed-shortfall"),
              "analyze": lambda: analyze(trace), "diagnose": lambda: diagnose(trace, options),
              "replay": lambda: replay(trace)}[command]()
    doc = json.loads(render_json(report))
    assert list(jsonschema.Draft202012Validator(json_schema()).iter_errors(doc)) == []
    section = (doc["prefix_reuse"]["observed_over_time"] if command == "replay"
               else doc["observed_vs_replayed"])
    assert section["shortfall"] is not None and section["reasons"]
