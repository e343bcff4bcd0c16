"""Scenario options: an explicit 0 is checked, never replaced by a default; a scenario file's
value of the wrong type or out of range is a `ConfigFileError` (exit 3) naming the file, the key,
the value and the expected type; the same value on the command line is a usage error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from yaotu_trace.errors import ConfigError, ConfigFileError, ExitCode
from yaotu_trace.sim.scenario import (
    DEFAULT_MBU,
    DEFAULT_MFU,
    MAX_CLUSTER_BLOCKS,
    MAX_KV_BLOCKS,
    Scenario,
    check_scenario,
    load_scenario,
    resolve_scenario,
)

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "diag-healthy.parquet"
BASE = Scenario(model="Llama-3.1-8B", gpu="H100")


@pytest.mark.parametrize(("field", "option"), [
    ("mfu", "--mfu"), ("mbu", "--mbu"), ("tp", "--tp"), ("block_size", "--block-size"),
    ("max_num_seqs", "--max-num-seqs"), ("max_batched_tokens", "--max-batched-tokens"),
    ("instances", "--instances"), ("link_gbps", "--link-gbps"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
])
def test_an_explicit_zero_is_refused_not_replaced_by_the_default(field: str,
                                                                  option: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{option} 0 must be"):
        resolve_scenario(BASE.merged(Scenario(**{field: 0})))


def test_zero_where_zero_is_allowed_is_kept() -> None:
    resolved = resolve_scenario(BASE.merged(Scenario(
        long_prefill_token_threshold=0, host_gap_ms=0.0, overhead_ms=0.0, link_latency_ms=0.0)))
    assert resolved.config.step_cost.overhead_s == 0.0
    assert resolved.config.link_latency_s == 0.0


def test_mfu_and_mbu_given_are_used_and_absent_take_the_defaults() -> None:
    plain = resolve_scenario(BASE).config.step_cost
    tuned = resolve_scenario(BASE.merged(Scenario(mfu=DEFAULT_MFU / 2, mbu=DEFAULT_MBU / 2))).config
    assert tuned.step_cost.flops_per_s == pytest.approx(plain.flops_per_s / 2)
    assert tuned.step_cost.bytes_per_s == pytest.approx(plain.bytes_per_s / 2)


@pytest.mark.parametrize(("changes", "expected"), [
    ({"kv_blocks": MAX_KV_BLOCKS + 1}, "--kv-blocks 10000001 must be >= 2 and <= 10,000,000"),
    ({"kv_blocks": 1}, "--kv-blocks 1 must be >= 2"),
    ({"mfu": 1.5}, "--mfu 1.5 must be in (0, 1]"),
    ({"link_gbps": float("nan")}, "--link-gbps nan must be > 0"),
    ({"host_gap_ms": -1.0}, "--host-gap-ms -1.0 must be >= 0"),
    ({"overhead_ms": float("inf")}, "--overhead-ms inf must be >= 0"),
])
def test_out_of_range_options_are_usage_errors(changes: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_scenario(BASE.merged(Scenario(**changes)))
    assert str(info.value).startswith(expected)
    assert type(info.value) is ConfigError and info.value.exit_code == ExitCode.USAGE


def test_a_cluster_beyond_the_block_table_limit_is_refused() -> None:
    blocks = MAX_KV_BLOCKS
    instances = MAX_CLUSTER_BLOCKS // blocks + 1
    with pytest.raises(ConfigError, match="lower --kv-blocks or --instances"):
        resolve_scenario(BASE.merged(Scenario(kv_blocks=blocks, instances=instances)))


def scenario_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "expected"), [
    ('kv-blocks = "lots"', "key 'kv-blocks': 'lots' is text, expected a whole number (write it "
     "without quotes); e.g. kv-blocks = 4000"),
    ('mfu = "0.5"', "key 'mfu': '0.5' is text, expected a number (write it without quotes)"),
    ("max-num-seqs = [1, 2]", "key 'max-num-seqs': [1, 2] is a list, expected a whole number"),
    ("mbu = true", "key 'mbu': true is a boolean, expected a number"),
    ("kv-blocks = 2.5", "key 'kv-blocks': 2.5 is a number, expected a whole number"),
    ("chunked-prefill = 1", "key 'chunked-prefill': 1 is a whole number, expected true or false"),
    ("model = 8", "key 'model': 8 is a whole number, expected text"),
    ("instances = -3", "key 'instances': -3 must be >= 1 and <= 10,000 (the range of "
     "--instances)"),
    ("mfu = 0", "key 'mfu': 0 must be in (0, 1] (the range of --mfu)"),
    ("kv-blocks = 99999999999999999999", "key 'kv-blocks': 99999999999999999999 must be >= 2"),
    ("[serving]\nmfu = 0.5", "key 'serving': {'mfu': 0.5} is a table, expected"),
    ('pd = ["a", "b"]', "key 'pd': ['a', 'b'] is a list, expected text"),
])
def test_scenario_file_values_of_the_wrong_type_or_range(tmp_path: Path, text: str,
                                                         expected: str) -> None:
    path = scenario_file(tmp_path, text)
    if text.startswith("[serving]"):
        # an unknown table is an unknown option, named as such
        with pytest.raises(ConfigFileError, match="unknown option 'serving'"):
            load_scenario(path)
        return
    with pytest.raises(ConfigFileError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "expected"), [
    ('scheduler = "foo"', "key 'scheduler': --scheduler 'foo': choose one of vllm, sglang"),
    ('route = "randomly"', "key 'route': --route 'randomly': choose one of round-robin"),
    ('pd = "1-2"', "key 'pd': --pd '1-2': give prefill:decode instance counts"),
    ("pd = [0, 2]", "key 'pd': --pd 0:2: needs at least one prefill and one decode instance"),
    ('model = "gpt-9"', "key 'model': unknown model 'gpt-9'"),
    ('gpu = "Z9000"', "key 'gpu': unknown GPU 'Z9000'"),
])
def test_scenario_file_names_are_checked_when_read(tmp_path: Path, text: str,
                                                   expected: str) -> None:
    path = scenario_file(tmp_path, text)
    with pytest.raises(ConfigFileError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path}: {expected}")


def test_scenario_file_accepts_ints_for_numbers_and_a_pd_pair(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, 'kv-blocks = 4000\nmfu = 1\npd = [1, 2]\nroute = "kv-aware"\n')
    scenario = load_scenario(path)
    assert scenario.mfu == 1.0 and isinstance(scenario.mfu, float)
    assert scenario.pd == "1:2" and scenario.kv_blocks == 4000


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_cli_bad_scenario_file_is_exit_3_one_line(tmp_path: Path, command: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = scenario_file(tmp_path, 'kv-blocks = "lots"\n')
    good = tmp_path / "good.toml"
    good.write_text("kv-blocks = 4000\n")
    args = [command, str(SAMPLE), "--model", "Llama-3.1-8B", "--gpu", "H100", "--scenario",
            str(bad)]
    args += ["--out", str(tmp_path / "o.parquet")] if command == "simulate" else [
        "--scenario", str(good)]
    code, out, err = run_cli(args, capsys)
    assert code == ExitCode.INPUT and out == ""
    assert err == (f"error: {bad}: key 'kv-blocks': 'lots' is text, expected a whole number "
                   "(write it without quotes); e.g. kv-blocks = 4000\n")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize(("option", "value"), [("--mfu", "0"), ("--mbu", "0"),
                                               ("--kv-blocks", "100000000"),
                                               ("--link-gbps", "nan")])
def test_cli_bad_option_value_is_a_usage_error(tmp_path: Path, option: str, value: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["simulate", str(SAMPLE), "--model", "Llama-3.1-8B", "--gpu",
                            "H100", option, value, "--out", str(tmp_path / "o.parquet")],
                           capsys)
    assert code == ExitCode.USAGE, err
    # Click checks the ranges it knows (--link-gbps >= 0.001) itself, in its own words.
    assert err.startswith("error: ") and option in err and err.count("\n") == 1
