"""`trace check` end to end: exit codes, JUnit and Markdown files, a baseline regression."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"

ONE_PASS_ONE_FAIL = """
[[check]]
path = "prefix_reuse.hit_ratio"
op = ">="
value = 0.4

[[check]]
name = "reuse must be near perfect"
path = "prefix_reuse.hit_ratio"
op = ">="
value = 0.99
"""


def test_check_one_failing_threshold_exits_1_and_junit_names_it(tmp_path: Path, capsys) -> None:
    # GIVEN a check file with one passing and one failing threshold
    config = tmp_path / "checks.toml"
    config.write_text(ONE_PASS_ONE_FAIL)
    junit, md = tmp_path / "checks.xml", tmp_path / "summary.md"
    # WHEN
    code = main(["check", str(SAMPLE), "--config", str(config), "--junit", str(junit),
                 "--markdown", str(md), "--format", "json"])
    # THEN
    assert code == ExitCode.FINDINGS
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "check"
    assert (doc["checks"]["passed"], doc["checks"]["failed"]) == (1, 1)
    root = ET.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 2
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["reuse must be near perfect"]
    assert "is not >= 0.99" in failed[0].find("failure").get("message")
    assert root.get("failures") == "1" and root.get("tests") == "2"
    text = md.read_text()
    assert "❌ fail" in text and "reuse must be near perfect" in text


def test_check_all_pass_exits_0(tmp_path: Path, capsys) -> None:
    config = tmp_path / "checks.toml"
    config.write_text('[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 0.4\n')
    assert main(["check", str(SAMPLE), "-c", str(config)]) == ExitCode.OK
    assert "PASSED: 1 passed" in capsys.readouterr().out


@pytest.mark.parametrize(("content", "needle"), [
    ('[[check]]\npath = "prefix_reuse.hit_rato"\nop = ">="\nvalue = 0.4\n',
     "prefix_reuse.hit_ratio"),
    ("[[check]\n", "not valid TOML"),
    (b"PAR1\x15\x04\xff\xfe", "--config takes a TOML file of [[check]] tables"),  # a trace
])
def test_check_bad_config_exits_3_with_one_line(tmp_path: Path, capsys, content: str | bytes,
                                                needle: str) -> None:
    config = tmp_path / "checks.toml"
    if isinstance(content, bytes):
        config.write_bytes(content)
    else:
        config.write_text(content)
    assert main(["check", str(SAMPLE), "-c", str(config)]) == ExitCode.INPUT
    out, err = capsys.readouterr()
    assert out == "" and needle in err and err.count("\n") == 1


def test_check_nothing_to_check_is_a_usage_error(capsys) -> None:
    assert main(["check", str(SAMPLE)]) == ExitCode.USAGE
    assert "nothing to check" in capsys.readouterr().err


def test_check_baseline_that_is_not_a_report_exits_3(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "base.json"
    bad.write_text("[1, 2]")
    assert main(["check", str(SAMPLE), "--baseline", str(bad)]) == ExitCode.INPUT


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """The same 300 requests simulated with a roomy and with a starved KV pool."""
    root = tmp_path_factory.mktemp("sim")
    trace = root / "chat.parquet"
    assert main(["generate", "chat", "--requests", "300", "--seed", "3", "--rate", "4",
                 "--out", str(trace)]) == ExitCode.OK
    out = {}
    for name, blocks in (("good", "4000"), ("worse", "700")):
        req, steps = root / f"{name}.parquet", root / f"{name}_steps.parquet"
        assert main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                     "--kv-blocks", blocks, "--out", str(req), "--steps-out", str(steps),
                     "--format", "json"]) == ExitCode.OK
        out[name] = (req, steps)
    return out


def test_check_baseline_catches_a_deliberately_worse_trace(simulated, tmp_path: Path,
                                                          capsys) -> None:
    # GIVEN a baseline written by `trace diagnose` on the good run
    capsys.readouterr()
    good, good_steps = simulated["good"]
    baseline = tmp_path / "baseline.json"
    assert main(["diagnose", str(good), "--steps", str(good_steps), "-f", "json",
                 "-o", str(baseline)]) == ExitCode.OK
    # WHEN the same run is checked against it, nothing regresses
    assert main(["check", str(good), "--steps", str(good_steps), "--baseline",
                 str(baseline)]) == ExitCode.OK
    capsys.readouterr()
    # AND the starved run is checked against it
    worse, worse_steps = simulated["worse"]
    code = main(["check", str(worse), "--steps", str(worse_steps), "--baseline", str(baseline),
                 "-f", "json"])
    # THEN the regression fails the gate, naming the headline metrics that got worse
    assert code == ExitCode.FINDINGS
    results = json.loads(capsys.readouterr().out)["checks"]["results"]
    failed = {r["path"] for r in results if r["status"] == "failed"}
    assert "queueing.ttft_s.p99" in failed
    assert all(r["kind"] == "baseline" for r in results)


def _gated_hit_ratio(tmp_path: Path, capsys, *extra: str) -> tuple[float, dict]:
    config = tmp_path / "hits.toml"
    config.write_text('[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 0.0\n'
                      '[[check]]\npath = "prefix_reuse.block_size_tokens"\nop = ">="\n'
                      'value = 1\n')
    assert main(["check", str(SAMPLE), "--config", str(config), "--format", "json",
                 *extra]) == 0
    results = json.loads(capsys.readouterr().out)["checks"]["results"]
    return results[0]["value"], {r["path"]: r["value"] for r in results}


def _analyzed(capsys, *extra: str) -> dict:
    assert main(["analyze", str(SAMPLE), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["prefix_reuse"]


def test_check_gates_the_prefix_metrics_under_its_preset_and_block_size(tmp_path: Path,
                                                                         capsys) -> None:
    # GIVEN the sample trace, whose hit ratio differs between vLLM's and SGLang's rules
    vllm = _analyzed(capsys, "--preset", "vllm")["hit_ratio"]
    sglang = _analyzed(capsys, "--preset", "sglang")["hit_ratio"]
    assert vllm != sglang
    # WHEN `trace check` gates the hit ratio under --preset sglang, then at a 64-token block
    under_sglang, _ = _gated_hit_ratio(tmp_path, capsys, "--preset", "sglang")
    _, at_64 = _gated_hit_ratio(tmp_path, capsys, "--block-size", "64")
    # THEN the value gated is the one `trace analyze --preset sglang` reports (the diagnosis of
    # the same command replays under those rules), and the block size given is the replay's
    assert under_sglang == sglang
    assert at_64["prefix_reuse.block_size_tokens"] == 64


def test_report_replays_and_sweeps_under_the_diagnosis_preset(tmp_path: Path) -> None:
    # GIVEN `trace report --preset sglang` (its diagnosis replays under SGLang's rules)
    out = tmp_path / "report.json"
    assert main(["report", str(SAMPLE), "--preset", "sglang", "--format", "json", "-o",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    # THEN the page's own replay and curve follow the same rules, and agree with the axis
    axis = next(a for a in doc["axes"] if a["name"] == "prefix_reuse")
    achievable = next(e for e in axis["evidence"] if e["name"] == "achievable_hit_rate")
    assert doc["config"]["preset"] == "sglang"
    assert doc["capacity_curve"]["preset"] == "sglang"
    assert doc["prefix_reuse"]["hit_ratio"] == pytest.approx(achievable["value"], rel=1e-12)
