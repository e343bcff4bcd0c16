"""`trace report --simulate`: a lengths-only trace gets modelled timing panels, marked so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import shared_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"
TIMING = ("queue_time", "ttft", "kv_over_time", "gaps")
ENGINE = ["--simulate", "--model", "Llama-3.1-8B", "--gpu", "H100"]


def _report(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", *args]) == ExitCode.OK
    return capsys.readouterr().out


def test_simulated_report_draws_modelled_timing_panels(capsys) -> None:
    page = _report([str(SAMPLE / "bursty.jsonl"), *ENGINE, "--max-num-seqs", "32",
                    "-f", "html"], capsys)
    for name in TIMING:
        match = re.search(rf'<svg class="plot" data-plot="{name}".*?</svg>', page, re.S)
        assert match and 'class="mark' in match.group(0), name
    captions = re.findall(r"<figcaption>([^<]*)</figcaption>", page)
    timed = [c for c in captions if c.startswith(("Queue", "Time to", "KV", "Inter-token"))]
    assert len(timed) == 4 and all(c.endswith("(modelled)") for c in timed)
    assert not any(c.endswith("(modelled)") for c in captions if c not in timed)
    banner = re.search(r'<section id="modelled".*?</section>', page, re.S)
    assert banner and "Llama-3.1-8B" in banner.group(0) and "max_num_seqs 32" in banner.group(0)
    assert "Timing modelled, not observed" in page


def test_simulated_report_json_states_the_engine_and_is_deterministic(capsys) -> None:
    args = [str(SAMPLE / "bursty.jsonl"), *ENGINE, "--kv-blocks", "3000", "-f", "json"]
    first, second = _report(args, capsys), _report(args, capsys)
    assert first == second
    doc = json.loads(first)
    modelled = doc["config"]["modelled"]
    assert modelled["model"] == "Llama-3.1-8B" and modelled["gpu"].startswith("H100")
    assert modelled["engine"]["kv_blocks"] == 3000
    assert "not observed" in modelled["basis"]
    assert doc["config"]["kv_capacity_tokens"] == pytest.approx(3000 * 16, rel=0.01)
    assert all(doc["plots"][name] is not None for name in TIMING)
    assert {a["status"] for a in doc["axes"]} != {"insufficient_data"}
    assert "modelled" not in json.loads(
        _report([str(SAMPLE / "bursty.jsonl"), "-f", "json"], capsys))["config"]


@pytest.mark.parametrize(("args", "says"), [
    (["bursty.jsonl", "--simulate"], "--model Llama-3.1-8B --gpu H100"),
    (["diag-burst.parquet", *ENGINE], "would replace the trace's observed timing"),
    (["bursty.jsonl", *ENGINE, "--steps", "diag-burst.steps.parquet"], "--steps is observed"),
    (["bursty.jsonl", *ENGINE, "--before", "bursty.jsonl"], "--before compares"),
    (["bursty.jsonl", "--kv-blocks", "100"], "give --simulate too"),
    (["bursty.jsonl", *ENGINE, "--kv-blocks", "5"], "no request fits the modelled KV pool of 5"),
])
def test_simulate_refusals_name_the_option(args: list[str], says: str, tmp_path: Path,
                                           capsys) -> None:
    paths = [str(SAMPLE / a) if a.endswith((".jsonl", ".parquet")) else a for a in args]
    out = tmp_path / "r.html"
    assert main(["report", *paths, "-o", str(out)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_mooncake_conversation_simulated_report_fills_the_timing_panels(capsys) -> None:
    trace = shared_trace("mooncake/conversation_trace.jsonl")
    doc = json.loads(_report([str(trace), *ENGINE, "-f", "json"], capsys))
    assert doc["config"]["modelled"]["engine"]["max_num_seqs"] > 0
    assert all(doc["plots"][name] is not None for name in TIMING)
    assert doc["plots"]["ttft"]["total"] == doc["input"]["requests"]
