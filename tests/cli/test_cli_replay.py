"""`trace replay`: options map onto the rules, the report and `--out` carry the spec's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import run_cli, shared_trace

from yaotu_trace.data.canonical import write_trace
from yaotu_trace.errors import ExitCode


@pytest.fixture()
def worked(tmp_path: Path) -> Path:
    path = tmp_path / "worked.jsonl"
    write_trace(
        pd.DataFrame({
            "request_id": ["a", "b", "c"],
            "arrival_s": [0.0, 0.5, 2.0],
            "prompt_len": [4, 4, 4],
            "output_len": [2, 3, 1],
            "prompt_tokens": [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]],
            "tenant": ["t1", "t1", "t2"],
        }),
        path,
    )
    return path


def test_worked_example_json(worked: Path, capsys) -> None:
    code, out, err = run_cli(["replay", str(worked), "--preset", "none", "--block-size", "1",
                          "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    section = doc["prefix_reuse"]
    assert section["saved_prefill_tokens"] == 3
    assert section["remaining_prefill_tokens"] == 9
    assert section["hit_ratio"] == 0.25
    assert doc["config"]["rules"]["block_size_tokens"] == 1
    assert section["waterfall"]["ideal_hit_tokens"] == 3


def test_flags_override_the_preset(worked: Path, capsys) -> None:
    code, out, _ = run_cli(["replay", str(worked), "--preset", "vllm", "--block-size", "2",
                        "--no-last-token-rule", "--no-tenant-isolation", "--touch-order",
                        "head-first", "--capacity", "8tok", "--eviction", "lfu", "--route",
                        "round-robin", "--instances", "2", "-f", "json"], capsys)
    assert code == ExitCode.OK
    rules = json.loads(out)["config"]["rules"]
    assert rules["block_size_tokens"] == 2
    assert rules["last_token_rule"] is False
    assert rules["tenant_isolation"] is False
    assert rules["touch_order"] == "head-first"
    assert rules["capacity_blocks"] == 4
    assert rules["eviction"] == "lfu"
    assert rules["scope"] == "instance"
    assert rules["instances"] == 2


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_out_writes_per_request_columns(worked: Path, tmp_path: Path, capsys, suffix) -> None:
    target = tmp_path / f"hits{suffix}"
    code, _, _ = run_cli(["replay", str(worked), "--preset", "none", "--block-size", "2",
                      "--out", str(target)], capsys)
    assert code == ExitCode.OK
    table = (pq.read_table(target).to_pandas() if suffix == ".parquet"
             else pd.read_csv(target))
    assert table["request_id"].tolist() == ["a", "b", "c"]
    assert table["hit_tokens"].tolist() == [0, 2, 0]
    assert table["ideal_hit_tokens"].tolist() == [0, 3, 0]
    assert table["loss_block_granularity_tokens"].tolist() == [0, 1, 0]
    assert {"prompt_tokens", "recompute_tokens", "loss_capacity_tokens"} <= set(table.columns)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bad_out_suffix_and_bad_block_size_are_usage_errors(worked: Path, tmp_path: Path,
                                                            capsys) -> None:
    code, _, err = run_cli(["replay", str(worked), "--out", str(tmp_path / "x.txt")], capsys)
    assert code == ExitCode.USAGE and err.startswith("error: ") and err.count("\n") == 1
    moon = shared_trace("mooncake/synthetic_trace.jsonl")
    code, _, err = run_cli(["replay", str(moon), "--block-size", "16"], capsys)
    assert code == ExitCode.USAGE
    assert "cannot be split" in err


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_renderers_show_the_headline(worked: Path, capsys, fmt: str) -> None:
    code, out, _ = run_cli(["replay", str(worked), "--preset", "none", "--block-size", "1",
                        "-f", fmt], capsys)
    assert code == ExitCode.OK
    assert "hit ratio (token-weighted)" in out
    assert "25.0 %" in out
    assert "Loss waterfall" in out


SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "multitenant.csv"


def test_replay_grid_prints_one_row_per_combination(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["replay", str(SAMPLE), "--grid", "block-size=16,64", "--grid",
                        "tenant-isolation=on,off", "--grid", "capacity=2000,unlimited",
                        "--jobs", "2", "-f", "json"], capsys)
    assert code == ExitCode.OK
    doc = json.loads(out)
    rows = doc["replay_grid"]["rows"]
    assert len(rows) == 8
    assert [(r["block_size_tokens"], r["tenant_isolation"], r["capacity"]) for r in rows][:3] == [
        (16, True, "2000"), (16, True, "unlimited"), (16, False, "2000")]
    # Each row is the single replay under its rules.
    code, single, _ = run_cli(["replay", str(SAMPLE), "--block-size", "64", "--no-tenant-isolation",
                           "--capacity", "2000", "--no-waterfall", "-f", "json"], capsys)
    assert json.loads(single)["prefix_reuse"]["saved_prefill_tokens"] == rows[6][
        "saved_prefill_tokens"]
    code, table, _ = run_cli(["replay", str(SAMPLE), "--grid", "capacity=2000,unlimited"], capsys)
    assert code == ExitCode.OK and "Replay grid (2 rule sets" in table


@pytest.mark.parametrize("bad", ["size=16", "block-size=", "block-size=0,16",
                                 "tenant-isolation=maybe"])
def test_replay_grid_bad_axis_is_a_usage_error(bad: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["replay", str(SAMPLE), "--grid", bad], capsys)
    assert code == ExitCode.USAGE and out == "" and "--grid" in err


def test_replay_global_cache_with_jobs_says_it_ran_in_one_process(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["replay", str(SAMPLE), "--capacity", "2000", "--jobs", "2",
                        "-f", "json"], capsys)
    assert code == ExitCode.OK
    notes = json.loads(out)["prefix_reuse"]["notes"]
    assert any("one global cache is one sequential LRU: it cannot be split" in n for n in notes)


def test_replay_per_tenant_capacity_needs_isolation(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["replay", str(SAMPLE), "--capacity", "2000", "--capacity-per-tenant",
                        "--no-tenant-isolation"], capsys)
    assert code == ExitCode.USAGE and "--tenant-isolation" in err


def test_stats_line_goes_to_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["replay", str(SAMPLE), "--stats", "-f", "json"], capsys)
    assert code == ExitCode.OK
    json.loads(out)
    assert err.startswith("stats: ") and "peak RSS" in err


def test_the_traces_instances_are_the_caches_the_rules_show(tmp_path: Path, capsys) -> None:
    # GIVEN a trace whose instance column names two instances, and --instances 3
    path = tmp_path / "two.jsonl"
    write_trace(pd.DataFrame({
        "request_id": ["a", "b", "c", "d"], "arrival_s": [0.0, 0.5, 1.0, 1.5],
        "prompt_len": [4, 4, 4, 4], "output_len": [1, 1, 1, 1],
        "prompt_tokens": [[1, 2, 3, 4]] * 4, "instance": ["x", "y", "x", "y"]}), path)
    args = ["replay", str(path), "--block-size", "1", "--scope", "instance", "--instances", "3"]
    # WHEN replayed with one cache per instance
    code, out, _ = run_cli([*args, "-f", "json"], capsys)
    assert code == ExitCode.OK
    doc = json.loads(out)["prefix_reuse"]
    # THEN the trace's two caches ran (each hits its second request: 3 of 4 tokens), the notes
    # say --instances did not count them, and the rules shown name two instances
    assert [g["hit_tokens"] for g in doc["per_instance"]] == [3, 3]
    assert any("trace's instance column (2); --instances 3 counts" in n for n in doc["notes"])
    code, out, _ = run_cli(args, capsys)
    assert code == ExitCode.OK
    rules = [line.split() for line in out.splitlines() if line.split()[:1] == ["instances"]]
    assert rules == [["instances", "2"]]


def test_capacity_in_the_traces_larger_blocks_says_what_it_counts(capsys) -> None:
    """tests/fixtures/aiperf_tiny_mooncake.jsonl has 512-token hash ids: under vLLM's rules
    the replay runs in 512-token blocks, so `--capacity 3` is 1,536 tokens, not three of
    vLLM's 16-token blocks; the output says so, with the tokens an engine's pool would be.
    In tokens, with a block size given, or under no engine's rules there is nothing to say."""
    from conftest import FIXTURES

    trace = str(FIXTURES / "aiperf_tiny_mooncake.jsonl")
    code, out, _ = run_cli(["replay", trace, "--preset", "vllm", "--capacity", "3",
                            "--format", "json", "--no-waterfall"], capsys)
    assert code == 0
    notes = json.loads(out)["prefix_reuse"]["notes"]
    assert ("--capacity 3 counts blocks of 512 tokens, the trace's (1,536 tokens); 3 of "
            "vllm's 16-token blocks (its num_gpu_blocks) would be --capacity 48tok") in notes
    for other in (["--preset", "vllm", "--capacity", "1536tok"],
                  ["--preset", "vllm", "--capacity", "3", "--block-size", "512"],
                  ["--preset", "none", "--capacity", "3"]):  # no engine: nothing to count in
        code, out, _ = run_cli(["replay", trace, *other, "--format", "json",
                                "--no-waterfall"], capsys)
        assert code == 0
        assert not any("counts blocks" in n for n in json.loads(out)["prefix_reuse"]["notes"])


