"""Text charts on the command line: on in a terminal, forced by --charts, never in JSON or
Markdown, and the Azure code trace's arrival peak under its busiest windows."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import run_cli, shared_trace

from yaotu_trace.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
CHAT = str(ROOT / "sample_traces" / "chat.parquet")
KV = [str(ROOT / "sample_traces" / "diag-kv-churn.parquet"), "--steps",
      str(ROOT / "sample_traces" / "diag-kv-churn.steps.parquet")]
CHART_TITLES = ("Arrivals over time", "Prompt tokens (", "Output tokens (",
                "Prefix hit ratio vs LRU capacity")


def _table(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, _ = run_cli(args, capsys)
    assert code == ExitCode.OK
    return out


def test_analyze_charts_show_arrivals_lengths_and_the_capacity_points(capsys) -> None:
    out = _table(["analyze", CHAT, "--charts"], capsys)
    for title in CHART_TITLES:
        assert title in out
    assert "busiest 60 s: 1 5.48 req/s from 2.48 s" in out  # the profile's busiest window
    assert "▲p50 1,198" in out and "▲p99 4,277" in out  # the Lengths table's p50 / p99
    assert "50% of reuse  1,321 blocks" in out
    # The charts come before the sections, which are all still there.
    assert out.index("\nCharts\n") < out.index("\nArrivals\n") < out.index("Prefix reuse")
    assert all(len(line) <= 100 for line in out.splitlines())


def test_no_charts_and_a_pipe_show_none(capsys) -> None:
    plain = _table(["analyze", CHAT], capsys)  # stdout is not a terminal here
    assert _table(["analyze", CHAT, "--no-charts"], capsys) == plain
    assert "\nCharts\n" not in plain and "▁" not in plain


def test_a_terminal_gets_the_charts_at_its_width(capsys, monkeypatch) -> None:
    narrow = _table(["analyze", CHAT, "--charts"], capsys)  # a pipe: width 100
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((140, 40)))
    monkeypatch.setenv("NO_COLOR", "1")
    out = _table(["analyze", CHAT], capsys)
    assert "\nCharts\n" in out and "Arrivals over time" in out

    def spark(text: str) -> str:
        lines = text.splitlines()
        return lines[lines.index(next(x for x in lines if x.startswith("Arrivals over"))) + 1]

    assert len(spark(narrow)) <= 100 < len(spark(out)) <= 140  # fewer bins per column
    assert "\nCharts\n" not in _table(["analyze", CHAT, "--no-charts"], capsys)


def test_json_and_markdown_carry_no_chart(capsys) -> None:
    doc = _table(["analyze", CHAT, "--format", "json"], capsys)
    assert _table(["analyze", CHAT, "--format", "json", "--charts"], capsys) == doc
    markdown = _table(["analyze", CHAT, "--format", "markdown"], capsys)
    assert _table(["analyze", CHAT, "--format", "markdown", "--charts"], capsys) == markdown
    assert "▁" not in markdown and "\nCharts\n" not in markdown
    json.loads(doc)
    diagnosed = _table(["diagnose", *KV, "--format", "json"], capsys)
    assert _table(["diagnose", *KV, "--format", "json", "--charts"], capsys) == diagnosed


def test_the_python_api_is_unchanged_without_charts() -> None:
    from yaotu_trace.commands.analyze import analyze

    report = analyze(CHAT)
    assert report.charts is None
    drawn = analyze(CHAT, charts=True)
    assert drawn.charts is not None and drawn.charts.arrivals is not None
    assert drawn.to_dict() == report.to_dict()


def test_diagnose_charts_show_kv_usage_and_arrivals(capsys) -> None:
    out = _table(["diagnose", *KV, "--charts"], capsys)
    assert "KV usage over time (step log" in out and "full height = capacity 100.0 %" in out
    assert "Arrivals over time" in out
    assert "Prompt tokens (" not in out  # diagnose draws KV and arrivals only
    assert "\nCharts\n" not in _table(["diagnose", *KV], capsys)


def test_ascii_when_stdout_cannot_encode_blocks(capsys, monkeypatch) -> None:
    from yaotu_trace.cli.app import _encodes_blocks

    assert not _encodes_blocks(io.TextIOWrapper(io.BytesIO(), encoding="latin-1"))
    assert _encodes_blocks(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    monkeypatch.setattr("yaotu_trace.cli.app._encodes_blocks", lambda stream: False)
    out = _table(["analyze", CHAT, "--charts"], capsys)
    pictures = out[out.index("\nCharts\n"):out.index("\nArrivals\n")]
    assert "Arrivals over time" in pictures and "^p50" in pictures
    assert all(ord(ch) < 128 for ch in pictures)


def test_azure_code_arrivals_peak_inside_a_marked_busiest_window(capsys) -> None:
    trace = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    out = _table(["analyze", str(trace), "--charts"], capsys)
    lines = out.splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("Arrivals over time"))
    assert "one column = 40 s" in lines[at]  # 10 s bins, four to a column at width 100
    spark, spans = lines[at + 1][2:], lines[at + 2][2:]
    heights = [" ▁▂▃▄▅▆▇█".index(ch) for ch in spark]
    peak = heights.index(8)
    assert heights.count(8) == 1 and sorted(heights)[len(heights) // 2] <= 2  # peaked
    # The peak column (860 s: the sharpest 10 s) lies in the second busiest minute (from
    # 854 s); the busiest (from 569 s) holds the second tallest column.
    marked = {k for k, ch in enumerate(spans) if ch != " "}
    assert peak in marked
    assert spans[peak - 1:peak + 1] == "2▔" or spans[peak:peak + 2] == "2▔"
    first = spans.index("1")
    assert max(heights[first:first + 2]) == sorted(heights)[-2]
    assert "1 12.05 req/s from 9.5 min" in lines[at + 3]


def test_the_diagnose_docs_show_the_charts_as_drawn(capsys) -> None:
    """docs/diagnose.md: the charts of diag-kv-churn, as `trace diagnose --charts` draws them."""
    text = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    shown = text.split("On `diag-kv-churn` (`COLUMNS=100`):\n\n```\n", 1)[1].split("```", 1)[0]
    out = _table(["diagnose", *KV, "--charts"], capsys)
    assert shown in out
