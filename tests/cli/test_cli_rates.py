"""analyze, replay and sweep agree on one file; every hit rate is labelled in JSON, console and
Markdown; `trace sweep --capacities` puts the curve and a real replay side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, run_json, shared_trace

from yaotu_trace.errors import ExitCode
from yaotu_trace.prefix import rates

ROOT = Path(__file__).resolve().parents[2]
CHAT = ROOT / "sample_traces" / "chat.parquet"
MULTITENANT = ROOT / "sample_traces" / "multitenant.csv"
KEYS = [d.key for d in rates.DEFINITIONS]


def _three_answers(path: Path, capsys, *preset: str) -> list[tuple[str, float, int]]:
    """(preset, unlimited token-weighted hit ratio, distinct blocks) from each command."""
    analyzed = run_json(["analyze", str(path), *preset, "-f", "json", "-q"], capsys)
    replayed = run_json(["replay", str(path), *preset, "--no-waterfall", "-f", "json", "-q"],
                        capsys)
    swept = run_json(["sweep", str(path), *preset, "--points", "2", "-f", "json", "-q"], capsys)
    a, r, s = analyzed["prefix_reuse"], replayed["prefix_reuse"], swept["capacity_curve"]
    return [(a["preset"], a["hit_ratio"], a["distinct_blocks"]),
            (r["preset"], r["hit_ratio"], r["blocks"]["distinct"]),
            (s["preset"], s["unlimited_hit_ratio"], s["distinct_blocks"])]


@pytest.mark.parametrize("preset", [(), ("--preset", "sglang"), ("--preset", "none")])
def test_analyze_replay_and_sweep_agree_on_a_sample(preset: tuple[str, ...], capsys) -> None:
    answers = _three_answers(CHAT, capsys, *preset)
    assert answers[0][0] == (preset[1] if preset else "vllm")
    assert answers[0] == answers[1] == answers[2]


def test_analyze_replay_and_sweep_agree_on_mooncake(capsys) -> None:
    """The issue's case: analyze used the vllm preset on a Mooncake trace (37.3 %, 170,899
    distinct blocks) while replay, sweep and diagnose used mooncake (37.4 %, 182,790)."""
    answers = _three_answers(shared_trace("mooncake/conversation_trace.jsonl"), capsys)
    assert answers[0] == answers[1] == answers[2]
    name, ratio, distinct = answers[0]
    assert (name, round(ratio, 3), distinct) == ("mooncake", 0.374, 182_790)


def test_every_rate_is_labelled_in_json(capsys) -> None:
    replayed = run_json(["replay", str(MULTITENANT), "--capacity", "2000", "-f", "json", "-q"],
                        capsys)["prefix_reuse"]
    analyzed = run_json(["analyze", str(MULTITENANT), "-f", "json", "-q"], capsys)["prefix_reuse"]
    for section in (replayed, analyzed):
        assert list(section["hit_rates"]) == KEYS
        for entry in section["hit_rates"].values():
            assert set(entry) == {"value", "label", "formula", "capacity", "used_by"}
        assert section["hit_rates"]["token_weighted"]["value"] == section["hit_ratio"]
    assert replayed["hit_rates"]["token_weighted"]["capacity"] == "2,000 blocks"
    assert analyzed["hit_rates"]["token_weighted"]["capacity"] == "unlimited"


def test_every_rate_is_labelled_in_console_and_markdown(capsys) -> None:
    for fmt in ("table", "markdown"):
        code, out, err = run_cli(["replay", str(MULTITENANT), "-f", fmt, "-q"], capsys)
        assert code == ExitCode.OK, err
        for d in rates.DEFINITIONS:
            assert d.label in out
        code, out, err = run_cli(["analyze", str(MULTITENANT), "-f", fmt, "-q"], capsys)
        assert code == ExitCode.OK, err
        assert "AIPerf: request-averaged blocks" in out and "token-weighted" in out


def test_sweep_capacities_curve_and_replay(capsys) -> None:
    """Rows come in the order given; each replay column equals `trace replay --capacity` on the
    same file, the unlimited row equals the curve's unlimited hits, and under the clean model
    (preset none) the one-pass curve equals the replay exactly (spec §6: the curve equals
    separate LRU replays)."""
    asked = ["4000", "unlimited", "20ktok", "300"]
    for preset in ("vllm", "none"):
        doc = run_json(["sweep", str(MULTITENANT), "--preset", preset, "--capacities",
                        ",".join(asked), "-f", "json", "-q"], capsys)
        table = doc["capacity_table"]
        assert [r["label"] for r in table["rows"]] == asked
        assert [r["capacity_blocks"] for r in table["rows"]] == [4000, None, 1250, 300]
        assert table["curve_model"] == "clean LRU"
        assert table["replay_model"] == ("vllm" if preset == "vllm" else "clean")
        assert table["hit_ratio_definition"].startswith("token-weighted")
        unlimited = table["rows"][1]
        assert unlimited["curve_hit_tokens"] == doc["capacity_curve"]["unlimited_hit_tokens"]
        assert unlimited["replay_hit_tokens"] == unlimited["curve_hit_tokens"]
        for row in table["rows"]:
            capacity = row["label"]
            replayed = run_json(["replay", str(MULTITENANT), "--preset", preset, "--capacity",
                                 capacity, "--no-waterfall", "-f", "json", "-q"], capsys)
            assert row["replay_hit_tokens"] == replayed["prefix_reuse"]["saved_prefill_tokens"]
            if preset == "none":
                assert row["curve_hit_tokens"] == row["replay_hit_tokens"]
        assert doc["config"]["capacities"] == asked


def test_sweep_capacities_in_bytes(capsys) -> None:
    """1 MiB at 1,024 KV bytes per token is 1,024 tokens = 64 blocks of 16."""
    doc = run_json(["sweep", str(MULTITENANT), "--capacities", "1MiB", "--kv-bytes-per-token",
                    "1024", "-f", "json", "-q"], capsys)
    row = doc["capacity_table"]["rows"][0]
    assert (row["capacity_blocks"], row["capacity_tokens"], row["capacity_bytes"]) == (
        64, 1024, 1024 * 1024)
    code, out, err = run_cli(["sweep", str(MULTITENANT), "--capacities", "1GiB,2GiB",
                              "--model", "llama-3.1-8b", "-q"], capsys)
    assert code == ExitCode.OK, err
    assert "KV bytes" in out and "curve (clean LRU)" in out and "replay (vllm)" in out


@pytest.mark.parametrize(("capacities", "needle"), [
    ("1GiB", "--model"),
    ("1000,,2000", "empty item"),
    ("lots", "capacity"),
])
def test_sweep_capacities_bad_input_is_one_line(capacities: str, needle: str, capsys) -> None:
    code, _out, err = run_cli(["sweep", str(MULTITENANT), "--capacities", capacities, "-q"],
                             capsys)
    assert code == ExitCode.USAGE
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_sweep_without_capacities_has_no_table(capsys) -> None:
    doc = run_json(["sweep", str(MULTITENANT), "--points", "2", "-f", "json", "-q"], capsys)
    assert "capacity_table" not in doc and "capacities" not in doc["config"]
    assert json.dumps(doc)  # builtins only


def test_check_reads_any_definition_from_the_analyze_overview(tmp_path: Path, capsys) -> None:
    """`trace check` gates on a labelled rate by its JSON path without running the diagnosis."""
    config = tmp_path / "checks.toml"
    config.write_text('[[check]]\npath = "prefix_reuse.hit_rates.'
                      'aiperf_request_averaged_blocks.value"\nop = ">="\nvalue = 0.5\n',
                      encoding="utf-8")
    doc = run_json(["check", str(CHAT), "--config", str(config), "-f", "json", "-q"], capsys)
    analyzed = run_json(["analyze", str(CHAT), "-f", "json", "-q"], capsys)
    expected = analyzed["prefix_reuse"]["hit_rates"]["aiperf_request_averaged_blocks"]["value"]
    (result,) = doc["checks"]["results"]
    assert result["status"] == "passed"
    assert result["value"] == expected
    assert "verdict" not in doc
