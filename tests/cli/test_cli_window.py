"""`--warmup` on `trace replay`, `trace sweep` and `trace analyze`: the window reaches the report,
`--out` marks the measured requests, and a bad window is a one-line usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import ExitCode


@pytest.fixture()
def worked(tmp_path: Path) -> Path:
    """replay-spec §7's worked example, arriving at 0, 0.5 and 2 s: hits [0, 3, 0] at B = 1."""
    path = tmp_path / "worked.jsonl"
    write_trace(
        pd.DataFrame({
            "request_id": ["a", "b", "c"],
            "arrival_s": [0.0, 0.5, 2.0],
            "prompt_len": [4, 4, 4],
            "output_len": [2, 3, 1],
            "prompt_tokens": [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]],
        }),
        path,
    )
    return path


RULES = ["--preset", "none", "--block-size", "1"]


def test_replay_counts_after_the_window(worked: Path, capsys) -> None:
    """--warmup 1: requests b and c are measured, 3 of their 8 prompt tokens hit (b's hit on a,
    which the window left out of the totals but not out of the cache)."""
    code, out, err = run_cli(["replay", str(worked), *RULES, "--warmup", "1", "-f", "json"],
                             capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    section = doc["prefix_reuse"]
    assert section["saved_prefill_tokens"] == 3
    assert section["prompt_tokens"] == 8
    assert section["requests"] == 2
    assert section["hit_ratio"] == 3 / 8
    window = section["measurement_window"]
    assert (window["warmup_requests"], window["measured_requests"]) == (1, 2)
    assert window["warmup_seconds"] == 0.5
    assert doc["config"]["warmup"] == "1"


def test_replay_time_window_and_console(worked: Path, capsys) -> None:
    """--warmup 1s: a and b arrive before 1 s; only c (no hit) is measured."""
    code, out, err = run_cli(["replay", str(worked), *RULES, "--warmup", "1s"], capsys)
    assert code == ExitCode.OK, err
    assert "Measurement window" in out
    assert "last 1 of 3 requests" in out


def test_out_keeps_every_request_and_marks_the_measured(worked: Path, tmp_path: Path,
                                                        capsys) -> None:
    out_file = tmp_path / "hits.csv"
    code, _, err = run_cli(["replay", str(worked), *RULES, "--warmup", "50%", "--out",
                            str(out_file), "-q"], capsys)
    assert code == ExitCode.OK, err
    table = pd.read_csv(out_file)
    assert table["request_id"].tolist() == ["a", "b", "c"]
    assert table["hit_tokens"].tolist() == [0, 3, 0]
    assert table["measured"].tolist() == [False, True, True]  # floor(3 · 0.5) = 1 warm-up


def test_without_warmup_out_has_no_measured_column(worked: Path, tmp_path: Path,
                                                    capsys) -> None:
    out_file = tmp_path / "hits.csv"
    code, out, _ = run_cli(["replay", str(worked), *RULES, "--out", str(out_file), "-f",
                            "json"], capsys)
    assert code == ExitCode.OK
    assert "measured" not in pd.read_csv(out_file).columns
    doc = json.loads(out)
    assert doc["prefix_reuse"]["measurement_window"] is None
    assert "warmup" not in doc["config"]


def test_replay_marks_a_capacity_that_never_filled(worked: Path, capsys) -> None:
    """Request a inserts 4 distinct blocks before a window of 1: 4 blocks filled, 5 did not."""
    for capacity, filled in (("4", True), ("5", False)):
        code, out, err = run_cli(["replay", str(worked), *RULES, "--capacity", capacity,
                                  "--warmup", "1", "-f", "json"], capsys)
        assert code == ExitCode.OK, err
        window = json.loads(out)["prefix_reuse"]["measurement_window"]
        assert window["filled_before_window"] is filled


def test_sweep_marks_each_point(worked: Path, capsys) -> None:
    code, out, err = run_cli(["sweep", str(worked), *RULES, "--warmup", "1", "-f", "json"],
                             capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    curve = doc["capacity_curve"]
    assert curve["window"]["distinct_blocks_before_window"] == 4
    assert curve["requests"] == 2
    assert curve["unlimited_hit_tokens"] == 3
    for point in curve["points"]:
        assert point["filled_before_window"] is (point["capacity_blocks"] <= 4)
    assert doc["config"]["warmup"] == "1"


def test_analyze_counts_its_reuse_after_the_window(worked: Path, capsys) -> None:
    code, out, err = run_cli(["analyze", str(worked), "--warmup", "2", "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    reuse = doc["prefix_reuse"]
    # vllm preset, B = 16: no full block in 4-token prompts; the window is still reported.
    assert reuse["window"]["measured_requests"] == 1
    assert doc["config"]["warmup"] == "2"


@pytest.mark.parametrize("command", ["replay", "sweep", "analyze"])
@pytest.mark.parametrize(("value", "says"), [
    ("-1", "not a window"),
    ("150%", "below 100%"),
    ("abc", "not a window"),
    ("3", "covers all 3 requests"),
    ("1h", "covers all 3 requests"),
])
def test_a_bad_window_is_a_one_line_usage_error(worked: Path, capsys, command: str,
                                                value: str, says: str) -> None:
    code, out, err = run_cli([command, str(worked), "--warmup", value], capsys)
    assert code == ExitCode.USAGE, err
    assert out == ""
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_warmup_and_grid_are_refused_together(worked: Path, capsys) -> None:
    code, _, err = run_cli(["replay", str(worked), "--warmup", "1", "--grid",
                            "block-size=1,2"], capsys)
    assert code == ExitCode.USAGE
    assert "--grid" in err
