"""`trace check AFTER --before BEFORE` end to end: the same requests simulated with a roomy and a
starved KV pool, and with a tenth of them failed; exit codes, JUnit and Markdown."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet"
CONDITIONS = ("request_chain", "io_distribution", "model", "hardware", "cache_warmth",
              "success_rate")
AXES = ("queueing", "kv_memory", "prefix_reuse", "pd_interference")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The 1,000 sample requests on one H100: a 4,000-block and a 700-block KV pool, and the
    roomy run again with every tenth request marked failed (100 of 1,000)."""
    root = tmp_path_factory.mktemp("before-after")
    out: dict[str, list[str]] = {}
    for name, blocks in (("roomy", "4000"), ("starved", "700")):
        req, steps = root / f"{name}.parquet", root / f"{name}.steps.parquet"
        assert main(["simulate", str(SAMPLE), "--model", "Llama-3.1-8B", "--gpu", "H100",
                     "--kv-blocks", blocks, "--out", str(req), "--steps-out", str(steps),
                     "-f", "json", "-o", str(root / f"{name}.json")]) == ExitCode.OK
        out[name] = [str(req), str(steps)]
    table = pq.read_table(out["roomy"][0])
    status = ["error" if i % 10 == 0 else "ok" for i in range(table.num_rows)]
    assert status.count("error") == 100
    failed = root / "failed.parquet"
    pq.write_table(table.append_column("status", pa.array(status)), failed)
    out["failed"] = [str(failed), out["roomy"][1]]
    return out


def _check(runs: dict[str, list[str]], after: str, before: str, *extra: str) -> list[str]:
    (a, a_steps), (b, b_steps) = runs[after], runs[before]
    return ["check", a, "--steps", a_steps, "--before", b, "--steps-before", b_steps,
            "--gpu", "H100", *extra]


def _results(out: str) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads(out)["checks"]["results"]}


def test_a_run_checked_against_itself_passes_every_condition_and_axis(runs, capsys) -> None:
    capsys.readouterr()
    code = main(_check(runs, "roomy", "roomy", "-f", "json"))
    results = _results(capsys.readouterr().out)
    assert code == ExitCode.OK
    # 6 conditions, all the same (--gpu states the hardware), and 4 axes, all unchanged.
    assert {r["value"] for n, r in results.items() if n.startswith("condition:")} == {"same"}
    assert {r["value"] for n, r in results.items() if n.startswith("change:")} == {"unchanged"}
    assert len(results) == len(CONDITIONS) + len(AXES)
    assert {r["status"] for r in results.values()} == {"passed"}


def test_a_tenth_of_requests_failed_is_not_comparable(runs, tmp_path: Path, capsys) -> None:
    # GIVEN the roomy run with 100 of its 1,000 requests failed, against the roomy run
    junit, md = tmp_path / "checks.xml", tmp_path / "summary.md"
    capsys.readouterr()
    # WHEN
    code = main(_check(runs, "failed", "roomy", "--junit", str(junit), "--markdown", str(md),
                       "-f", "json"))
    # THEN the success rate (100 % → 90 %) differs, which fails the not-comparable gate
    assert code == ExitCode.FINDINGS
    doc = json.loads(capsys.readouterr().out)
    failed = [r["name"] for r in doc["checks"]["results"] if r["status"] == "failed"]
    assert failed == ["condition: success_rate"]
    assert doc["checks"]["before_path"] == runs["roomy"][0]
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures")) == ("10", "1")
    case = root.find("./testsuite/testcase[@name='condition: success_rate']")
    assert case is not None and case.get("classname") == "trace.check.condition"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("condition: success_rate: differs:")
    assert "to compare fairly: fix the failures first" in failure.get("message", "")
    text = md.read_text()
    assert "**FAILED: 9 passed, 1 failed, 0 skipped**" in text
    assert "| ❌ fail | condition: success_rate | differs | == same |" in text
    assert f"Before: `{runs['roomy'][0]}`" in text