def test_sweep_capacities_in_the_traces_larger_blocks_say_what_they_count(capsys) -> None:
    """`trace sweep --capacities` reads its capacities as `--capacity` does: in blocks of the
    trace's 512 tokens under vLLM's rules. The curve's notes name the ones given in blocks
    and what they would be in vLLM's 16-token blocks; a capacity in tokens is left out, and a
    block size given says nothing."""
    from conftest import FIXTURES

    trace = str(FIXTURES / "aiperf_tiny_mooncake.jsonl")
    code, out, _ = run_cli(["sweep", trace, "--preset", "vllm", "--capacities", "3,6,2048tok",
                            "--format", "json"], capsys)
    assert code == 0
    notes = json.loads(out)["capacity_curve"]["notes"]
    assert ("--capacities 3,6 count blocks of 512 tokens, the trace's (3 is 1,536 tokens); as "
            "vllm's 16-token blocks (its num_gpu_blocks) they would be --capacities "
            "48tok,96tok") in notes
    for other in (["--capacities", "2048tok"], ["--capacities", "3,6", "--block-size", "512"]):
        code, out, _ = run_cli(["sweep", trace, "--preset", "vllm", *other, "--format", "json"],
                               capsys)
        assert code == 0
        assert not any("count blocks" in n or "counts blocks" in n
                       for n in json.loads(out)["capacity_curve"]["notes"])
