"""Every command's JSON validates against the shipped schema; order is deterministic, no NaN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import shared_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.json_report import json_schema

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
SCENARIOS = ROOT / "docs" / "scenarios"


def _no_nan(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"non-finite number {name} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def validator() -> object:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small simulated trace with request timing, token times and a step log."""
    root = tmp_path_factory.mktemp("timed")
    req, steps = root / "sim.parquet", root / "steps.parquet"
    assert main(["simulate", str(SAMPLES / "bursty.jsonl"), "--model", "Llama-3.1-8B",
                 "--gpu", "H100", "--out", str(req), "--steps-out", str(steps),
                 "-f", "json"]) == ExitCode.OK
    return req, steps


def _json_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    code = main([*args, "--format", "json"])
    out = capsys.readouterr().out
    assert code in (ExitCode.OK, ExitCode.FINDINGS), args
    doc = _no_nan(out)
    assert isinstance(doc, dict)
    return doc


def _valid(validator: object, doc: dict) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))  # type: ignore[attr-defined]
    assert not errors, "; ".join(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5])


@pytest.mark.parametrize("sample", ["chat.parquet", "multitenant.csv", "bursty.jsonl"])
@pytest.mark.parametrize("command", ["analyze", "replay", "sweep", "diagnose", "report"])
def test_json_of_every_trace_command_validates(validator, capsys, sample: str,
                                               command: str) -> None:
    doc = _json_of([command, str(SAMPLES / sample)], capsys)
    assert doc["command"] == command
    assert list(doc)[:5] == ["schema_version", "tool", "command", "input", "config"]
    _valid(validator, doc)


def test_json_of_timed_commands_validates(validator, capsys, timed, tmp_path: Path) -> None:
    req, steps = timed
    with_steps = ["--steps", str(steps)]
    config = tmp_path / "checks.toml"
    config.write_text('[[check]]\npath = "queueing.queue_time_s.p99"\nop = "<="\nvalue = 60\n'
                      '[[check]]\npath = "axes[name=kv_memory].status"\nop = "!="\n'
                      'value = "bottleneck"\n')
    baseline = tmp_path / "baseline.json"
    assert main(["diagnose", str(req), *with_steps, "-f", "json", "-o", str(baseline)]) == 0
    runs = {
        "analyze": ["analyze", str(req), *with_steps],
        "diagnose": ["diagnose", str(req), *with_steps],
        "report": ["report", str(req), *with_steps],
        "check": ["check", str(req), *with_steps, "-c", str(config), "--baseline",
                  str(baseline), "--fail-on", "bottleneck"],
        "simulate": ["simulate", str(SAMPLES / "bursty.jsonl"), "--model", "Llama-3.1-8B",
                     "--gpu", "H100", "--out", str(tmp_path / "again.parquet")],
        "compare": ["compare", str(SAMPLES / "bursty.jsonl"), "--model", "Llama-3.1-8B",
                    "--gpu", "H100", "--scenario", str(SCENARIOS / "baseline.toml"),
                    "--scenario", str(SCENARIOS / "chunked.toml")],
        "models": ["models"],
    }
    for name, args in runs.items():
        doc = _json_of(args, capsys)
        assert doc["command"] == name
        _valid(validator, doc)


def test_json_of_replay_grid_validates(validator, capsys) -> None:
    doc = _json_of(["replay", str(SAMPLES / "multitenant.csv"), "--grid", "block-size=16,32",
                    "--grid", "capacity=1000,unlimited"], capsys)
    assert len(doc["replay_grid"]["rows"]) == 4
    _valid(validator, doc)
    del doc["replay_grid"]
    assert list(validator.iter_errors(doc))  # type: ignore[attr-defined]


def test_json_of_a_public_trace_validates(validator, capsys) -> None:
    trace = shared_trace("mooncake/conversation_trace.jsonl")
    for command in ("analyze", "diagnose"):
        _valid(validator, _json_of([command, str(trace)], capsys))


def test_json_order_is_deterministic(capsys) -> None:
    args = ["diagnose", str(SAMPLES / "multitenant.csv"), "--format", "json"]
    outputs = []
    for _ in range(2):
        main(args)
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


def test_schema_rejects_a_report_missing_a_pinned_key(validator, capsys) -> None:
    doc = _json_of(["diagnose", str(SAMPLES / "multitenant.csv")], capsys)
    del doc["axes"][0]["status"]
    assert list(validator.iter_errors(doc))  # type: ignore[attr-defined]
    doc = _json_of(["analyze", str(SAMPLES / "multitenant.csv")], capsys)
    doc["schema_version"] = 2
    assert list(validator.iter_errors(doc))  # type: ignore[attr-defined]
