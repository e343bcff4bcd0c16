"""The option values the command line fills: one set of diagnosis options (`trace diagnose`,
`check` and `report`, and `diff` for both runs, take the same options, fill one
`DiagnosisOptions` from them and judge a run alike), and `trace replay` sets every replay
option."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer.main

from yaotu_trace.cli import _register_commands, main
from yaotu_trace.cli.app import app
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ExitCode
from yaotu_trace.prefix.options import ReplayOptions

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
CHURN = str(SAMPLES / "diag-kv-churn.parquet")
CHURN_STEPS = str(SAMPLES / "diag-kv-churn.steps.parquet")
METRICS = str(ROOT / "tests" / "data" / "prom_vllm_small.json")
# The command-line name of the fields whose option is spelled otherwise.
PARAMETER = {"block_size_tokens": "block_size", "thresholds": "threshold"}
DIAGNOSIS_PARAMETERS = {PARAMETER.get(f.name, f.name) for f in fields(DiagnosisOptions)}
# Every diagnosis option, each given a value other than its default.
GIVEN = ["--log-tz", "+08:00", "--model", "llama-3.1-8b", "--gpu", "H100",
         "--kv-bytes-per-token", "1000", "--kv-dtype", "fp8", "--kv-capacity", "20000",
         "--block-size", "32", "--max-num-seqs", "8", "--max-batched-tokens", "2048",
         "--link-gbps", "100", "--preset", "sglang", "-t", "stall_factor=4", "-t",
         "window_s=10", "--jobs", "2", "--dask", "local"]


def _params(command: str) -> list[Any]:
    _register_commands()
    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined,no-any-return]


def _diagnosis_group(command: str) -> dict[str, tuple[object, ...]]:
    """The command's diagnosis options: name, help, default, flags and type of each."""
    return {p.name: (p.help, p.default, tuple(sorted(p.opts)), str(p.bare_type), p.multiple)
            for p in _params(command) if p.name in DIAGNOSIS_PARAMETERS}


def test_diagnose_check_and_report_take_the_same_diagnosis_options() -> None:
    diagnose = _diagnosis_group("diagnose")
    assert set(diagnose) == DIAGNOSIS_PARAMETERS
    assert _diagnosis_group("check") == diagnose
    assert _diagnosis_group("report") == diagnose
    # The diff judges two runs: each has its own telemetry (--metrics-before/--metrics-after).
    assert _diagnosis_group("diff") == {k: v for k, v in diagnose.items() if k != "metrics"}


class _Captured(Exception):
    """Raised by the stand-in command once it has the options the command line built."""


@pytest.mark.parametrize("command", ["diagnose", "check", "report", "diff"])
def test_each_command_line_builds_the_same_options(command: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    module = importlib.import_module(f"yaotu_trace.commands.{command}")
    seen: list[DiagnosisOptions] = []

    def stand_in(*args: Any, **kwargs: Any) -> None:
        seen.append(next(a for a in (*args, *kwargs.values())
                         if isinstance(a, DiagnosisOptions)))
        raise _Captured

    monkeypatch.setattr(module, command, stand_in)
    trace = [CHURN, CHURN] if command == "diff" else [CHURN]
    metrics = "--metrics-after" if command == "diff" else "--metrics"
    assert main([command, *trace, metrics, METRICS, *GIVEN, "--quiet"]) == ExitCode.INTERNAL
    capsys.readouterr()
    assert seen == [DiagnosisOptions(
        metrics=Path(METRICS), log_tz="+08:00", model="llama-3.1-8b", gpu="H100",
        kv_bytes_per_token=1000, kv_dtype="fp8", kv_capacity="20000", block_size_tokens=32,
        max_num_seqs=8, max_batched_tokens=2048, link_gbps=100.0, preset="sglang",
        thresholds=("stall_factor=4", "window_s=10"), jobs=2, dask="local")]


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    code = main([*args, "--format", "json", "--quiet"])
    out, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.FINDINGS), err
    return json.loads(out)  # type: ignore[no-any-return]


def _gpu_seconds(ledger: list[dict[str, Any]]) -> float | None:
    entry = next(e for e in ledger if e["remedy"] == "larger_kv_pool")
    return next(q["value"] for q in entry["saves"] if q["name"] == "prefill_gpu_seconds")


def test_check_and_report_price_the_ledger_in_gpu_seconds_with_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--gpu` reaches the diagnosis of `check` and `report` as it does `diagnose`'s (it used
    to state the hardware of a comparison only, so the ledger had no GPU-seconds there)."""
    checks = tmp_path / "checks.toml"
    checks.write_text('[[check]]\npath = "ledger[remedy=larger_kv_pool].saves'
                      '.prefill_gpu_seconds.value"\nop = ">"\nvalue = 0\n', encoding="utf-8")
    run = [CHURN, "--steps", CHURN_STEPS, "--model", "llama-3.1-8b"]
    diagnosed = _gpu_seconds(_json(["diagnose", *run, "--gpu", "H100"], capsys)["ledger"])
    assert diagnosed is not None and diagnosed > 0
    assert _gpu_seconds(_json(["report", *run, "--gpu", "H100"], capsys)["ledger"]) == diagnosed
    assert _gpu_seconds(_json(["report", *run], capsys)["ledger"]) is None
    priced = _json(["check", *run, "--gpu", "H100", "--config", str(checks)], capsys)
    result = priced["checks"]["results"][0]
    assert (result["status"], result["value"]) == ("passed", diagnosed)
    unpriced = _json(["check", *run, "--config", str(checks)], capsys)
    assert unpriced["checks"]["results"][0]["value"] is None


def test_trace_replay_sets_every_replay_option() -> None:
    """A replay option (a new rule) is an option of `trace replay` too."""
    options = {"block_size" if f.name == "block_size_tokens" else f.name
               for f in fields(ReplayOptions)}
    assert options <= {p.name for p in _params("replay")}