def test_gating_regressions_only_turns_the_unfair_condition_into_a_warning(runs,
                                                                          capsys) -> None:
    capsys.readouterr()
    code = main(_check(runs, "failed", "roomy", "--fail-on", "regressed", "-f", "json"))
    results = _results(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert results["condition: success_rate"]["status"] == "warned"


def test_a_larger_kv_pool_improves_and_a_smaller_one_regresses(runs, tmp_path: Path,
                                                               capsys) -> None:
    capsys.readouterr()
    # 700 → 4,000 blocks: preemption and its recompute disappear
    assert main(_check(runs, "roomy", "starved", "-f", "json")) == ExitCode.OK
    better = _results(capsys.readouterr().out)
    assert better["change: kv_memory"]["value"] == "improved"
    # (a warning, not a bottleneck: the readmitted requests hit most of their prefix in the
    # cache, so the engine recomputed 1.5 % of all tokens; its cost is the queue it blocks)
    assert better["change: kv_memory"]["message"].startswith("improved: warning → ok")
    # (docs/ci.md's example is this pair: every axis improved one way, regressed the other)
    assert {better[f"change: {a}"]["value"] for a in AXES} == {"improved"}
    # 4,000 → 700 blocks: the same axis regressed, which fails the regressed gate
    junit = tmp_path / "checks.xml"
    code = main(_check(runs, "starved", "roomy", "--fail-on", "regressed,not-comparable",
                       "--junit", str(junit), "-f", "json"))
    worse = _results(capsys.readouterr().out)
    assert code == ExitCode.FINDINGS
    assert worse["change: kv_memory"]["status"] == "failed"
    assert {worse[f"change: {a}"]["value"] for a in AXES} == {"regressed"}
    assert worse["change: kv_memory"]["path"] == "axes.kv_memory.change"
    assert {worse[f"condition: {c}"]["status"] for c in CONDITIONS} == {"passed"}
    case = ET.parse(junit).getroot().find("./testsuite/testcase[@name='change: kv_memory']")
    assert case is not None and case.get("classname") == "trace.check.change"
    assert "recompute_token_share 0 →" in (case.find("failure").get("message") or "")


@pytest.mark.parametrize(("args", "needle"), [
    (["--fail-on", "regressed"], "--fail-on regressed judges a change: give the run before"),
    (["--fail-on", "regresed"], "'regresed' is not one of"),
    (["--steps-before", str(SAMPLE)], "--steps-before is the step log of the run before"),
])
def test_change_options_without_a_run_before_are_usage_errors(args: list[str], needle: str,
                                                              capsys) -> None:
    assert main(["check", str(SAMPLE), *args]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == "" and needle in err


def test_check_and_report_json_with_a_run_before_follow_the_schema(runs, capsys) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    from yaotu_trace.render.json_report import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    capsys.readouterr()
    # without --gpu the hardware is unknown: a warned check
    (a, a_steps), (b, b_steps) = runs["failed"], runs["roomy"]
    assert main(["check", a, "--steps", a_steps, "--before", b, "--steps-before", b_steps,
                 "-f", "json"]) == ExitCode.FINDINGS
    check = json.loads(capsys.readouterr().out)
    assert check["checks"]["warned"] == 1
    assert main(["report", a, "--steps", a_steps, "--before", b, "--steps-before", b_steps,
                 "-f", "json"]) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    for doc in (check, report):
        errors = [e.message for e in validator.iter_errors(doc)]
        assert errors == []
    assert report["before"]["input"]["path"] == b and report["input"]["path"] == a
    assert report["config"]["before"] == b
    assert report["diff"]["comparable"] is False
    assert report["diff"]["matched"]["matched"] == 1000
    assert "before_rows" not in report["diff"]["matched"]
    assert [c["name"] for c in report["diff"]["conditions"]] == list(CONDITIONS)


def test_report_with_a_run_before_in_markdown_draws_the_diff_and_the_run_before(
        runs, capsys) -> None:
    (a, a_steps), (b, b_steps) = runs["roomy"], runs["starved"]
    capsys.readouterr()
    assert main(["report", a, "--steps", a_steps, "--before", b, "--steps-before", b_steps,
                 "-f", "markdown"]) == ExitCode.OK
    text = capsys.readouterr().out
    # The run after's sections first, then the run before by its verdict, then the diff
    assert text.index("### Verdict") < text.index(f"### The run before: `{b}`") \
        < text.index("### Change since the run before")
    assert "**verdict: kv_memory (kv_capacity)" in text
    assert "| kv_memory | warning (kv_capacity), " in text
    assert "| metric | value |\n|---|---:|\n| input.path |" not in text  # no generic dump


def test_two_unrelated_traces_fail_on_the_request_chain_however_much_improved(capsys) -> None:
    # GIVEN two sample traces that share no request (a healthy engine and a starved one,
    # different prompts and lengths)
    samples = SAMPLE.parent
    capsys.readouterr()
    # WHEN the healthy one is checked against the starved one
    code = main(["check", str(samples / "diag-healthy.parquet"), "--before",
                 str(samples / "diag-kv-churn.parquet"), "-f", "json"])
    results = _results(capsys.readouterr().out)
    # THEN the KV axis "improved", but the comparison is not fair and the gate fails on it
    assert code == ExitCode.FINDINGS
    assert results["change: kv_memory"]["value"] == "improved"
    failed = sorted(n for n, r in results.items() if r["status"] == "failed")
    assert failed == ["condition: io_distribution", "condition: request_chain"]
    assert "share no request chain" in results["condition: request_chain"]["message"]
