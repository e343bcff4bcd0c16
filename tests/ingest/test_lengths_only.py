"""A lengths-only table (no timestamp column): `trace analyze` gives its length profile.

Source: microsoft/vidur `data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_
filtered_v2.csv` at 7d47513 (first 6 rows, tests/fixtures/sim_traces/README.md), a table Vidur
ships without arrivals. Hand-checked from the file: prompts 3772, 2015, 3858, 2509, 3169, 3466
(total 18789, mean 3131.5, median (3169 + 3466) / 2 = 3317.5); outputs 54, 156, 133, 79, 189,
43 (total 654, mean 109, median (79 + 133) / 2 = 106).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.errors import ConfigError, ExitCode, TraceSchemaError
from yaotu_trace.ingest import read_trace

ROOT = Path(__file__).resolve().parents[2]
ARXIV = FIXTURES / "sim_traces" / "vidur_arxiv_lengths.csv"
STEPS = ROOT / "sample_traces" / "diag-healthy.steps.parquet"


def _analyze_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["analyze", *args, "--format", "json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def test_analyze_gives_the_length_profile_of_vidur_lengths_table(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = _analyze_json([str(ARXIV)], capsys)
    assert doc["input"]["format"] == "vidur" and doc["input"]["requests"] == 6
    assert "arrival_s" not in doc["input"]["columns"]
    profile = doc["profile"]
    assert profile["arrivals"] is None and profile["timing"] is None
    lengths = profile["lengths"]
    assert (lengths["prompt_tokens_total"], lengths["output_tokens_total"]) == (18789, 654)
    assert lengths["prompt_len"]["mean"] == 3131.5 and lengths["prompt_len"]["p50"] == 3317.5
    assert (lengths["prompt_len"]["min"], lengths["prompt_len"]["max"]) == (2015, 3858)
    assert lengths["output_len"]["mean"] == 109 and lengths["output_len"]["p50"] == 106
    assert any("need a timestamp column" in note for note in doc["input"]["notes"])


def test_the_console_profile_says_why_arrivals_are_missing(
        capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["analyze", str(ARXIV)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "arrival and timing need a timestamp column" in out
    assert "18,789 prompt tokens, 654 output tokens" in out


def test_a_canonical_lengths_only_csv_named_with_input_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hand case: 5, 7, 9 prompt tokens and 2, 3, 4 output tokens; file order kept."""
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_len,output_len\n5,2\n7,3\n9,4\n")
    doc = _analyze_json([str(path), "--input-format", "csv"], capsys)
    lengths = doc["profile"]["lengths"]
    assert (lengths["prompt_tokens_total"], lengths["output_tokens_total"]) == (21, 9)
    assert lengths["prompt_len"]["p50"] == 7 and doc["profile"]["arrivals"] is None


def test_commands_that_need_arrivals_keep_a_one_line_error() -> None:
    with pytest.raises(TraceSchemaError) as info:
        read_trace(ARXIV)
    message = str(info.value)
    assert "\n" not in message and str(ARXIV) in message
    assert "no arrival times" in message and "--map arrival_s=" in message
    assert "trace analyze" in message
    assert "column 'arrived_at' (read as arrival_s)" in message  # Vidur's own column name


@pytest.mark.parametrize("command", [["replay"], ["diagnose"]])
def test_replay_and_diagnose_refuse_a_lengths_only_table(
        command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, str(ARXIV)]) == ExitCode.INPUT
    err = capsys.readouterr().err
    assert "no arrival times" in err and len(err.strip().splitlines()) == 1


def test_a_step_log_cannot_be_fitted_to_a_lengths_only_table() -> None:
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.commands.load import TraceInput

    with pytest.raises(ConfigError, match="lengths-only table"):
        analyze(TraceInput(path=ARXIV, steps=STEPS))


def test_a_timed_trace_keeps_its_arrivals() -> None:
    trace = read_trace(FIXTURES / "sim_traces" / "vidur_splitwise_code.csv",
                       arrivals_optional=True)
    assert trace.has_arrivals and "arrival_s" in trace.column_names


def test_the_lengths_only_report_validates_against_the_shipped_schema(
        capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    from yaotu_trace.render.json_report import json_schema

    doc = _analyze_json([str(ARXIV)], capsys)
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(doc))
    assert not errors, errors[0].message


@pytest.mark.parametrize(("name", "body"), [
    ("t.csv", "request_id,prompt_len,output_len\nr0,100,20\nr1,200,30\nr2,600,10\n"),
    ("t.jsonl", '{"prompt_len": 100, "output_len": 20}\n{"prompt_len": 200, "output_len": 30}\n'
                '{"prompt_len": 600, "output_len": 10}\n'),
])
def test_a_canonical_table_without_arrivals_is_lengths_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, body: str) -> None:
    # Our own column names, no timestamp: detected as canonical without --input-format.
    # Prompts 100, 200, 600: total 900, mean 300, median 200; outputs total 60, median 20.
    path = tmp_path / name
    path.write_text(body)
    doc = _analyze_json([str(path)], capsys)
    assert doc["input"]["format"] in ("csv", "jsonl") and doc["input"]["requests"] == 3
    lengths = doc["profile"]["lengths"]
    assert lengths["prompt_tokens_total"] == 900
    assert lengths["prompt_len"]["mean"] == 300 and lengths["prompt_len"]["p50"] == 200
    assert lengths["output_tokens_total"] == 60 and lengths["output_len"]["p50"] == 20
    assert any("lengths-only" in n for n in doc["input"]["notes"])
    assert doc["profile"]["arrivals"] is None
    capsys.readouterr()
    assert main(["diagnose", str(path)]) == ExitCode.INPUT
    assert "no arrival times" in capsys.readouterr().err
