"""`trace diagnose --metrics FILE` without a trace: every axis judged from the telemetry alone.

The logs are tests/fixtures/serverlogs/ (engine logs from GitHub threads, sources in its README)
and the Prometheus files tests/fixtures/prom_*; every expected number was read off their lines by
hand, as the comments show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
from conftest import CHILD_TIMEOUT_S, FIXTURES

from tests.conftest import run_cli
from yaotu_trace.commands.diagnose import diagnose
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError, ExitCode
from yaotu_trace.render.json_report import json_schema

LOGS = FIXTURES / "serverlogs"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _doc(path: Path) -> dict[str, Any]:
    """The JSON document of `trace diagnose --metrics PATH`, no trace."""
    doc: dict[str, Any] = diagnose(None, DiagnosisOptions(metrics=path)).to_dict()
    return doc


def _axes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in doc["axes"]}


def _evidence(axis: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e["value"] for e in axis["evidence"]}


def test_vllm_log_with_preemption_warnings_is_a_kv_bottleneck() -> None:
    """vllm_generated_mixed.log: four RECOMPUTE warnings (cumulative 1–4) at 09:01:04, :05, :16
    and :17; the stats line before each shows KV usage 97.2 % (09:01:00) twice and 98.9 %
    (09:01:10) twice, mean 98.05 % ≥ kv_preempt_usage 95 %: K001, a full KV cache."""
    doc = _doc(LOGS / "vllm_generated_mixed.log")
    kv = _axes(doc)["kv_memory"]
    assert kv["status"] == "bottleneck" and kv["cause"] == "kv_capacity"
    assert [f["id"] for f in kv["findings"]] == ["K001"]
    assert kv["metrics"]["preemptions_total"] == 4
    assert kv["metrics"]["kv_usage_at_preemption"] == pytest.approx((0.972 * 2 + 0.989 * 2) / 4)
    assert kv["metrics"]["kv_capacity_tokens"] == 98_304  # "GPU KV cache size: 98,304 tokens"
    # No request lengths: the work the preemptions recompute is unknown, not zero.
    assert kv["metrics"]["recomputed_tokens"] is None
    assert kv["missing"][0].startswith("a request trace with prompt_len and output_len")
    assert doc["principal"] == "kv_memory"
    assert doc["verdict"]["summary"] == "verdict: kv_memory (kv_capacity) (telemetry only)"
    assert "judged from telemetry alone" in doc["verdict"]["reason"]


def test_vllm_log_standing_queue_at_the_running_cap_is_not_ok() -> None:
    """The same log's Waiting climbs 0 → 18 while Running rises to 24 and stays there: requests
    wait in 9 of the 12 stats lines (75 % ≥ waiting_share 25 %) with P75 running 22.25 of the
    24 seen (92.7 %). Without queue times no rule weighs the queue; the axis is undecided and
    says why, never ok."""
    queueing = _axes(_doc(LOGS / "vllm_generated_mixed.log"))["queueing"]
    assert queueing["status"] == "insufficient_data"
    ev = _evidence(queueing)
    assert ev["waiting_share"] == pytest.approx(9 / 12)
    assert ev["running_fill_p75"] == pytest.approx(22.25 / 24)
    assert any("requests waited in 75 % of the telemetry's samples, P75 running at 93 %" in n
               for n in queueing["notes"])
    assert queueing["missing"][0].startswith("a request trace with arrival_s, scheduled_s")


def test_vllm_log_waiting_at_full_kv_is_kv_admission() -> None:
    """vllm_v1_issue43295.log: Waiting 43, 42, 33, 23, 23 beside Running 18–21 and KV usage
    95.9, 95.5, 87.7, 95.9, 98.4 %: requests wait across every 5 s window of the log, at KV
    usage (95.9 + 95.5 + 87.7 + 95.9 + 98.4) / 5 = 94.68 % ≥ kv_admission_usage 90 %: Q005,
    admission blocked by KV memory, the principal axis."""
    doc = _doc(LOGS / "vllm_v1_issue43295.log")
    queueing = _axes(doc)["queueing"]
    assert queueing["status"] == "bottleneck" and queueing["cause"] == "kv_admission"
    assert [f["id"] for f in queueing["findings"]] == ["Q005"]
    ev = _evidence(queueing)
    assert ev["kv_usage_queued"] == pytest.approx(0.9468)
    assert ev["waiting_share"] == 1.0
    assert doc["principal"] == "queueing"
    # V1 stats lines carry no preemption count: KV memory at 98.4 % is undecided, not ok.
    kv = _axes(doc)["kv_memory"]
    assert kv["status"] == "insufficient_data"
    assert kv["metrics"]["preemptions_total"] is None
    assert any(n.startswith("no preemption count in the telemetry") for n in kv["notes"])
    remedies = {e["remedy"]: e for e in doc["ledger"]}
    saves = {q["name"]: q for q in remedies["larger_kv_pool"]["saves"]}
    assert saves["kv_blocked_queue_seconds"]["value"] is None
    assert saves["kv_blocked_queue_seconds"]["basis"].startswith("needs a request trace: ")


def test_sglang_log_observed_hit_rate_is_reported_on_prefix_reuse() -> None:
    """sglang_cached_pr13023.log: #cached-token 0 + 0 + 4 + 10 + 16 = 30 of #new-token + cached
    = 13,229 prompt tokens. Without prompt content the axis cannot say what reuse is lost, but
    shows the hit rate the engine observed."""
    reuse = _axes(_doc(LOGS / "sglang_cached_pr13023.log"))["prefix_reuse"]
    assert reuse["status"] == "insufficient_data"
    assert reuse["metrics"]["observed_source"] == "sglang:cached_tokens_total"
    assert _evidence(reuse)["observed_hit_rate"] == pytest.approx(30 / 13229)
    assert reuse["missing"][0].startswith("a request trace with prompt_tokens or "
                                          "prompt_block_ids")


def test_one_preemption_without_kv_usage_is_undecided() -> None:
    """vllm_v0_preemption_pr6102.log: one warning, total_num_cumulative_preemption=1, and no
    stats line: no KV usage to tell capacity from churn, no lengths to price it."""
    kv = _axes(_doc(LOGS / "vllm_v0_preemption_pr6102.log"))["kv_memory"]
    assert kv["status"] == "insufficient_data"
    assert _evidence(kv) == {"preemptions_total": 1}
    assert any("1 preemption(s) counted" in n for n in kv["notes"])


def test_prometheus_export_alone_gives_the_rules_it_gives_with_a_trace(tmp_path: Path) -> None:
    """prom_vllm_small.json: preemptions 10 → 12 → 1 (a reset) = 3, at KV usage 97 % and 99 %
    (mean 98 % ≥ 95 %: K001); waiting 1, 4, 5 (two engines summed) in every scrape, and engine
    0, the one exporting KV usage, waits at its 97 % and 99 % scrapes (mean 98 %: Q005);
    prefix hits (1200 − 200) / (5000 − 1000) queries = 25 %. The rules that fire from the
    telemetry alone fire with a request table on the same clock too."""
    alone = _doc(FIXTURES / "prom_vllm_small.json")
    axes = _axes(alone)
    assert axes["kv_memory"]["metrics"]["preemptions_total"] == 3
    assert [f["id"] for f in axes["kv_memory"]["findings"]] == ["K001"]
    assert [f["id"] for f in axes["queueing"]["findings"]] == ["Q005"]
    assert _evidence(axes["prefix_reuse"])["observed_hit_rate"] == pytest.approx(0.25)
    assert axes["pd_interference"]["status"] == "insufficient_data"
    assert alone["principal"] == "kv_memory"  # queueing for KV is its symptom
    trace = tmp_path / "requests.parquet"
    t0 = 1_732_931_200.0
    pd.DataFrame({"request_id": ["a", "b", "c", "d"],
                  "arrival_s": [t0, t0 + 10, t0 + 20, t0 + 30],
                  "prompt_len": [100] * 4, "output_len": [10] * 4}).to_parquet(trace)
    options = DiagnosisOptions(metrics=FIXTURES / "prom_vllm_small.json")
    with_trace = diagnose(trace, options).to_dict()
    for name, axis in _axes(with_trace).items():
        assert {f["id"] for f in axes[name]["findings"]} <= {f["id"] for f in axis["findings"]}
    assert with_trace["input"]["format"] != "telemetry only"


def test_prometheus_scrapes_alone_spiky_kv_demand_and_kv_admission() -> None:
    """tests/fixtures/prom_text/vllm_scrapes.prom, five /metrics snapshots at 0, 30, 60, 90, 115 s:
    preemptions 2 → 7 → 19, a restart, 2 → 5: 5 + 12 + 2 + 3 = 22; KV usage 5, 93, 99, 12, 2 %
    (mean 42.2 % < kv_low_usage 70 %) and at the four counter bumps the fuller of the scrapes
    around each (a preemption frees memory, so the scrape that shows it may already be
    emptier): 93, 99, 99, 12 % (mean 75.75 %, below 95 %): not a full cache but spiky demand,
    K005. Waiting 0, 4, 9, 0, 0:
    requests wait from the scrape at 30 s to the one at 90 s, at KV usage (93 + 99) / 2 = 96 %
    ≥ 90 % in the scrapes that see them: Q005, a symptom of kv_memory."""
    doc = _doc(FIXTURES / "prom_text" / "vllm_scrapes.prom")
    axes = _axes(doc)
    kv = axes["kv_memory"]
    assert kv["metrics"]["preemptions_total"] == 22
    assert kv["metrics"]["kv_usage_mean"] == pytest.approx(0.422)
    assert kv["metrics"]["kv_usage_at_preemption"] == pytest.approx(0.7575)
    assert (kv["status"], kv["cause"]) == ("warning", "spiky_demand")
    assert [f["id"] for f in kv["findings"]] == ["K005"]
    queueing = axes["queueing"]
    assert [f["id"] for f in queueing["findings"]] == ["Q005"]
    assert _evidence(queueing)["waiting_share"] == pytest.approx(0.4)
    assert _evidence(queueing)["kv_usage_queued"] == pytest.approx(0.96)
    assert doc["verdict"]["summary"] == ("verdict: kv_memory (spiky_demand); causes queueing "
                                         "(telemetry only)")


def test_input_says_telemetry_only() -> None:
    doc = _doc(LOGS / "vllm_v1_issue43295.log")
    inp = doc["input"]
    assert inp["format"] == "telemetry only"
    assert inp["path"] == str(LOGS / "vllm_v1_issue43295.log")
    assert (inp["requests"], inp["rows_read"], inp["columns"]) == (0, 0, [])
    assert inp["notes"][0].startswith(f"telemetry only: {LOGS / 'vllm_v1_issue43295.log'} "
                                      "judged without a request trace")
    assert any("is an engine server log" in n for n in inp["notes"])
    assert doc["config"]["metrics"]["path"] == str(LOGS / "vllm_v1_issue43295.log")
    for axis in doc["axes"]:
        assert axis["missing"][0].startswith("a request trace with ")
        assert "judged from telemetry alone (no request trace)" in axis["notes"]


def test_step_log_alone_is_telemetry_too() -> None:
    """diag-dispatch's step log by itself: the GPU idles between steps while requests wait,
    Q003, as the request trace with the same step log finds."""
    steps = SAMPLES / "diag-dispatch.steps.parquet"
    doc = diagnose(None, steps=steps).to_dict()
    queueing = _axes(doc)["queueing"]
    assert [f["id"] for f in queueing["findings"]] == ["Q003"]
    assert doc["input"]["step_rows"] > 0 and doc["input"]["path"] == str(steps)
    from yaotu_trace.commands.load import TraceInput

    full = diagnose(TraceInput(path=SAMPLES / "diag-dispatch.parquet", steps=steps)).to_dict()
    assert "Q003" in {f["id"] for f in _axes(full)["queueing"]["findings"]}


def test_no_trace_and_no_telemetry_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError):
        diagnose(None)
    code, out, err = run_cli(["diagnose"], capsys)
    assert code == ExitCode.USAGE and out == ""
    assert err == ("error: trace diagnose needs a TRACE to judge, or engine telemetry alone: "
                   "--metrics FILE (a server log or Prometheus export) or --steps FILE\n")
    code, _, err = run_cli(["diagnose", "--metrics", str(LOGS / "vllm_v1_issue43295.log"),
                            "--map", "arrival_s=ts"], capsys)
    assert code == ExitCode.USAGE and "give the trace, or drop them" in err


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_text_reports_say_telemetry_only(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["diagnose", "--metrics", str(LOGS / "vllm_generated_mixed.log"),
                              "-f", fmt], capsys)
    assert code == ExitCode.OK, err
    words = " ".join(out.split())  # the table wraps its lines
    if fmt == "table":
        assert out.splitlines()[0] == "verdict: kv_memory (kv_capacity) (telemetry only)"
        assert "format telemetry only" in words and "prompt content none" in words
    else:
        assert "0 requests, format `telemetry only`." in out
    assert "judged without a request trace" in words
    assert "needs a request trace: preemptions × the requests' mean" in words  # the ledger


def test_cli_json_from_a_server_log_in_a_subprocess() -> None:
    """The installed entry point, as a user runs it first."""
    result = subprocess.run(
        [sys.executable, "-m", "yaotu_trace", "diagnose", "--metrics",
         str(LOGS / "vllm_generated_mixed.log"), "--format", "json"],
        capture_output=True, text=True, check=False, timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert list(jsonschema.Draft202012Validator(json_schema()).iter_errors(doc)) == []
    statuses = {a["name"]: a["status"] for a in doc["axes"]}
    assert statuses == {"queueing": "insufficient_data", "kv_memory": "bottleneck",
                        "prefix_reuse": "insufficient_data",
                        "pd_interference": "insufficient_data"}


def test_the_docs_examples_give_the_verdicts_they_show(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/diagnose.md, "From telemetry alone": each command and the verdict printed under it."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "diagnose.md").read_text()
    section = text.split("## From telemetry alone", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"^trace (diagnose .+)\n    (verdict: .+)$", section, re.MULTILINE)
    assert len(examples) == 3
    root = Path(__file__).resolve().parents[2]
    for command, verdict in examples:
        args = [str(root / a) if a.startswith("tests/") else a for a in shlex.split(command)]
        code, out, err = run_cli(args, capsys)
        assert code == ExitCode.OK, err
        assert out.splitlines()[0] == verdict
