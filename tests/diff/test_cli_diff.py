"""`trace diff` end to end: the JSON contract and its schema, the table and Markdown views,
`--out`, and the errors (a side that cannot be read, an output over an input)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.json_report import json_schema

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
CHURN = SAMPLES / "diag-kv-churn.parquet"
CHURN_STEPS = SAMPLES / "diag-kv-churn.steps.parquet"
HEALTHY = SAMPLES / "diag-healthy.parquet"


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["diff", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_of_a_run_against_itself_follows_the_contract(capsys) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    code, out, _ = _run([str(CHURN), str(CHURN), "--steps-before", str(CHURN_STEPS),
                         "--steps-after", str(CHURN_STEPS), "--format", "json"], capsys)
    assert code == ExitCode.OK
    doc = json.loads(out)
    assert list(doc)[:5] == ["schema_version", "tool", "command", "input", "config"]
    assert doc["command"] == "diff" and doc["comparable"] is True
    assert doc["input"]["before"]["path"] == doc["input"]["after"]["path"] == str(CHURN)
    assert doc["input"]["before"]["step_rows"] > 0
    assert [c["name"] for c in doc["conditions"]] == [
        "request_chain", "io_distribution", "model", "hardware", "cache_warmth", "success_rate"]
    assert [a["change"] for a in doc["axes"]] == ["unchanged"] * 4
    assert doc["ledger"] == {"saved": [], "added": [], "unmeasured": doc["ledger"]["unmeasured"]}
    validator = jsonschema.Draft202012Validator(json_schema())
    assert not list(validator.iter_errors(doc))
    broken = {**doc, "axes": [{**doc["axes"][0], "change": "better"}, *doc["axes"][1:]]}
    assert list(validator.iter_errors(broken))  # the schema pins the diff's axes
    assert list(validator.iter_errors({**doc, "ledger": []}))  # and its ledger


def test_table_and_markdown_show_the_verdict_conditions_and_ledger(capsys) -> None:
    code, out, _ = _run([str(HEALTHY), str(CHURN)], capsys)
    assert code == ExitCode.OK
    assert "not comparable" in out and "Conditions" in out and "To make the comparison fair" in out
    code, out, _ = _run([str(HEALTHY), str(CHURN), "--format", "markdown"], capsys)
    assert out.startswith(f"## yaotu-trace diff: `{HEALTHY} → {CHURN}`")
    assert "before 240 requests" in out and "after 200 requests" in out
    assert "| request_chain | differs |" in out
    assert "### Ledger of the change (before − after)" in out


def test_out_writes_the_matched_requests_side_by_side(tmp_path: Path, capsys) -> None:
    out = tmp_path / "matched.parquet"
    code, _, _ = _run([str(CHURN), str(CHURN), "--out", str(out), "-o",
                       str(tmp_path / "d.json")], capsys)
    assert code == ExitCode.OK
    table = pq.read_table(out).to_pandas()
    assert len(table) == 200
    assert {"before_ttft_s", "after_ttft_s", "before_latency_s", "after_latency_s",
            "before_cached_tokens", "after_status"} <= set(table.columns)
    assert (table["before_ttft_s"] == table["after_ttft_s"]).all()
    assert (table["after_status"] == "ok").all()


def test_out_over_an_input_is_refused(tmp_path: Path, capsys) -> None:
    copy = tmp_path / "run.parquet"
    copy.write_bytes(CHURN.read_bytes())
    code, _, err = _run([str(CHURN), str(copy), "--out", str(copy)], capsys)
    assert code == ExitCode.INPUT
    assert str(copy) in err and copy.read_bytes() == CHURN.read_bytes()


def test_a_side_that_cannot_be_read_names_its_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "after.csv"
    bad.write_text("arrival_s,prompt_len\n0,12\n")  # no output_len
    code, _, err = _run([str(CHURN), str(bad)], capsys)
    assert code == ExitCode.INPUT
    assert str(bad) in err and "Traceback" not in err


def test_html_is_refused_before_any_work(capsys) -> None:
    code, _, err = _run([str(CHURN), str(CHURN), "--format", "html"], capsys)
    assert code == ExitCode.USAGE
    assert "table, markdown or json" in err


def test_help_names_the_conditions_and_gives_examples(capsys) -> None:
    code, out, _ = _run(["--help"], capsys)
    assert code == ExitCode.OK
    for word in ("request chain", "--matched-only", "--steps-before", "trace diff"):
        assert word in out
